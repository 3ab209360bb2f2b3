package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
)

// httpError is an answer other than 200 from a relay, a PLC directory or
// a PDS.
type httpError struct {
	status int
	// body is the answer's XRPC error and message, else the start of its
	// body: printable text of at most errorBodyMax bytes, since it goes
	// into the backfill's checkpoint and `eddy-ctl backfill status`.
	body string
	// retryAfter is the answer's Retry-After (0: none), at most
	// retryAfterMax.
	retryAfter time.Duration
	// xrpc is the answer's XRPC error name ("": not an XRPC error body).
	xrpc string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

const (
	// errorBodyMax bounds the text an error answer leaves in the state
	// (a proxy's HTML error page is kilobytes, for every repository of
	// its host).
	errorBodyMax = 256
	// retryAfterMax bounds the wait a Retry-After asks before a try.
	retryAfterMax = time.Minute
)

// newHTTPError makes the error of resp, whose body (or its start) is body.
func newHTTPError(resp *http.Response, body []byte, now time.Time) *httpError {
	var xe struct{ Error string }
	json.Unmarshal(body, &xe)
	return &httpError{status: resp.StatusCode, body: errorText(body), retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now), xrpc: xe.Error}
}

// errorText is an error answer's XRPC "error: message", else its body's
// start, printable and at most errorBodyMax bytes.
func errorText(body []byte) string {
	s := string(body)
	var xe struct{ Error, Message string }
	if json.Unmarshal(body, &xe) == nil && xe.Error != "" {
		s = xe.Error
		if xe.Message != "" {
			s += ": " + xe.Message
		}
	}
	var b strings.Builder
	for _, r := range strings.TrimSpace(s) {
		if b.Len() >= errorBodyMax {
			b.WriteString("…")
			break
		}
		switch {
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// parseRetryAfter reads a Retry-After header (seconds, or an HTTP date),
// at most retryAfterMax; 0 when absent or unreadable.
func parseRetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), retryAfterMax)
}

// remoteClient is the client for hosts a DID document names.
func (b *Backfill) remoteClient() *http.Client {
	if b.HTTP != nil {
		return b.HTTP
	}
	b.setup()
	return b.remoteHTTP
}

// privateAllowed: b.Private, or by default whether the relay, the PLC
// directory or DIDWeb configured is on a private address.
func (b *Backfill) privateAllowed() bool {
	if b.Private != nil {
		return *b.Private
	}
	for _, raw := range []string{b.Relay, b.PLC, b.DIDWeb} {
		if u, err := url.Parse(raw); err == nil && u.Hostname() != "" {
			if u.Hostname() == "localhost" {
				return true
			}
			if a, err := netip.ParseAddr(u.Hostname()); err == nil && !publicAddr(a) {
				return true
			}
		}
	}
	return false
}

// errNotPublic: a DID document named a host on a non-public address.
var errNotPublic = errors.New("not a public address")

// publicDialer dials public addresses only: the check runs on the
// address being connected to, after name resolution, so a name that
// resolves to a private address is refused too.
func publicDialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if !publicAddr(ap.Addr()) {
				return fmt.Errorf("%s: %w", address, errNotPublic)
			}
			return nil
		}}
}

// notPublic are unicast ranges that are not the public internet's (beside
// what netip calls private): carrier-grade NAT's shared space, "this
// network", benchmarking, the reserved class E, IETF protocol assignments,
// and the IPv6 prefixes that embed an IPv4 address anyone may pick
// (IPv4-compatible, NAT64, 6to4, Teredo), site-local and discard-only.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"), netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"), netip.MustParsePrefix("192.0.0.0/24"), netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("2001::/32"), netip.MustParsePrefix("fec0::/10"), netip.MustParsePrefix("100::/64"),
}

// publicAddr reports whether a is a public unicast address.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

func (b *Backfill) getJSON(ctx context.Context, u string, max int64, out any) error {
	return b.getJSONWith(ctx, b.client(), u, max, out)
}

func (b *Backfill) getJSONWith(ctx context.Context, hc *http.Client, u string, max int64, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, max))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return newHTTPError(resp, body, time.Now())
	}
	return json.Unmarshal(body, out)
}

// resolvePDS finds a DID's PDS from its DID document.
func (b *Backfill) resolvePDS(ctx context.Context, did string) (string, error) {
	var docURL string
	hc := b.client() // the configured PLC directory, or DIDWeb
	switch {
	case strings.HasPrefix(did, "did:plc:"):
		if b.PLC == "" {
			return "", errors.New("no PLC directory configured")
		}
		docURL = strings.TrimRight(b.PLC, "/") + "/" + did
	case strings.HasPrefix(did, "did:web:") && b.DIDWeb != "":
		docURL = strings.TrimRight(b.DIDWeb, "/") + "/" + did
	case strings.HasPrefix(did, "did:web:"):
		u, err := didWebURL(did)
		if err != nil {
			return "", err
		}
		docURL = u
		hc = b.remoteClient() // a host the DID names
	default:
		return "", fmt.Errorf("DID method of %q not supported", did)
	}
	var doc struct {
		Service []struct {
			ID              string `json:"id"`
			Type            string `json:"type"`
			ServiceEndpoint string `json:"serviceEndpoint"`
		} `json:"service"`
	}
	// A document is at most a megabyte: a host that takes longer than
	// didDocTimeout to send one (a did:web host that stalls) fails the
	// try, not the request's whole timeout.
	dctx, cancel := context.WithTimeout(ctx, didDocTimeout)
	defer cancel()
	if err := b.getJSONWith(dctx, hc, docURL, didDocBytesMax, &doc); err != nil {
		return "", fmt.Errorf("DID document of %s: %w", did, err)
	}
	for _, s := range doc.Service {
		if strings.HasSuffix(s.ID, "#atproto_pds") || s.Type == "AtprotoPersonalDataServer" {
			if u, err := url.Parse(s.ServiceEndpoint); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
				// A base URL, nothing else: a path, query or user part
				// would let a DID document pick what the leader asks.
				if u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
					return "", fmt.Errorf("DID document of %s: PDS endpoint %q is not a base URL (scheme://host[:port])", did, errorText([]byte(s.ServiceEndpoint)))
				}
				return u.Scheme + "://" + u.Host, nil
			}
		}
	}
	return "", fmt.Errorf("DID document of %s names no PDS", did)
}

func (b *Backfill) hostSlot(host string) chan struct{} {
	b.hostMu.Lock()
	defer b.hostMu.Unlock()
	if b.hosts == nil {
		b.hosts = map[string]chan struct{}{}
	}
	ch := b.hosts[host]
	if ch == nil {
		n := b.PerHost
		if n <= 0 {
			n = DefaultBackfillPerHost
		}
		ch = make(chan struct{}, n)
		b.hosts[host] = ch
	}
	return ch
}

// hostDelay reserves the next start on host under PerHostRate and
// returns how long to wait for it (0: now).
func (b *Backfill) hostDelay(host string, now time.Time) time.Duration {
	if b.PerHostRate <= 0 {
		return 0
	}
	b.hostMu.Lock()
	defer b.hostMu.Unlock()
	if b.hostNext == nil {
		b.hostNext = map[string]time.Time{}
	}
	at := b.hostNext[host]
	if at.Before(now) {
		at = now
	}
	b.hostNext[host] = at.Add(time.Duration(float64(time.Second) / b.PerHostRate))
	return at.Sub(now)
}

// fetchRepo returns the repository CAR of did, read into buf (reused; the
// result may be a larger buffer), share growing with it.
func (b *Backfill) fetchRepo(ctx context.Context, did string, buf []byte, share *memShare) ([]byte, error) {
	pds, err := b.resolvePDS(ctx, did)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(pds)
	slot := b.hostSlot(u.Host)
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-slot }()
	if d := b.hostDelay(u.Host, time.Now()); d > 0 {
		if err := sleepCtx(ctx, d); err != nil {
			return nil, err
		}
	}
	// The PDS must keep sending: a fetch that gets less than progressMin
	// bytes in a progressWindow (but while it waits for its memory share)
	// is given up, not left to the request's whole timeout, for which it
	// would hold its host's slot and one of the backfill's.
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	prog := &progress{}
	go prog.watch(pctx, cancel, progressWindow)
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, pds+"/xrpc/com.atproto.sync.getRepo?did="+url.QueryEscape(did), nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.remoteClient().Do(req)
	if err != nil {
		return nil, prog.cause(pctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, err := io.ReadAll(io.LimitReader(resp.Body, didDocBytesMax))
		if err != nil {
			return nil, prog.cause(pctx, err)
		}
		return nil, newHTTPError(resp, body, time.Now())
	}
	car, err := readBody(prog.reader(resp.Body), resp.ContentLength, repoBytesMax, buf, func(n int) error {
		return prog.wait(func() error { return share.grow(ctx, n) })
	})
	return car, prog.cause(pctx, err)
}

// didDocTimeout bounds the fetch of one DID document (a variable for the
// tests).
var didDocTimeout = 30 * time.Second

// didWebURL is the address of a did:web's document: a host name alone
// (atproto's did:web has no path), over HTTPS; only localhost and
// 127.0.0.1, which test setups use, may add a port and are asked over
// HTTP. Before, a name that began with either (localhost.example.net)
// could choose a port, a path and a query, and plain HTTP.
func didWebURL(did string) (string, error) {
	host, err := url.PathUnescape(strings.TrimPrefix(did, "did:web:"))
	name, port, hasPort := strings.Cut(host, ":")
	local := name == "localhost" || name == "127.0.0.1"
	if err != nil || name == "" || strings.ContainsAny(host, "/?#@%\\[] ") ||
		hasPort && (!local || port == "" || strings.Trim(port, "0123456789") != "") {
		return "", fmt.Errorf("did:web %q: unsupported host", did)
	}
	if local {
		return "http://" + host + "/.well-known/did.json", nil
	}
	return "https://" + host + "/.well-known/did.json", nil
}

// gone reports whether an error says the repository no longer exists (it
// is then not retried: its revocation stands): an XRPC error that names
// it so, or 410 Gone (the PLC directory's answer for a tombstoned DID).
// A bare 404 is not: a proxy's error page, a PDS being deployed or a PLC
// mirror behind answer one for a repository that exists, whose links a
// revocation would take away.
func gone(err error) bool {
	var he *httpError
	if !errors.As(err, &he) {
		return false
	}
	switch he.xrpc {
	case "RepoNotFound", "RepoTakendown", "RepoDeactivated", "RepoSuspended":
		return he.status >= 400 && he.status < 500
	}
	return he.status == http.StatusGone
}
