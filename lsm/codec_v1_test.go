package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"

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
	version   int // the format version of the code that wrote it (testdata/v<version>)
	name      string
	format    Format
	transform frameTransform
	recs      func() []byte
	frameMax  int
}

var v1Fixtures = []v1Fixture{
	{1, "links-xor", BacklinkFormat, transformXORShuffle, func() []byte { return synthSortedBacklinks(11, 1200) }, 128},
	{1, "links-delta", BacklinkFormat, transformDeltaShuffle, func() []byte { return synthSortedBacklinks(12, 600) }, 100},
	{1, "revocations-delta", RevocationFormat, transformDeltaShuffle, func() []byte { return synthRevocations(13, 1000) }, 200},
	// Version 2: the columnar codec, its revs predicted from time only
	// (written by the version 2 code with EDDY_REWRITE_V2_FIXTURES=1).
	{2, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(14, 3000) }, 700},
	{2, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(15, 2000) }, 500},
	// Version 3: a backfilled account's revs predicted from its dictionary
	// entry, a group's first time from the previous record's (written by
	// the version 3 code with EDDY_REWRITE_V3_FIXTURES=1).
	{3, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(16, 3000) }, 700},
	{3, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(17, 2000) }, 500},
	// Version 4: an account is the pair (DID, clock id), a compaction's
	// run shares one dictionary (written by the version 4 code with
	// EDDY_REWRITE_V4_FIXTURES=1).
	{4, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(18, 3000) }, 700},
	{4, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(19, 2000) }, 500},
	// Version 5: an account is its DID, each record's clock id a column
	// of its own, a dictionary of at most 2^20 entries (written by the
	// version 5 code with EDDY_REWRITE_V5_FIXTURES=1).
	{5, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(20, 3000) }, 700},
	{5, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(21, 2000) }, 500},
	// Version 6: version 5 with a dictionary of up to 2^22 accounts
	// (written by the version 6 code with EDDY_REWRITE_V6_FIXTURES=1).
	{6, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(22, 3000) }, 700},
	{6, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(23, 2000) }, 500},
	// Version 7: version 6 with frames of up to 128 KiB of records
	// (written by the version 7 code with EDDY_REWRITE_V7_FIXTURES=1).
	{7, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(24, 3000) }, 700},
	{7, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(25, 2000) }, 500},
	// Version 8: version 7 with revs predicted along the chain of records
	// whose rev is not their account's (written by the version 8 code
	// with EDDY_REWRITE_V8_FIXTURES=1).
	{8, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(26, 3000) }, 700},
	{8, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(27, 2000) }, 500},
	// Version 9: version 8 with targets in planes (their DIDs as ranks in
	// the account dictionary) and revs in a sparse form where most codes
	// are 0 (written by the version 9 code with EDDY_REWRITE_V9_FIXTURES=1).
	{9, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(28, 3000) }, 700},
	{9, "links-sparse-revs", BacklinkFormat, transformColumns, func() []byte { return synthMostlyBackfill(29, 3000) }, 700},
	{9, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(30, 2000) }, 500},
	// Version 10: version 9 with the ranks, and where smaller the time
	// columns, in their magnitude form (written by the version 10 code
	// with EDDY_REWRITE_V10_FIXTURES=1): links-magnitudes has TIDs whose
	// microseconds are uniform below the millisecond, whose frames take
	// that form for their time columns too.
	{10, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(31, 3000) }, 700},
	{10, "links-magnitudes", BacklinkFormat, transformColumns, func() []byte { return synthUniformMicros(32, 3000) }, 700},
	{10, "revocations-columns", RevocationFormat, transformColumns, func() []byte { return synthRevocations(33, 2000) }, 500},
	// Version 11: version 10 with frame transform 5, shuffle and S2 (the
	// fast form of flushes and merges of flushes), its filter a binary
	// fuse filter (written by the version 11 code with
	// EDDY_REWRITE_V11_FIXTURES=1).
	{11, "links-columns", BacklinkFormat, transformColumns, func() []byte { return synthBackfillBacklinks(34, 3000) }, 700},
	{11, "links-fast", BacklinkFormat, transformShuffleS2, func() []byte { return synthBackfillBacklinks(35, 3000) }, 700},
	{11, "revocations-fast", RevocationFormat, transformShuffleS2, func() []byte { return synthRevocations(36, 2000) }, 500},
	// Version 12: version 11 with a blocked filter in the links tree's
	// tables of the fast form (fixtureFilterBits; written by the version
	// 12 code with EDDY_REWRITE_V12_FIXTURES=1).
	{12, "links-fast-blocked", BacklinkFormat, transformShuffleS2, func() []byte { return synthBackfillBacklinks(37, 3000) }, 700},
}

// fixtureFilterBits is the filter a fixture's table was written with: the
// engine's for its tree and form (the blocked filter for the links tree's
// fast form from version 12), else the default.
func fixtureFilterBits(fx v1Fixture) int {
	if fx.version >= 12 && fx.transform == transformShuffleS2 && fx.format == BacklinkFormat {
		return FilterBlocked
	}
	return 0
}

// rewriteFixtures regenerates the fixtures of one version (see above).
func rewriteFixtures(version int) bool {
	return os.Getenv(fmt.Sprintf("EDDY_REWRITE_V%d_FIXTURES", version)) == "1"
}

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
			base := filepath.Join("testdata", fmt.Sprintf("v%d", fx.version), fx.name)
			if rewriteFixtures(fx.version) {
				if fx.version != TableFormatVersion {
					t.Fatalf("fixtures of version %d can only be written by that version's code", fx.version)
				}
				recs := fx.recs()
				data, meta, err := BuildTable(fx.format, recs, TableOptions{transform: fx.transform, transSet: true, frameMax: fx.frameMax, FilterSeed: 99, FilterBits: fixtureFilterBits(fx)})
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
			if v := int(metaB[8]) | int(metaB[9])<<8; v != fx.version {
				t.Fatalf("fixture meta has version %d, want %d", v, fx.version)
			}
			m, err := DecodeMeta(metaB)
			if err != nil {
				t.Fatal(err)
			}
			if m.transform != fx.transform || m.Format != fx.format || m.NumFrames() < 3 {
				t.Fatalf("fixture meta: %v", m)
			}
			if want := fixtureFilterBits(fx); want != 0 && m.filterBits != want {
				t.Fatalf("fixture meta: filter %s, want %s", filterName(m.filterBits), filterName(want))
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

// synthMostlyBackfill returns about n distinct backlinks of a few
// thousand accounts, most of them in the table's dictionary (an account
// with two records or more), all of them at
// their account's rev but one in 40 (a live record, its rev following
// time): a merge of a backfill and a live tail.
func synthMostlyBackfill(seed uint64, n int) []byte {
	recs := synthSortedBacklinks(seed, n)
	w := link.BacklinkSize
	for i := 0; i < len(recs)/w; i++ {
		l := link.GetBacklink(recs[i*w:])
		l.Source.DID = 1 + l.Source.DID%3000
		if i%40 != 0 {
			l.SourceRev = 1 + (l.Source.DID*0x9e3779b97f4a7c15)>>44
		}
		l.Put(recs[i*w:])
	}
	SortRecords(recs, w)
	return synthDedup(recs, w)
}

// synthBackfillBacklinks returns about n distinct backlinks, sorted, most
// of them stamped as a backfill stamps them: every record of an account
// at one rev (its repository's), the rest (one in five) at revs that
// follow time, as live events are.
func synthBackfillBacklinks(seed uint64, n int) []byte {
	recs := synthBacklinks(seed, n)
	w := link.BacklinkSize
	for i := 0; i < len(recs)/w; i++ {
		if i%5 == 0 {
			continue
		}
		l := link.GetBacklink(recs[i*w:])
		l.SourceRev = 1 + (l.Source.DID*0x9e3779b97f4a7c15)>>44
		l.Put(recs[i*w:])
	}
	SortRecords(recs, w)
	return synthDedup(recs, w)
}
