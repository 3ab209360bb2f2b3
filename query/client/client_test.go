package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/query"
	"github.com/miekg/dns"
)

func TestDNSResolverAddr(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:5353", "127.0.0.1", "[::1]:53"} {
		if _, err := DNSResolver(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "dns.example:53", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:x"} {
		if _, err := DNSResolver(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// dnsServer answers name with the A records ips and any other name
// NXDOMAIN; it counts the questions.
func dnsServer(t *testing.T, name string, ips ...string) (string, *atomic.Int64) {
	var asked atomic.Int64
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		asked.Add(1)
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		switch {
		case q.Name != name:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			for _, ip := range ips {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.ParseIP(ip).To4()})
			}
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String(), &asked
}

// One name, three addresses from a real DNS server: the first refuses
// connections, the second answers 503, the third answers; the client says
// the third answered after three attempts. A name the server does not know
// is an error naming it, not a query sent elsewhere.
func TestFailoverThroughDNS(t *testing.T) {
	var hits [2]atomic.Int64
	unavailable := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits[0].Add(1)
		http.Error(w, "catching up", http.StatusServiceUnavailable)
	})}
	good := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits[1].Add(1)
		w.Header().Set("X-Eddy-Generation", "7")
		w.Write([]byte(`{"backlinks":{"$.subject":["at://did:plc:a/app.bsky.feed.like/1"]},"cursor":null}`))
	})}
	// One port on three loopback addresses; nothing listens on the first.
	var port string
	for try := 0; try < 20 && port == ""; try++ {
		l2, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(l2.Addr().String())
		l3, err := net.Listen("tcp", "127.0.0.3:"+p)
		if err != nil {
			l2.Close()
			continue
		}
		port = p
		go unavailable.Serve(l2)
		go good.Serve(l3)
	}
	if port == "" {
		t.Fatal("no port free on 127.0.0.2 and 127.0.0.3")
	}
	t.Cleanup(func() { unavailable.Close(); good.Close() })
	addr, asked := dnsServer(t, "eddy.test.", "127.0.0.1", "127.0.0.2", "127.0.0.3")
	res, err := DNSResolver(addr)
	if err != nil {
		t.Fatal(err)
	}
	c := New("http://eddy.test:" + port)
	c.Resolver = res
	page, ans, err := c.ListBacklinks(context.Background(), "did:plc:a", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Node != "http://127.0.0.3:"+port || ans.Attempts != 3 || ans.Generation != 7 || len(page.Backlinks["$.subject"]) != 1 {
		t.Fatalf("answer %+v, page %+v", ans, page)
	}
	if hits[0].Load() != 1 || hits[1].Load() != 1 || asked.Load() == 0 {
		t.Fatalf("503 node asked %d times, good node %d, DNS server %d", hits[0].Load(), hits[1].Load(), asked.Load())
	}

	c = New("http://nothere.test:" + port)
	c.Resolver = res
	_, _, err = c.ListBacklinks(context.Background(), "did:plc:a", "", 10)
	if err == nil || !strings.Contains(err.Error(), "resolve nothere.test") {
		t.Fatalf("unknown name: %v", err)
	}
	if hits[1].Load() != 1 {
		t.Fatal("a query for an unknown name reached a node")
	}
	// A 4xx is the answer, not a reason to try another node.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":"InvalidRequest","message":"limit must be an integer from 1 to 1000"}`))
	}))
	defer bad.Close()
	c = New(bad.URL + ",http://127.0.0.3:" + port)
	ans, err = c.Get(context.Background(), "/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"limit": {"0"}}, &page)
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Status != 400 || e.Name != "InvalidRequest" || ans.Attempts != 1 {
		t.Fatalf("4xx: %v, %+v", err, ans)
	}
}

// When every node fails, the last one's error answer (a 429 or a 5xx)
// stays reachable with its XRPC name, message, status and Retry-After;
// the ones before are named in the error's text.
func TestEveryNodeFailedKeepsTheLastAnswer(t *testing.T) {
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"NotReady","message":"this node is catching up with the cluster"}`))
	}))
	defer notReady.Close()
	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error":"RateLimitExceeded","message":"this client asked more than 500 queries a second of this node"}`))
	}))
	defer limited.Close()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer proxy.Close()

	var page Backlinks
	ans, err := New(notReady.URL, limited.URL).Get(context.Background(), "/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"did:plc:a"}}, &page)
	var e *Error
	if err == nil || !errors.As(err, &e) || ans.Attempts != 2 {
		t.Fatalf("two nodes failing: %v (%+v)", err, ans)
	}
	if e.Status != 429 || e.Name != "RateLimitExceeded" || !strings.Contains(e.Message, "500 queries") || e.RetryAfter != 3*time.Second {
		t.Fatalf("the last node's answer: %+v, want its 429 RateLimitExceeded with Retry-After 3 s", e)
	}
	for _, want := range []string{"NotReady", "RateLimitExceeded", notReady.URL, limited.URL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// The order reversed: the 503's.
	_, err = New(limited.URL, notReady.URL).Get(context.Background(), "/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"did:plc:a"}}, &page)
	if !errors.As(err, &e) || e.Status != 503 || e.Name != "NotReady" || e.RetryAfter != time.Second {
		t.Fatalf("the last node's answer: %v (%+v), want its 503 NotReady", err, e)
	}
	// A last answer that is not an XRPC body: its status alone.
	_, err = New(limited.URL, proxy.URL).Get(context.Background(), "/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"did:plc:a"}}, &page)
	if !errors.As(err, &e) || e.Status != 502 || e.Name != "" || e.RetryAfter != 0 || !strings.Contains(err.Error(), "HTTP 502") {
		t.Fatalf("a proxy's 502 last: %v (%+v)", err, e)
	}
}

// One attempt outlasts the longest a node takes to answer (its query
// timeout and a refused query's delay), so a slow node that answers is
// not abandoned and its query asked of every other node.
func TestAttemptOutlastsTheServer(t *testing.T) {
	longest := query.QueryTimeout + query.DefaultRefusalDelay*3/2
	if DefaultTimeout <= longest {
		t.Fatalf("DefaultTimeout %v: a node may take %v to answer", DefaultTimeout, longest)
	}
	if c := New("http://127.0.0.1:1"); c.HTTP.Timeout != DefaultTimeout {
		t.Fatalf("New's attempt timeout %v, want %v", c.HTTP.Timeout, DefaultTimeout)
	}
}

// Clients made one per query share one pool of connections: each made a
// pool of its own, left open, and a node refuses a client's 65th
// connection.
func TestClientsShareConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"total":1}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	for range 50 {
		var out struct{ Total int }
		if _, err := New(srv.URL).Get(context.Background(), "/xrpc/x", nil, &out); err != nil {
			t.Fatal(err)
		}
		if _, err := (&Client{Addrs: []string{srv.URL}}).Get(context.Background(), "/xrpc/x", nil, &out); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n > 2 {
		t.Fatalf("100 queries of clients made one a query opened %d connections", n)
	}
}

// An answer that says it is stale (X-Eddy-Stale: a node cut off from every
// leader) is kept only when no other node answers without it: the next
// node is asked, and its answer wins; alone, the stale one is returned,
// saying so.
func TestStaleAnswerOnlyWhenNoneBetter(t *testing.T) {
	node := func(total int, stale string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stale != "" {
				w.Header().Set("X-Eddy-Stale", stale)
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"total":%d}`, total)
		}))
	}
	cut, fresh := node(1, "no contact with a leader for 45s"), node(2, "")
	defer cut.Close()
	defer fresh.Close()
	var out struct{ Total int }
	ans, err := New(cut.URL, fresh.URL).Get(context.Background(), "/xrpc/x", nil, &out)
	if err != nil || out.Total != 2 || ans.Stale != "" || ans.Node != fresh.URL {
		t.Fatalf("a stale node first, a fresh one second: %v, %+v, %+v", err, out, ans)
	}
	out.Total = 0
	ans, err = New(cut.URL).Get(context.Background(), "/xrpc/x", nil, &out)
	if err != nil || out.Total != 1 || ans.Stale == "" {
		t.Fatalf("the stale node alone: %v, %+v, %+v", err, out, ans)
	}
}
