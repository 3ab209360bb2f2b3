package query

import (
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// smallBufListener gives each accepted connection a small send buffer: an
// answer of a few KB then stands for one of megabytes against default
// buffers.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// A client that sends a query and stops reading its answer holds neither
// the view (the cluster's garbage collection waits for every view served)
// nor a node-wide query slot once the answer is encoded, and its
// connection is dropped after answerWriteTimeout.
func TestStalledReaderHoldsNothing(t *testing.T) {
	defer func(d time.Duration) { answerWriteTimeout = d }(answerWriteTimeout)
	answerWriteTimeout = time.Second
	f := newFixture(t)
	for i := 0; i < LimitMax; i++ {
		f.write(like(i))
	}
	g1 := f.flush()
	srv := httptest.NewUnstartedServer(f.qs.Handler())
	srv.Listener = smallBufListener{srv.Listener}
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(2048)
	q := url.Values{"target": {post}, "limit": {fmt.Sprint(LimitMax)}}.Encode()
	fmt.Fprintf(c, "GET /xrpc/blue.cerulea.backlinks.listBacklinks?%s HTTP/1.1\r\nHost: x\r\n\r\n", q)
	time.Sleep(500 * time.Millisecond) // answered, and stuck writing
	f.write(like(LimitMax))
	g2 := f.flush()
	deadline := time.Now().Add(3 * time.Second)
	for f.views.OldestServed() == g1 || len(f.qs.sem) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a client that stopped reading holds generation %d (current %d) and %d node-wide query slot(s)", f.views.OldestServed(), g2, len(f.qs.sem))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Past the write timeout the server gives up on it: reading now gets
	// the part that was sent, then the connection's end, not the whole
	// answer.
	time.Sleep(answerWriteTimeout + 500*time.Millisecond)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatalf("after the write timeout: %d bytes read, then %v; want the connection closed", n, err)
	}
	t.Logf("read %d bytes of the answer before the server closed the connection", n)
}
