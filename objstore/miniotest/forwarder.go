package miniotest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// Forwarder is a TCP proxy to a real server (a MinIO) that a test can cut
// (its listener and every connection closed: the bucket unreachable) and
// restore on the same address.
type Forwarder struct {
	t      testing.TB
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
	delay  atomic.Int64 // nanoseconds each chunk of the server's answers waits (SetDelay)
}

// SetDelay makes every answer of the server wait d before its first byte
// reaches the client: a slow bucket that still answers (0: none).
func (f *Forwarder) SetDelay(d time.Duration) { f.delay.Store(int64(d)) }

// asked notes that the client sent something: the server's next write
// begins an answer.
type asked struct {
	w       io.Writer
	pending *atomic.Bool
}

func (a asked) Write(p []byte) (int, error) {
	n, err := a.w.Write(p)
	a.pending.Store(true)
	return n, err
}

// delayedWriter is the client side of a connection: the first write of
// each answer waits the forwarder's delay.
type delayedWriter struct {
	w       io.Writer
	delay   *atomic.Int64
	pending *atomic.Bool
}

func (d delayedWriter) Write(p []byte) (int, error) {
	if n := d.delay.Load(); n > 0 && d.pending.Swap(false) {
		time.Sleep(time.Duration(n))
	}
	return d.w.Write(p)
}

// NewForwarder starts a Forwarder to target on a free loopback port; it is
// cut when the test ends.
func NewForwarder(t testing.TB, target string) *Forwarder {
	f := &Forwarder{t: t, target: target}
	f.up("127.0.0.1:0")
	t.Cleanup(f.Cut)
	return f
}

// Addr is the address clients connect to.
func (f *Forwarder) Addr() string { return f.addr }

// Restore listens again on the same address.
func (f *Forwarder) Restore() { f.up(f.addr) }

func (f *Forwarder) up(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.ln, f.addr = ln, ln.Addr().String()
	f.mu.Unlock()
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			pending := new(atomic.Bool)
			f.wg.Go(func() { io.Copy(asked{s, pending}, c); s.Close() })
			f.wg.Go(func() { io.Copy(delayedWriter{c, &f.delay, pending}, s); c.Close() })
		}
	})
}

// Cut closes the listener and every connection: the server is unreachable
// until Restore.
func (f *Forwarder) Cut() {
	f.mu.Lock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// StoreBehindForwarder starts a MinIO server and returns an S3 store on
// it, under prefix in Bucket, reached through a Forwarder the test can
// cut; the client retries a failed request at most maxRetries times. Both
// end with the test.
func StoreBehindForwarder(t testing.TB, prefix string, maxRetries int) (*s3.Store, *Forwarder) {
	t.Helper()
	endpoint, _, _ := StartMinIO(t)
	fw := NewForwarder(t, endpoint)
	store, err := s3.New(s3.Config{Endpoint: fw.Addr(), Region: "us-east-1", Bucket: Bucket, Prefix: prefix,
		Insecure: true, PathStyle: true, AccessKey: AccessKey, SecretKey: SecretKey, MaxRetries: maxRetries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, fw
}
