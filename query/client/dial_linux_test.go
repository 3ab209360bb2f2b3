package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"
	"time"
)

// silentNode listens on loopback with an accept queue of one and never
// accepts, then fills the queue: a further connection's SYN is dropped,
// as by a node that is down behind a firewall that drops packets.
func silentNode(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	for range 4 { // the queue fills; later connections wait or fail
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return addr
}

// A node that does not answer at all is left after DialTimeout, and the
// next node asked: it held each query for the whole DefaultTimeout.
func TestSilentNodeLeftAfterDialTimeout(t *testing.T) {
	silent := silentNode(t)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"total":7}`))
	}))
	defer ok.Close()
	c := New(silent, ok.URL)
	var out struct{ Total int }
	start := time.Now()
	ans, err := c.Get(context.Background(), "/xrpc/blue.microcosm.links.getBacklinksCount", url.Values{"subject": {"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"}}, &out)
	took := time.Since(start)
	if err != nil || out.Total != 7 {
		t.Fatalf("%v, %+v", err, out)
	}
	if took > DialTimeout+3*time.Second {
		t.Fatalf("answered by %s after %v: the silent node held it past DialTimeout (%v)", ans.Node, took, DialTimeout)
	}
	t.Logf("answered by %s after %v", ans.Node, took.Round(time.Millisecond))
}
