package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	jetstream "github.com/bluesky-social/jetstream"
	"github.com/bluesky-social/jetstream/segment"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
)

// TestJetstream2SegmentFixture reads a real sealed archive segment (the
// Jetstream module's own fixture: the 23 records of a real repository as
// creates, testdata/jetstream/v2) the way the Jetstream v2 source receives its
// events, through commitOp, and holds every record to the same record in
// the real repository export the segment was written from
// (testdata/jetstream/corpus/repo.car, decoded by the CAR decoder): the
// same atproto data model, the same links. And a segment
// with one byte of a block flipped is refused (the block's zstd checksum).
func TestJetstream2SegmentFixture(t *testing.T) {
	fh := map[string]event.Op{}
	car, err := os.ReadFile(filepath.Join("..", "testdata", "jetstream", "corpus", "repo.car"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := event.DecodeCAR(car, func(op *event.Op) error {
		if op.Record != nil {
			fh[op.DID+"/"+op.Collection+"/"+op.RKey] = *op
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "testdata", "jetstream", "v2", "golden_corpus_segment.jss")
	r, err := segment.Open(segment.ReaderConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ex extract.Extractor
	creates, linked := 0, 0
	for i := range len(r.Blocks()) {
		evs, err := r.DecodeBlock(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind != segment.KindCreate {
				t.Fatalf("block %d: event of kind %v; the fixture holds creates", i, ev.Kind)
			}
			var op event.Op
			commitOp(&op, &jetstream.Commit{Operation: jetstream.OpCreate, Collection: ev.Collection, Rkey: ev.Rkey, Rev: ev.Rev, RecordCBOR: ev.Payload})
			if op.Skip != "" || op.Record == nil {
				t.Fatalf("%s/%s/%s: skipped %q", ev.DID, ev.Collection, ev.Rkey, op.Skip)
			}
			want, ok := fh[ev.DID+"/"+ev.Collection+"/"+ev.Rkey]
			if !ok || ev.Rev != info.Rev {
				t.Fatalf("%s/%s/%s rev %s: not in the repository (rev %s)", ev.DID, ev.Collection, ev.Rkey, ev.Rev, info.Rev)
			}
			if !reflect.DeepEqual(op.Record, want.Record) || op.Action != event.ActionCreate {
				t.Fatalf("%s/%s/%s: from the archive %v, from the repository %v", ev.DID, ev.Collection, ev.Rkey, op.Record, want.Record)
			}
			got, _ := ex.Extract(op.Record)
			n := len(got)
			exp, _ := ex.Extract(want.Record)
			if !reflect.DeepEqual(got, exp) {
				t.Fatalf("%s/%s/%s: links %v, from the repository %v", ev.DID, ev.Collection, ev.Rkey, got, exp)
			}
			creates++
			linked += n
		}
	}
	if creates != 23 || creates != len(fh) {
		t.Fatalf("%d creates in the fixture, want 23, every record of the repository (%d)", creates, len(fh))
	}
	t.Logf("%d records from a real sealed segment, %d links: equal to the repository's", creates, linked)

	// One byte of the first block's compressed data flipped.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := r.Blocks()[0].Offset + 8 + 20
	b[off] ^= 0x40
	bad := filepath.Join(t.TempDir(), "flipped.jss")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rb, err := segment.Open(segment.ReaderConfig{Path: bad})
	if err == nil {
		defer rb.Close()
		_, err = rb.DecodeBlock(0)
	}
	if err == nil {
		t.Fatal("a segment with a flipped byte in its first block decoded")
	}
	t.Logf("flipped byte refused: %v", err)
}

// TestJetstream2CutDownload: an archive download whose connection drops
// before the end of its body is counted as archive_cut; a whole one, or a
// request that is not a download, is not.
func TestJetstream2CutDownload(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body := bytes.Repeat([]byte("x"), 1<<16)
		if r.URL.Query().Get("range") != "" {
			// A range answer whose body ends early but cleanly (a proxy
			// that closes its chunked answer).
			rw.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(body)-1, len(body)))
			rw.WriteHeader(http.StatusPartialContent)
			rw.Write(body[:len(body)/2])
			return
		}
		rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if r.URL.Query().Get("cut") == "" {
			rw.Write(body)
			return
		}
		rw.Write(body[:len(body)/2])
		rw.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer srv.Close()
	var skips []string
	j := &Jetstream2{OnSkip: func(r string) { skips = append(skips, r) }}
	for _, c := range []struct {
		path string
		cut  bool
	}{
		{"/xrpc/network.bsky.jetstream.getSegment?name=a", false},
		{"/xrpc/network.bsky.jetstream.getSegment?name=a&cut=1", true},
		{"/xrpc/network.bsky.jetstream.getBlock?segment=a&blockIndex=0&cut=1", true},
		{"/xrpc/network.bsky.jetstream.getSegment?name=a&range=1", true},
		{"/xrpc/network.bsky.jetstream.listSegments?cut=1", false},
	} {
		before := len(skips)
		resp, err := j.httpClient().Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := len(skips) - before; (got == 1) != c.cut || (c.cut && skips[before] != "archive_cut") {
			t.Errorf("%s: %d counted (%v), read error %v", c.path, got, skips[before:], err)
		}
	}
}

// TestNewJetstream2: the source URL names the server (http or https) and
// optionally the file of an API key; the key comes from that file, else
// from $EDDY_JETSTREAM_API_KEY, never from the URL itself.
func TestNewJetstream2(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("file-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvJetstreamAPIKey, "env-key")
	for _, c := range []struct {
		raw, url, key string
		bad           bool
	}{
		{"https://jetstream.example.net", "https://jetstream.example.net", "env-key", false},
		{"https://jetstream.example.net?compact=false", "https://jetstream.example.net", "env-key", false},
		{"https://jetstream.example.net?compact=maybe", "", "", true},
		{"http://127.0.0.1:6008/xrpc/anything", "http://127.0.0.1:6008", "env-key", false},
		{"https://jetstream.example.net?api_key_file=" + keyFile, "https://jetstream.example.net", "file-key", false},
		{"https://jetstream.example.net?api_key=secret", "", "", true},
		{"https://jetstream.example.net?api_key_file=/nonexistent/key", "", "", true},
		{"wss://jetstream.example.net", "", "", true},
		{"https://", "", "", true},
	} {
		j, err := NewJetstream2(c.raw, nil)
		if (err != nil) != c.bad {
			t.Errorf("%s: error %v", c.raw, err)
			continue
		}
		if err == nil && (j.URL != c.url || j.APIKey != c.key) {
			t.Errorf("%s: url %q key %q; want %q %q", c.raw, j.URL, j.APIKey, c.url, c.key)
		}
		if err == nil && j.NoCompaction != strings.Contains(c.raw, "compact=false") {
			t.Errorf("%s: NoCompaction %v", c.raw, j.NoCompaction)
		}
	}
	src, err := ParseSource("jetstream2+https://jetstream.example.net", nil)
	if err != nil || src.Name() != "jetstream2" || src.Live() {
		t.Fatalf("ParseSource: %v, %v", src, err)
	}
}

// TestArchiveBlockError: the client's errors for a whole block or
// segment it could not read (the session stops and plans again) are told
// from one event it left out and its live tail reconnecting (the stream
// goes on), by the client's own wording.
func TestArchiveBlockError(t *testing.T) {
	for msg, block := range map[string]bool{
		`jetstream: decode block 1 of "seg_0000000000.jss": segment: zstd decompress: corrupt input`: true,
		`jetstream: read block 2 of "seg_0000000001.jss": unexpected EOF`:                            true,
		`jetstream: parse segment header "seg_0000000000.jss": bad magic`:                            true,
		`jetstream: getBlock 3 of "seg_0000000000.jss": 500 Internal Server Error`:                   true,
		`jetstream: getSegment "seg_0000000000.jss": context deadline exceeded`:                      true,
		`jetstream: live tail reconnecting: read: connection reset by peer`:                          false,
		`jetstream: decode live frame: record: invalid JSON`:                                         false,
		`segment: decode row 7: cbor: unexpected end`:                                                false,
	} {
		if got := archiveBlockError(errors.New(msg)); got != block {
			t.Errorf("%s: block error %v, want %v", msg, got, block)
		}
	}
}
