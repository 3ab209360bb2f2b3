package lsm

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// tblReferenceSort sorts records with a plain comparison sort.
func tblReferenceSort(buf []byte, w int) []byte {
	n := len(buf) / w
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = buf[i*w : (i+1)*w]
	}
	slices.SortFunc(recs, bytes.Compare)
	out := make([]byte, 0, n*w)
	for _, r := range recs {
		out = append(out, r...)
	}
	return append(out, buf[n*w:]...)
}

func TestSortRecordsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	widths := []int{1, 3, 8, 9, 16, 24, 32, 40, 64, 65}
	sizes := []int{0, 1, 2, 3, 47, 48, 49, 100, 257, 1000, 5000}
	for _, w := range widths {
		for _, n := range sizes {
			for _, alphabet := range []int{2, 4, 256} {
				buf := make([]byte, n*w+rng.IntN(2)*(w-1))
				for i := range buf {
					buf[i] = byte(rng.IntN(alphabet))
				}
				// Long shared prefixes and duplicates: copy some records over others.
				for range n / 4 {
					if n == 0 {
						break
					}
					a, b := rng.IntN(n), rng.IntN(n)
					k := rng.IntN(w + 1)
					copy(buf[b*w:b*w+k], buf[a*w:a*w+k])
				}
				want := tblReferenceSort(slices.Clone(buf), w)
				SortRecords(buf, w)
				if !bytes.Equal(buf, want) {
					t.Fatalf("width %d n %d alphabet %d: wrong order", w, n, alphabet)
				}
			}
		}
	}
}

func TestSortRecordsBacklinks(t *testing.T) {
	for _, w := range []int{64, 32} {
		var buf []byte
		if w == 64 {
			buf = synthBacklinks(3, 200_000)
		} else {
			buf = synthRevocations(3, 100_000)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(buf)/w, func(i, j int) {
				a, b := buf[i*w:(i+1)*w], buf[j*w:(j+1)*w]
				var tmp [32]byte
				copy(tmp[:], a)
				copy(a, b)
				copy(b, tmp[:])
			})
		}
		want := tblReferenceSort(slices.Clone(buf), w)
		SortRecords(buf, w)
		if !bytes.Equal(buf, want) {
			t.Fatalf("width %d: wrong order", w)
		}
	}
}

func TestSortRecordsLargeFallback(t *testing.T) {
	// The swap-based fallback is only used past 4G records; check it directly.
	rng := rand.New(rand.NewPCG(9, 9))
	buf := make([]byte, 999*24)
	for i := range buf {
		buf[i] = byte(rng.IntN(3))
	}
	want := tblReferenceSort(slices.Clone(buf), 24)
	r := recordSlice{buf: buf, width: 24, tmp: make([]byte, 24)}
	sort.Sort(r)
	if !bytes.Equal(buf, want) {
		t.Fatal("fallback: wrong order")
	}
}

func TestSortRecordsLarge(t *testing.T) {
	// Larger than the caches, with widths that are and are not multiples
	// of 8, and many equal first words (long runs sorted in place by later
	// words).
	rng := rand.New(rand.NewPCG(11, 12))
	for _, w := range []int{13, 24, 64} {
		n := (6<<20)/w + 5000
		buf := make([]byte, n*w)
		for i := range buf {
			buf[i] = byte(rng.IntN(256))
		}
		for i := 0; i < n; i++ {
			if rng.IntN(2) == 0 {
				copy(buf[i*w:i*w+min(w, 12)], "popularpopul") // shared prefixes
			}
		}
		want := tblReferenceSort(slices.Clone(buf), w)
		SortRecords(buf, w)
		if !bytes.Equal(buf, want) {
			t.Fatalf("width %d: wrong order", w)
		}
	}
}

// TestCompare64 checks the unrolled comparison of 64-byte records against
// bytes.Compare, on pairs that differ first in each word and at each
// byte of it, and from word 1 as the merge heap calls it (word 0 equal).
func TestCompare64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b [64]byte
	for k := range 20000 {
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		b = a
		at := k % 65 // 64: equal
		if at < 64 {
			for b[at] == a[at] {
				b[at] = byte(rng.Uint32())
			}
			for i := at + 1; i < 64; i++ {
				b[i] = byte(rng.Uint32())
			}
		}
		want := bytes.Compare(a[:], b[:])
		if got := compare64(0, &a, &b); got != want {
			t.Fatalf("compare64(0) of records differing at byte %d: %d, want %d", at, got, want)
		}
		if got := compareRecords(a[:], b[:]); got != want {
			t.Fatalf("compareRecords of records differing at byte %d: %d, want %d", at, got, want)
		}
		for from := 1; from <= 3 && at >= 8*from; from++ {
			if got := compare64(from, &a, &b); got != want {
				t.Fatalf("compare64(%d) of records differing at byte %d: %d, want %d", from, at, got, want)
			}
		}
		recs := append(append([]byte(nil), a[:]...), b[:]...)
		if got := strictlySorted(recs, 64); got != (want < 0) {
			t.Fatalf("strictlySorted of records differing at byte %d: %v, want %v", at, got, want < 0)
		}
	}
}
