package lsm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The version test hook writes what the code of that version wrote: the
// fixtures of testdata/v2 to testdata/v6, byte for byte, from the same
// records (so the hook's tables in the other tests are real tables of
// those versions, and a change of the encoder's code that was to keep
// its bytes, such as the account dictionary's tables, is checked to).
func TestVersionHookMatchesFixtures(t *testing.T) {
	for _, fx := range v1Fixtures {
		if fx.version < 2 {
			continue
		}
		base := filepath.Join("testdata", fmt.Sprintf("v%d", fx.version), fx.name)
		data, meta, err := BuildTable(fx.format, fx.recs(), TableOptions{transform: fx.transform, transSet: true, frameMax: fx.frameMax, FilterSeed: 99, FilterBits: fixtureFilterBits(fx), version: fx.version})
		if err != nil {
			t.Fatal(err)
		}
		wantData, err := os.ReadFile(base + ".data")
		if err != nil {
			t.Fatal(err)
		}
		wantMeta, err := os.ReadFile(base + ".meta")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, wantData) || !bytes.Equal(meta, wantMeta) {
			t.Fatalf("v%d %s: the version hook writes %d + %d bytes, the version %d code wrote %d + %d", fx.version, fx.name, len(data), len(meta), fx.version, len(wantData), len(wantMeta))
		}
	}
}

// Version 3 predicts a backfilled account's revs from its dictionary
// entry: a backfill-like table's revs cost a fraction of what they did,
// the table as a whole shrinks, and tables whose revs follow time (live
// events) stay within a few bytes of version 2.
func TestDictRevs(t *testing.T) {
	revBytes := func(f Format, recs []byte, v2 bool) (revs, total int, dictRevs int) {
		t.Helper()
		data, meta, err := BuildTable(f, recs, TableOptions{version: map[bool]int{true: 2, false: 0}[v2]})
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.dict.revs {
			if r != 0 {
				dictRevs++
			}
		}
		sizes := map[string]int{}
		for i := range m.NumFrames() {
			off, n := m.ByteRange(i, i)
			if err := columnStreamSizes(data[off:off+n], m.layout, sizes); err != nil {
				t.Fatal(err)
			}
		}
		return sizes["revs"], len(data) + len(meta), dictRevs
	}
	backfill := synthBackfillBacklinks(21, 60000)
	r2, t2, d2 := revBytes(BacklinkFormat, backfill, true)
	r3, t3, d3 := revBytes(BacklinkFormat, backfill, false)
	n := len(backfill) / BacklinkFormat.Width
	t.Logf("backfill-like, %d links: revs %.2f -> %.2f B/link, table %.2f -> %.2f B/link, %d accounts with a rev", n,
		float64(r2)/float64(n), float64(r3)/float64(n), float64(t2)/float64(n), float64(t3)/float64(n), d3)
	if d2 != 0 || d3 == 0 {
		t.Fatalf("accounts with a rev: version 2 %d, version 3 %d", d2, d3)
	}
	if r3*2 > r2 || t3 >= t2 {
		t.Fatalf("version 3 revs %d bytes (version 2: %d), table %d bytes (version 2: %d)", r3, r2, t3, t2)
	}
	for _, tc := range []struct {
		name string
		f    Format
		recs []byte
	}{
		{"live links", BacklinkFormat, synthSortedBacklinks(22, 60000)},
		{"revocations", RevocationFormat, synthRevocations(23, 30000)},
	} {
		_, t2, _ := revBytes(tc.f, tc.recs, true)
		_, t3, _ := revBytes(tc.f, tc.recs, false)
		t.Logf("%s: %d -> %d bytes", tc.name, t2, t3)
		if t3 > t2+t2/100 {
			t.Fatalf("%s: version 3 %d bytes, version 2 %d", tc.name, t3, t2)
		}
	}
}
