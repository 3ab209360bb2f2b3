// Package client is a small Go client of Eddy's query API with the failover
// any user of a round-robin DNS name wants: given several node URLs, or one
// URL whose host name resolves to several addresses, it tries each in turn
// on a connection failure, a timeout, or a 5xx or 429 answer, and says
// which node answered.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds one attempt against one node. It is longer than
// the longest a node takes to answer a query (its 10 s, query.QueryTimeout,
// in which a query waits for minGeneration, an execution slot or its turn
// at a large read, plus a refusal's delay of under half a second), so a
// node that is slow but answering is not abandoned, its query asked again
// of every other node.
const DefaultTimeout = 15 * time.Second

// DialTimeout bounds connecting to a node: one that does not answer at all
// (down, its packets dropped) is left after it, not after DefaultTimeout.
const DialTimeout = 2 * time.Second

// transport is every default client's: one pool of connections, as the
// default transport's was (a pool a client would leave open per client
// made, and a node counts a client's connections).
var transport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	return t
}()

// newHTTP is the client of each attempt: DefaultTimeout in all,
// DialTimeout to connect.
func newHTTP() *http.Client { return &http.Client{Timeout: DefaultTimeout, Transport: transport} }

// responseBytesMax bounds an answer read.
const responseBytesMax = 64 << 20

// Client queries Eddy nodes.
type Client struct {
	// Addrs are node base URLs (http://host:port) or host:port.
	Addrs []string
	// HTTP is the client used for each attempt (DefaultTimeout in all,
	// DialTimeout to connect).
	HTTP *http.Client
	// Resolver expands a host name into addresses (net.DefaultResolver);
	// DNSResolver makes one that asks a given DNS server.
	Resolver *net.Resolver
}

// DNSResolver returns a resolver that sends every DNS query to the server
// at addr (ip:port, or ip for port 53) instead of the servers of
// /etc/resolv.conf, over UDP or TCP as the Go resolver chooses. As with any
// Go resolver, a name listed in /etc/hosts is answered from there.
func DNSResolver(addr string) (*net.Resolver, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "53"
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("DNS server %q: want ip:port", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return nil, fmt.Errorf("DNS server %q: bad port", addr)
	}
	server := net.JoinHostPort(host, port)
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		},
	}, nil
}

// New returns a client of addrs (comma-separated lists are split).
func New(addrs ...string) *Client {
	var out []string
	for _, a := range addrs {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return &Client{Addrs: out, HTTP: newHTTP()}
}

// Error is an error answer of the API. A 4xx other than 429 is the
// answer (not asked of another node); after a 429 or a 5xx the next node
// is asked, and when every node failed the last such answer is in the
// error Get returns (errors.As).
type Error struct {
	Status  int
	Name    string `json:"error"` // "" when the body was not an XRPC error (a proxy's page)
	Message string `json:"message"`
	// RetryAfter is the answer's Retry-After (0: none).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("%s (%d): %s", e.Name, e.Status, e.Message)
}

// apiError reads an error answer.
func apiError(resp *http.Response, body []byte) *Error {
	var x struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	json.Unmarshal(body, &x)
	e := &Error{Status: resp.StatusCode, Name: x.Error, Message: x.Message}
	if n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && n > 0 {
		e.RetryAfter = time.Duration(n) * time.Second
	}
	return e
}

// Answer says which node answered and at which manifest generation.
type Answer struct {
	Node       string // base URL tried
	Generation uint64
	Attempts   int
	// Stale is the node's X-Eddy-Stale: why it cannot vouch for its
	// view's age (cut off from every leader). Such an answer is kept only
	// when no other node answers without it.
	Stale string
}

// endpoints expands the addresses: each URL whose host resolves to
// several IPs becomes one endpoint per IP, in the resolver's order. A name
// that does not resolve is reported, not handed to the dialer (which would
// use another resolver).
func (c *Client) endpoints(ctx context.Context) ([]string, []error) {
	var out []string
	var errs []error
	res := c.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	for _, a := range c.Addrs {
		if !strings.Contains(a, "://") {
			a = "http://" + a
		}
		u, err := url.Parse(a)
		if err != nil || u.Host == "" {
			errs = append(errs, fmt.Errorf("node address %q: not a URL", a))
			continue
		}
		host, port := u.Hostname(), u.Port()
		if net.ParseIP(host) != nil {
			out = append(out, strings.TrimRight(u.String(), "/"))
			continue
		}
		ips, err := res.LookupHost(ctx, host)
		if err == nil && len(ips) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("resolve %s: %w", host, err))
			continue
		}
		for _, ip := range ips {
			v := *u
			if port != "" {
				v.Host = net.JoinHostPort(ip, port)
			} else {
				v.Host = ip
			}
			out = append(out, strings.TrimRight(v.String(), "/"))
		}
	}
	return out, errs
}

// Get calls path with params on the first node that answers, decoding the
// JSON answer into out.
func (c *Client) Get(ctx context.Context, path string, params url.Values, out any) (Answer, error) {
	hc := c.HTTP
	if hc == nil {
		hc = newHTTP()
	}
	eps, errs := c.endpoints(ctx)
	if len(eps) == 0 {
		if len(errs) == 0 {
			return Answer{}, errors.New("no node address")
		}
		return Answer{}, fmt.Errorf("no node address: %w", errors.Join(errs...))
	}
	lastAPI := -1    // the errs entry that wraps the last node's error answer
	var stale []byte // the first answer that said it is stale, kept in case no node does better
	var staleAns Answer
	for i, base := range eps {
		ans := Answer{Node: base, Attempts: i + 1}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path+"?"+params.Encode(), nil)
		if err != nil {
			return ans, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", base, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, responseBytesMax))
		resp.Body.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", base, err))
			continue
		}
		ans.Generation, _ = strconv.ParseUint(resp.Header.Get("X-Eddy-Generation"), 10, 64)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			// Only the last of these stays an *Error in the chain, so
			// errors.As finds it; the ones before keep their text.
			if lastAPI >= 0 {
				errs[lastAPI] = errors.New(errs[lastAPI].Error())
			}
			lastAPI = len(errs)
			errs = append(errs, fmt.Errorf("%s: %w", base, apiError(resp, b)))
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return ans, apiError(resp, b)
		}
		if ans.Stale = resp.Header.Get("X-Eddy-Stale"); ans.Stale != "" && i < len(eps)-1 {
			if stale == nil {
				stale, staleAns = b, ans
			}
			errs = append(errs, fmt.Errorf("%s: a stale answer (%s)", base, ans.Stale))
			continue
		}
		if err := json.Unmarshal(b, out); err != nil {
			return ans, fmt.Errorf("%s: bad answer: %w", base, err)
		}
		return ans, nil
	}
	if stale != nil { // no node did better
		staleAns.Attempts = len(eps)
		if err := json.Unmarshal(stale, out); err != nil {
			return staleAns, fmt.Errorf("%s: bad answer: %w", staleAns.Node, err)
		}
		return staleAns, nil
	}
	return Answer{Attempts: len(eps)}, fmt.Errorf("every node failed: %w", errors.Join(errs...))
}

// Backlinks is one page of listBacklinks.
type Backlinks struct {
	Backlinks map[string][]string `json:"backlinks"`
	Cursor    *string             `json:"cursor"`
}

// ListBacklinks calls blue.cerulea.backlinks.listBacklinks.
func (c *Client) ListBacklinks(ctx context.Context, target, cursor string, limit int) (Backlinks, Answer, error) {
	p := url.Values{"target": {target}}
	if cursor != "" {
		p.Set("cursor", cursor)
	}
	if limit > 0 {
		p.Set("limit", strconv.Itoa(limit))
	}
	var out Backlinks
	ans, err := c.Get(ctx, "/xrpc/blue.cerulea.backlinks.listBacklinks", p, &out)
	return out, ans, err
}
