package lsm

import (
	"errors"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// A dictionary that compresses far past 64x (a backfill's: one large
// rev, clock id 0, DIDs sharing most of their bytes) decodes: a bound on
// the compression ratio once refused such a real table at its own
// self-check, failing its flush for ever (CI, TestScheduledFlushKeepsRepoWhole).
func TestDictionaryCompressesFarPast64x(t *testing.T) {
	const e = 20000
	d := &accountDict{dids: make([]uint64, e), clocks: make([]uint16, e), revs: make([]uint64, e)}
	for i := range e {
		d.dids[i] = 1<<63 | uint64(1000000+i%4)
		d.revs[i] = 1 << 50
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := appendDict(nil, d, enc)
	t.Logf("%d entries in %d bytes", e, len(b))
	got, err := decodeDict(b, TableFormatVersion)
	if err != nil {
		t.Fatal(err)
	}
	for i := range e {
		if got.dids[i] != d.dids[i] || got.revs[i] != d.revs[i] || got.clocks[i] != 0 {
			t.Fatalf("entry %d differs", i)
		}
	}
}

// A dictionary's bound depends on its table's format version: version 6
// reads and writes up to 2^22 entries, an older version's table of more
// than 2^20 is corrupt (no older build wrote one), and the writer's
// ordering keeps the bound of the version it writes.
func TestDictionaryBoundByVersion(t *testing.T) {
	const e = 1<<20 + 3
	var tab countTable
	tab.init(e)
	d := &accountDict{dids: make([]uint64, e), clocks: make([]uint16, e), revs: make([]uint64, e)}
	for i := range e {
		d.dids[i] = uint64(5000000 + i)
		d.revs[i] = uint64(1 + i%7)
		a := account{did: d.dids[i]}
		tab.count(a, true)
		tab.count(a, true)
	}
	for _, v := range []struct{ version, want int }{{5, 1 << 20}, {6, e}} {
		got := orderKeys(dictKeys(&tab, false), maxDictEntries(v.version))
		if got.len() != v.want {
			t.Fatalf("version %d: a dictionary of %d entries, want %d", v.version, got.len(), v.want)
		}
		// Ties go by value: the last account (the largest DID) is the
		// last entry, or left out.
		if in := slices.Contains(got.dids, d.dids[e-1]); in != (v.want == e) {
			t.Fatalf("version %d: the last account in the dictionary: %v", v.version, in)
		}
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := appendDict(nil, d, enc)
	got, err := decodeDict(b, 6)
	if err != nil {
		t.Fatal(err)
	}
	if got.len() != e || got.dids[e-1] != d.dids[e-1] || got.revs[e-1] != d.revs[e-1] {
		t.Fatalf("version 6: %d entries, last %d/%d", got.len(), got.dids[e-1], got.revs[e-1])
	}
	if _, err := decodeDict(b, 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("version 5 with %d entries: %v, want corrupt", e, err)
	}
	if _, err := decodeDict(b[:dictHeaderSize], 6); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a truncated section: %v, want corrupt", err)
	}
}
