package lsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestShuffleMatchesDefinition checks shuffle and unshuffleWords (the SSE2
// versions where they are built, and the Go ones) against the shuffle's
// definition, byte k of record i at k*n+i, for widths that are multiples
// of 8 and record counts around the 16-record blocks, with and without
// a ragged tail.
func TestShuffleMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, w := range []int{8, 16, 24, 32, 64, 72} {
		for _, n := range []int{1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 2047, 2048} {
			t.Run(fmt.Sprintf("w%d/n%d", w, n), func(t *testing.T) {
				recs := make([]byte, n*w)
				for i := range recs {
					recs[i] = byte(r.Uint32())
				}
				want := make([]byte, len(recs))
				for i := range n {
					for k := range w {
						want[k*n+i] = recs[i*w+k]
					}
				}
				for _, f := range []struct {
					name string
					fn   func(dst, recs []byte, w int)
				}{{"shuffle", shuffle}, {"shuffleGo", shuffleGo}} {
					got := make([]byte, len(recs))
					f.fn(got, recs, w)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: first difference at %d", f.name, firstDiff(got, want))
					}
				}
				for _, f := range []struct {
					name string
					fn   func(dst, src []byte, w int, t frameTransform)
				}{{"unshuffleWords", unshuffleWords}, {"unshuffleWordsGo", unshuffleWordsGo}} {
					got := make([]byte, len(recs))
					f.fn(got, want, w, transformShuffle)
					if !bytes.Equal(got, recs) {
						t.Fatalf("%s: first difference at %d", f.name, firstDiff(got, recs))
					}
				}
			})
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func BenchmarkShuffle(b *testing.B) {
	recs := make([]byte, FrameBytesMax)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range recs {
		recs[i] = byte(r.Uint32())
	}
	planes := make([]byte, len(recs))
	for _, f := range []struct {
		name string
		fn   func(dst, recs []byte, w int)
	}{{"shuffle", shuffle}, {"shuffleGo", shuffleGo}} {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(recs)))
			for b.Loop() {
				f.fn(planes, recs, 64)
			}
		})
	}
	for _, f := range []struct {
		name string
		fn   func(dst, src []byte, w int, t frameTransform)
	}{{"unshuffleWords", unshuffleWords}, {"unshuffleWordsGo", unshuffleWordsGo}} {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(recs)))
			for b.Loop() {
				f.fn(recs, planes, 64, transformShuffle)
			}
		})
	}
}
