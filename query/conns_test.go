package query

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Over real TCP: a client keeps at most Conns connections open; its next
// is answered 429 RateLimitExceeded without its request being read, and
// closed; another client, a trusted proxy, and the first client once one
// of its connections closed, are served.
func TestClientConns(t *testing.T) {
	l := NewClientLimiter(ClientLimits{Rate: 1000, Burst: 1000, InFlight: 8, Conns: 2, RefusalDelay: 20 * time.Millisecond,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.4/32")}})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan string, 16) // the paths the server read
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read <- r.URL.Path
		io.WriteString(w, "ok")
	})}
	go srv.Serve(l.Listener(inner))
	t.Cleanup(func() { srv.Close() })
	addr := inner.Addr().String()

	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ask := func(c net.Conn, path string) (*http.Response, string) {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: eddy\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		return r, string(body)
	}
	a1, a2 := dial("127.0.0.2"), dial("127.0.0.2")
	for i, c := range []net.Conn{a1, a2} {
		if r, _ := ask(c, "/a"); r.StatusCode != 200 {
			t.Fatalf("a's connection %d: %d", i, r.StatusCode)
		}
		<-read
	}
	a3 := dial("127.0.0.2")
	r, body := ask(a3, "/a3")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(body, `"RateLimitExceeded"`) {
		t.Fatalf("a's third connection: %d (Retry-After %q) %s", r.StatusCode, r.Header.Get("Retry-After"), body)
	}
	// A page on another origin reads the refusal as it reads the server's
	// own 429s: allowed, with its Retry-After exposed.
	if o, e := r.Header.Get("Access-Control-Allow-Origin"), r.Header.Get("Access-Control-Expose-Headers"); o != "*" || !strings.Contains(e, "Retry-After") {
		t.Fatalf("a's third connection's 429: Access-Control-Allow-Origin %q, Access-Control-Expose-Headers %q", o, e)
	}
	a3.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := a3.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a's third connection stayed open after its 429 (%d, %v)", n, err)
	}
	select {
	case p := <-read:
		t.Fatalf("the server read %s from a connection past its client's bound", p)
	default:
	}
	if got := testutil.ToFloat64(l.Limited.WithLabelValues("connections")); got != 1 {
		t.Fatalf("connections refused: %v, want 1", got)
	}
	// Another client, and a trusted proxy with more than the bound.
	if r, _ := ask(dial("127.0.0.3"), "/b"); r.StatusCode != 200 {
		t.Fatalf("another client: %d", r.StatusCode)
	}
	<-read
	for i := range 3 {
		if r, _ := ask(dial("127.0.0.4"), "/proxy"); r.StatusCode != 200 {
			t.Fatalf("the trusted proxy's connection %d: %d", i, r.StatusCode)
		}
		<-read
	}
	// One of a's connections closes: a may open another.
	a1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, _ := ask(dial("127.0.0.2"), "/again")
		if r.StatusCode == 200 {
			<-read
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a's connection closed, yet its new one is still refused")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Without limits, the listener is the one given.
	if (*ClientLimiter)(nil).Listener(inner) != inner {
		t.Fatal("a nil limiter wrapped the listener")
	}
}
