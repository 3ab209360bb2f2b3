package lsm

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// sizesOfVersion builds a table of recs in format version and returns
// the stored bytes of its frames' columns by name (columnStreamSizes) and
// of the whole table; every frame must be columnar.
func sizesOfVersion(t *testing.T, f Format, recs []byte, version int) (map[string]int, int) {
	t.Helper()
	data, meta, err := BuildTable(f, recs, TableOptions{version: version})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int{}
	for i := range m.NumFrames() {
		off, n := m.ByteRange(i, i)
		if err := columnStreamSizes(data[off:off+n], m.layout, sizes); err != nil {
			t.Fatal(err)
		}
	}
	if sizes["fallback frames"] != 0 {
		t.Fatalf("version %d: %d bytes of frames not columnar", version, sizes["fallback frames"])
	}
	return sizes, len(data) + len(meta)
}

// revsOfVersion returns the bytes of the revs streams of a table of recs
// in format version, and of the whole table.
func revsOfVersion(t *testing.T, f Format, recs []byte, version int) (revs, total int) {
	t.Helper()
	sizes, total := sizesOfVersion(t, f, recs, version)
	return sizes["revs"], total
}

// Version 8 predicts the revs of records whose rev is not their
// account's along a chain of their own: a table of a backfill's records
// with live ones among them (as a merge of the two makes) stores its revs
// in fewer bytes than version 7, and tables whose records all
// follow time (a live tail's, revocations) stay as they were.
func TestRevChain(t *testing.T) {
	mixed := synthBackfillBacklinks(61, 60000)
	n := len(mixed) / BacklinkFormat.Width
	r7, t7 := revsOfVersion(t, BacklinkFormat, mixed, 7)
	r8, t8 := revsOfVersion(t, BacklinkFormat, mixed, 8)
	t.Logf("backfill with live records, %d links: revs %.3f -> %.3f B/link, table %.3f -> %.3f B/link", n,
		float64(r7)/float64(n), float64(r8)/float64(n), float64(t7)/float64(n), float64(t8)/float64(n))
	// The synthetic live records' revs step 1-3 an event, so the chain's
	// residuals grow with the events between two of them: about a tenth
	// less here; the bench's backfill, whose live tail takes a stamp a
	// millisecond, saves more (docs/scale.md).
	if r8*100 > r7*95 || t8 >= t7 {
		t.Fatalf("version 8 revs %d bytes (version 7: %d), table %d bytes (version 7: %d)", r8, r7, t8, t7)
	}
	// Version 9 stores a frame's revs in their sparse form where most
	// codes are 0; none of this table's frames is such, and its revs
	// keep version 8's bytes.
	if r9, _ := revsOfVersion(t, BacklinkFormat, mixed, 9); r9 != r8 {
		t.Fatalf("version 9 revs %d bytes, version 8 %d", r9, r8)
	}
	for _, tc := range []struct {
		name string
		f    Format
		recs []byte
	}{
		{"live links", BacklinkFormat, synthSortedBacklinks(62, 60000)},
		{"revocations", RevocationFormat, synthRevocations(63, 30000)},
	} {
		_, t7 := revsOfVersion(t, tc.f, tc.recs, 7)
		_, t8 := revsOfVersion(t, tc.f, tc.recs, 8)
		t.Logf("%s: %d -> %d bytes", tc.name, t7, t8)
		if t8 > t7+t7/100 {
			t.Fatalf("%s: version 8 %d bytes, version 7 %d", tc.name, t8, t7)
		}
	}
}

// Revs the model does not expect round-trip in version 7 and in the
// versions with the chain: an account's rev and its neighbours, 0 and the
// largest rev, revs following time up or down, and random ones, in
// columnar frames; with most records at their account's rev, in version
// 9's sparse form too.
func TestRevChainRoundTrip(t *testing.T) {
	sparse := 0
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0x7e5))
		recs := synthBackfillBacklinks(70+seed, 4000)
		w := BacklinkFormat.Width
		accRev := map[uint64]uint64{}
		for o := 0; o < len(recs); o += w {
			l := link.GetBacklink(recs[o:])
			base, ok := accRev[l.Source.DID]
			if !ok {
				base = []uint64{0, 1, math.MaxUint64, rng.Uint64(), 1 << 40}[rng.IntN(5)]
				accRev[l.Source.DID] = base
			}
			k := rng.IntN(10)
			if seed%2 == 1 && rng.IntN(10) != 0 {
				k = 9 // mostly the account's rev: frames in the sparse form
			}
			switch k {
			case 0:
				l.SourceRev = base + 1
			case 1:
				l.SourceRev = base - 1
			case 2:
				l.SourceRev = 0
			case 3:
				l.SourceRev = math.MaxUint64
			case 4:
				l.SourceRev = rng.Uint64()
			case 5:
				l.SourceRev = l.Source.RKey >> 20
			case 6:
				l.SourceRev = math.MaxUint64 - l.Source.RKey>>20
			default:
				l.SourceRev = base
			}
			l.Put(recs[o:])
		}
		SortRecords(recs, w)
		recs = synthDedup(recs, w)
		for _, version := range []int{7, 8, 9} {
			m, frames := colTableVersion(t, BacklinkFormat, recs, 500, version)
			var got, buf []byte
			columnar := 0
			for i, fr := range frames {
				var err error
				if buf, err = m.DecodeFrame(i, fr, buf); err != nil {
					t.Fatalf("seed %d version %d frame %d: %v", seed, version, i, err)
				}
				got = append(got, buf...)
				if fr[0] == frameColumns {
					columnar++
					f := colFrame{n: int(m.Frames[i].Records)}
					if _, err := f.readHeader(fr[1:], m.layout); err != nil {
						t.Fatal(err)
					}
					if f.revsSparse {
						sparse++
					}
				}
			}
			if !bytes.Equal(got, recs) {
				t.Fatalf("seed %d version %d: records differ", seed, version)
			}
			if columnar*2 < len(frames) {
				t.Fatalf("seed %d version %d: %d of %d frames columnar", seed, version, columnar, len(frames))
			}
		}
	}
	if sparse == 0 {
		t.Fatal("no frame in the sparse form")
	}
}

// A table of a backfill with a few live records among them, as a merge
// of the two makes: most rev codes are 0, and version 9's sparse form
// takes fewer bytes than version 8's, which pays at least a bit a record.
func TestRevsSparse(t *testing.T) {
	recs := synthMostlyBackfill(66, 60000)
	n := len(recs) / BacklinkFormat.Width
	r8, t8 := revsOfVersion(t, BacklinkFormat, recs, 8)
	r9, t9 := revsOfVersion(t, BacklinkFormat, recs, 9)
	t.Logf("backfill with 1 live record in 40, %d links: revs %.3f -> %.3f B/link, table %.3f -> %.3f B/link", n,
		float64(r8)/float64(n), float64(r9)/float64(n), float64(t8)/float64(n), float64(t9)/float64(n))
	if r9*100 > r8*80 {
		t.Fatalf("version 9 revs %d bytes, version 8 %d", r9, r8)
	}
	// The fixture of testdata/v9 built from such records has frames in
	// the sparse form, and decodes (TestV1Fixtures).
	metaB, err := os.ReadFile("testdata/v9/links-sparse-revs.meta")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/v9/links-sparse-revs.data")
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(metaB)
	if err != nil {
		t.Fatal(err)
	}
	sparse := 0
	for i := range m.NumFrames() {
		off, n := m.ByteRange(i, i)
		f := colFrame{n: int(m.Frames[i].Records)}
		if data[off] != frameColumns {
			continue
		}
		if _, err := f.readHeader(data[off+1:off+n], m.layout); err != nil {
			t.Fatal(err)
		}
		if f.revsSparse {
			sparse++
		}
	}
	if sparse == 0 {
		t.Fatalf("no frame of %d in the sparse form", m.NumFrames())
	}
}

// The codes of a chained record of a dictionary account skip the code
// of the account's rev and are one to one.
func TestRevChainCodes(t *testing.T) {
	for _, e := range []uint64{0, 1, 2, 7, math.MaxUint64 - 1, math.MaxUint64} {
		var seen []uint64
		for _, s := range []uint64{0, 1, 2, 3, 6, 7, 8, math.MaxUint64 - 2, math.MaxUint64 - 1, math.MaxUint64} {
			if s == e {
				continue
			}
			c := revChainCode(s, e)
			if c == 0 {
				t.Fatalf("e %d: residual %d has code 0", e, s)
			}
			if got := revChainResidual(c, e); got != s {
				t.Fatalf("e %d: residual %d -> code %d -> %d", e, s, c, got)
			}
			seen = append(seen, c)
		}
		slices.Sort(seen)
		if len(slices.Compact(seen)) != len(seen) {
			t.Fatalf("e %d: codes collide: %v", e, seen)
		}
	}
}

// targetsOfVersion returns the bytes of the target columns of a table of
// recs in format version, and of the whole table.
func targetsOfVersion(t *testing.T, recs []byte, version int) (targets, total int) {
	t.Helper()
	sizes, total := sizesOfVersion(t, BacklinkFormat, recs, version)
	for name, b := range sizes {
		if strings.HasPrefix(name, "targets") {
			targets += b
		}
	}
	return targets, total
}

// Version 9 stores a group's target rkey difference and its DID's rank
// in the account dictionary in planes: the targets take fewer bytes in
// tables of a backfill's and of a live tail's links.
func TestTargetPlanes(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []byte
	}{
		{"backfill", synthBackfillBacklinks(64, 60000)},
		{"live", synthSortedBacklinks(65, 60000)},
	} {
		n := len(tc.recs) / BacklinkFormat.Width
		g8, t8 := targetsOfVersion(t, tc.recs, 8)
		g9, t9 := targetsOfVersion(t, tc.recs, 9)
		t.Logf("%s, %d links: targets %.3f -> %.3f B/link, table %.3f -> %.3f B/link", tc.name, n,
			float64(g8)/float64(n), float64(g9)/float64(n), float64(t8)/float64(n), float64(t9)/float64(n))
		if g9 >= g8 || t9 >= t8 {
			t.Fatalf("%s: version 9 targets %d bytes (version 8: %d), table %d (version 8: %d)", tc.name, g9, g8, t9, t8)
		}
	}
}
