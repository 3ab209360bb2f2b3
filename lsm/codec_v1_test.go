package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// Version-1 fixtures: tables written by the format version 1 code (frame
// transforms XOR+shuffle and delta+shuffle, before the columnar codecs),
// kept in testdata/v1 so that every later binary proves it still reads
// them. They were generated once, by the version 1 code, with
//
//	EDDY_REWRITE_V1_FIXTURES=1 go test ./lsm -run TestV1Fixtures
//
// (only meaningful with that code: do not regenerate them with a newer
// BuildTable, or they stop being version 1 tables). Each fixture is a
// data object, a meta object and an .expect file: the record count, the
// xxh3 of all records in order, and the records of a few prefixes.

type v1Fixture struct {
	name      string
	format    Format
	transform frameTransform
	recs      func() []byte
	frameMax  int
}

var v1Fixtures = []v1Fixture{
	{"links-xor", BacklinkFormat, transformXORShuffle, func() []byte { return synthSortedBacklinks(11, 1200) }, 128},
	{"links-delta", BacklinkFormat, transformDeltaShuffle, func() []byte { return synthSortedBacklinks(12, 600) }, 100},
	{"revocations-delta", RevocationFormat, transformDeltaShuffle, func() []byte { return synthRevocations(13, 1000) }, 200},
}

// rewriteV1 regenerates the fixtures (see above).
var rewriteV1 = os.Getenv("EDDY_REWRITE_V1_FIXTURES") == "1"

// v1Expect renders what a fixture must decode to.
func v1Expect(f Format, recs []byte) string {
	w, p := f.Width, f.PrefixLen
	var b strings.Builder
	fmt.Fprintf(&b, "records=%d xxh3=%016x\n", len(recs)/w, xxh3.Hash(recs))
	// The records of three prefixes: the first, one in the middle, the last.
	for _, i := range []int{0, len(recs) / w / 2, len(recs)/w - 1} {
		pre := recs[i*w : i*w+p]
		got := tblScanPrefixSorted(recs, w, pre)
		fmt.Fprintf(&b, "prefix %x: %d records xxh3=%016x\n", pre, len(got)/w, xxh3.Hash(got))
	}
	return b.String()
}

func TestV1Fixtures(t *testing.T) {
	for _, fx := range v1Fixtures {
		t.Run(fx.name, func(t *testing.T) {
			base := filepath.Join("testdata", "v1", fx.name)
			if rewriteV1 {
				recs := fx.recs()
				data, meta, err := BuildTable(fx.format, recs, TableOptions{transform: fx.transform, transSet: true, frameMax: fx.frameMax, FilterSeed: 99})
				if err != nil {
					t.Fatal(err)
				}
				for ext, b := range map[string][]byte{".data": data, ".meta": meta, ".expect": []byte(v1Expect(fx.format, recs))} {
					if err := os.WriteFile(base+ext, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			data, err := os.ReadFile(base + ".data")
			if err != nil {
				t.Fatal(err)
			}
			metaB, err := os.ReadFile(base + ".meta")
			if err != nil {
				t.Fatal(err)
			}
			expect, err := os.ReadFile(base + ".expect")
			if err != nil {
				t.Fatal(err)
			}
			if v := int(metaB[8]) | int(metaB[9])<<8; v != 1 {
				t.Fatalf("fixture meta has version %d, want 1", v)
			}
			m, err := DecodeMeta(metaB)
			if err != nil {
				t.Fatal(err)
			}
			if m.transform != fx.transform || m.Format != fx.format || m.NumFrames() < 3 {
				t.Fatalf("fixture meta: %v", m)
			}
			var recs, buf []byte
			for i := range m.NumFrames() {
				off, n := m.ByteRange(i, i)
				buf, err = m.DecodeFrame(i, data[off:off+n], buf)
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, buf...)
			}
			if got := v1Expect(fx.format, recs); got != string(expect) {
				t.Fatalf("fixture decodes to\n%s\nwant\n%s", got, expect)
			}
			// A prefix read through the fences and the filter, as a query
			// does, gives the same records as a scan.
			w, p := fx.format.Width, fx.format.PrefixLen
			for i := 0; i < len(recs)/w; i += 37 {
				pre := recs[i*w : i*w+p]
				if !m.MayContain(pre) {
					t.Fatalf("filter misses prefix %x", pre)
				}
				if got, want := tblLookup(t, m, data, pre), tblScanPrefixSorted(recs, w, pre); !bytes.Equal(got, want) {
					t.Fatalf("prefix %x: lookup %d records, scan %d", pre, len(got)/w, len(want)/w)
				}
			}
			// Every flipped byte of a frame is corruption.
			for i := range m.NumFrames() {
				off, n := m.ByteRange(i, i)
				for k := off; k < off+n; k += 7 {
					cp := bytes.Clone(data[off : off+n])
					cp[k-off] ^= 0x10
					if _, err := m.DecodeFrame(i, cp, nil); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("frame %d byte %d flipped: %v", i, k-off, err)
					}
				}
			}
		})
	}
}
