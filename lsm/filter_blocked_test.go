package lsm

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
)

// The blocked filter holds every key it was built from, answers absent
// keys falsely at about its rate (~0.54% at 12 bits a key; 0.4-0.7% with
// the block loads of 1,000 and 200,000 keys), sizes its
// section by its header, and refuses a header that is not one of its own.
func TestBlockedFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, n := range []int{0, 1, 21, 1000, 200_000} {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = rng.Uint64()
		}
		sec, err := buildFilter([]byte("x"), keys, FilterBlocked)
		if err != nil {
			t.Fatal(err)
		}
		sec = sec[1:]
		size, err := filterSectionSize(sec, FilterBlocked)
		if err != nil || size != uint64(len(sec)) {
			t.Fatalf("%d keys: section %d bytes, its header says %d (%v)", n, len(sec), size, err)
		}
		if blocks := (len(sec) - blockedHeaderSize) / 32; blocks != max((n*blockedBitsPerKey+255)/256, 1) {
			t.Fatalf("%d keys: %d blocks", n, blocks)
		}
		for _, f := range []*filter{decodeFilter(sec, FilterBlocked, 1), mapFilter(sec, FilterBlocked, 1)} {
			for _, k := range keys {
				if !f.containsKey(k) {
					t.Fatalf("%d keys: key %016x missing", n, k)
				}
			}
			if n < 1000 {
				continue
			}
			const probes = 400_000
			fp := 0
			for range probes {
				if f.containsKey(rng.Uint64()) {
					fp++
				}
			}
			if rate := float64(fp) / probes; rate < 0.004 || rate > 0.007 {
				t.Fatalf("%d keys: false-positive rate %.4f, want ~0.0054", n, rate)
			}
		}
	}
	empty, _ := buildFilter(nil, nil, FilterBlocked)
	if f := decodeFilter(empty, FilterBlocked, 1); f.containsKey(rng.Uint64()) || f.containsKey(0) {
		t.Fatal("an empty blocked filter holds a key")
	}
	for _, h := range [][]byte{nil, make([]byte, 7), make([]byte, 8), binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 3), 1)} {
		if _, err := filterSectionSize(h, FilterBlocked); err == nil {
			t.Fatalf("header %x accepted", h)
		}
	}
}

// A meta of format version 11 with a blocked filter is corrupt: the kind
// came with version 12.
func TestBlockedFilterNeedsVersion12(t *testing.T) {
	recs := synthSortedBacklinks(5, 2000)
	_, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{Fast: true, FilterBits: FilterBlocked})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(meta)
	if err != nil || m.filterBits != FilterBlocked || m.version != 12 {
		t.Fatalf("version %d, filter %s: %v", m.version, filterName(m.filterBits), err)
	}
	// BuildTable refuses the kind below version 12 itself, before its
	// self-check's decode would.
	if _, _, err := BuildTable(BacklinkFormat, recs, TableOptions{Fast: true, FilterBits: FilterBlocked, version: 11}); err == nil || !strings.Contains(err.Error(), "blocked kind from format version 12") {
		t.Fatalf("a version 11 table with a blocked filter: %v", err)
	}
	old := append([]byte(nil), meta...)
	binary.LittleEndian.PutUint16(old[8:], 11)
	binary.LittleEndian.PutUint64(old[len(old)-8:], tblXXH3(old[:len(old)-8]))
	if _, err := DecodeMeta(old); err == nil {
		t.Fatal("a version 11 meta with a blocked filter decoded")
	}
}
