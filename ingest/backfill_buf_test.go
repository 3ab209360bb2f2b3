package ingest

import (
	"bytes"
	"io"
	"strings"
	"testing"
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
		got, err := readBody(&chunkReader{bytes.NewReader(body), 3000}, c.size, len(body), c.buf)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: %d bytes, %v", c.name, len(got), err)
		}
		if c.buf != nil && cap(c.buf) >= len(body) && &got[0] != &c.buf[:1][0] {
			t.Fatalf("%s: a buffer large enough was not reused", c.name)
		}
	}
	for _, size := range []int64{-1, int64(len(body))} {
		got, err := readBody(&chunkReader{bytes.NewReader(body), 3000}, size, len(body)-1, nil)
		if err == nil || !strings.Contains(err.Error(), "too big") {
			t.Fatalf("size %d: %d bytes read past the bound, error %v", size, len(got), err)
		}
		if len(got) > len(body) {
			t.Fatalf("size %d: read %d bytes", size, len(got))
		}
	}
	// A failing reader's error comes back.
	if _, err := readBody(io.MultiReader(strings.NewReader("abc"), errReader{}), -1, 100, nil); err != io.ErrUnexpectedEOF {
		t.Fatalf("error %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
