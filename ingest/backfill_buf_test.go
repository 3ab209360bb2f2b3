package ingest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// chunkReader returns at most n bytes per Read, as a network body does.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// TestReadBody: a repository body is read whole into a reused buffer,
// with or without a known size, and one past the bound is an error.
func TestReadBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 40_000) // 640,000 bytes
	for _, c := range []struct {
		name string
		size int64
		buf  []byte
	}{
		{"unknown size, empty buffer", -1, nil},
		{"unknown size, small buffer", -1, make([]byte, 0, 1000)},
		{"known size", int64(len(body)), make([]byte, 0, 1000)},
		{"buffer larger than body", -1, make([]byte, 0, 1<<20)},
	} {
		got, err := readBody(&chunkReader{bytes.NewReader(body), 3000}, c.size, len(body), c.buf, nil)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: %d bytes, %v", c.name, len(got), err)
		}
		if c.buf != nil && cap(c.buf) >= len(body) && &got[0] != &c.buf[:1][0] {
			t.Fatalf("%s: a buffer large enough was not reused", c.name)
		}
	}
	for _, size := range []int64{-1, int64(len(body))} {
		got, err := readBody(&chunkReader{bytes.NewReader(body), 3000}, size, len(body)-1, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "too big") {
			t.Fatalf("size %d: %d bytes read past the bound, error %v", size, len(got), err)
		}
		if len(got) > len(body) {
			t.Fatalf("size %d: read %d bytes", size, len(got))
		}
	}
	// A failing reader's error comes back.
	if _, err := readBody(io.MultiReader(strings.NewReader("abc"), errReader{}), -1, 100, nil, nil); err != io.ErrUnexpectedEOF {
		t.Fatalf("error %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// readBody asks for each buffer's size before it uses the buffer, and
// stops at the first refusal.
func TestReadBodyGrows(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 40_000)
	for _, size := range []int64{-1, int64(len(body))} {
		asked := 0
		got, err := readBody(&chunkReader{bytes.NewReader(body), 3000}, size, len(body), make([]byte, 0, 1000), func(n int) error {
			if n < asked {
				t.Errorf("size %d: asked %d after %d", size, n, asked)
			}
			asked = n
			return nil
		})
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("size %d: %d bytes, %v", size, len(got), err)
		}
		if asked < cap(got) {
			t.Fatalf("size %d: a buffer of %d bytes used, %d asked", size, cap(got), asked)
		}
		refused := errors.New("no room")
		_, err = readBody(&chunkReader{bytes.NewReader(body), 3000}, size, len(body), nil, func(n int) error {
			if n > 100_000 {
				return refused
			}
			return nil
		})
		if err != refused {
			t.Fatalf("size %d: a refusal gave %v", size, err)
		}
	}
}

// Shares of the repositories' memory: one that fits takes it at once;
// one that does not waits, holding nothing, until the others give theirs
// back; one larger than the bound takes all of it; two that each hold a
// part and want more than is left both get it in turn (no deadlock).
func TestRepoMemoryShares(t *testing.T) {
	ctx := context.Background()
	m := newRepoMemory(300)
	a, b := &memShare{m: m}, &memShare{m: m}
	if err := a.grow(ctx, 40); err != nil || a.held != 120 {
		t.Fatalf("a: held %d, %v", a.held, err)
	}
	if err := b.grow(ctx, 40); err != nil || b.held != 120 {
		t.Fatalf("b: held %d, %v", b.held, err)
	}
	// Both want 80 bytes of CAR (240 of the bound): 60 are free.
	var wg sync.WaitGroup
	order := make(chan string, 2)
	for name, s := range map[string]*memShare{"a": a, "b": b} {
		wg.Go(func() {
			if err := s.grow(ctx, 80); err != nil {
				t.Error(err)
				return
			}
			order <- name
			time.Sleep(20 * time.Millisecond)
			s.release()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("two shares growing at once never both got theirs")
	}
	if len(order) != 2 {
		t.Fatalf("%d shares grew", len(order))
	}
	// Larger than the bound: all of it, once the others are back.
	big := &memShare{m: m}
	if err := big.grow(ctx, 1_000_000); err != nil || big.held != 300 {
		t.Fatalf("big: held %d, %v", big.held, err)
	}
	c := &memShare{m: m}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.grow(wctx, 1); err == nil || c.held != 0 {
		t.Fatalf("a share beside the whole bound: held %d, %v", c.held, err)
	}
	big.release()
	if err := c.grow(ctx, 1); err != nil || c.held != 3 {
		t.Fatalf("after the big one: held %d, %v", c.held, err)
	}
}

// A size announced (Content-Length) is not taken from the memory before
// the bytes arrive: a body that announces 10 MB and sends 1,000 bytes
// before it stalls has asked for a few KB; a body longer than it
// announced is still read whole.
func TestReadBodyTrustsNoSize(t *testing.T) {
	asked := 0
	r := io.MultiReader(strings.NewReader(strings.Repeat("x", 1000)), errReader{}) // then the connection fails
	if _, err := readBody(r, 10<<20, 20<<20, nil, func(n int) error { asked = n; return nil }); err != io.ErrUnexpectedEOF || asked > 16<<10 {
		t.Fatalf("asked %d bytes of the memory for 1,000 received (%v)", asked, err)
	}
	body := bytes.Repeat([]byte("y"), 100_000)
	got, err := readBody(&chunkReader{bytes.NewReader(body), 3000}, 50_000, len(body), nil, nil)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a body longer than announced: %d bytes, %v", len(got), err)
	}
}
