package lsm

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

var halvesTarget = link.RecordID{RKey: 1 << 50, Collection: link.CollectionFirst, DID: 9}

// halvesScratch returns a scratch whose segments hold runs (each sorted
// and made distinct here), cut into frames of frameLen() records, every
// span the whole frame; and the links in all.
func halvesScratch(runs [][]link.Backlink, frameLen func() int) (*queryScratch, int) {
	s := &queryScratch{}
	total := 0
	for _, ls := range runs {
		slices.SortFunc(ls, func(a, b link.Backlink) int {
			if linkLess(&a, &b) {
				return -1
			}
			if linkLess(&b, &a) {
				return 1
			}
			return 0
		})
		ls = slices.Compact(ls) // a table's records are distinct
		total += len(ls)
		var frames [][]byte
		var spans []int
		for len(ls) > 0 {
			k := min(len(ls), frameLen())
			fr := make([]byte, k*link.BacklinkSize)
			for i := range k {
				ls[i].Put(fr[i*link.BacklinkSize:])
			}
			frames = append(frames, fr)
			spans = append(spans, 0, len(fr))
			ls = ls[k:]
		}
		s.segs = append(s.segs, mergeSeg{frames: frames, spans: spans})
		s.spans = append(s.spans, spans...)
	}
	return s, total
}

// mergeHalves gives what one merge gives: the same links in the same
// order, with or without a filter, whatever the runs' overlap; identical
// links of several runs (one position, other revs) stay next to each
// other, so the fold after the merge still sees them together.
func TestMergeHalvesMatchesMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 44))
	for trial := range 300 {
		// A pool of positions the runs draw from, so that runs share some.
		pool := make([]link.Backlink, 50+r.IntN(3000))
		for i := range pool {
			pool[i] = link.Backlink{Target: halvesTarget,
				Source:   link.RecordID{RKey: r.Uint64N(1 << 20), Collection: link.CollectionFirst + r.Uint64N(3), DID: r.Uint64N(40)},
				Location: link.MakeLocation(1+r.Uint64N(2), false)}
		}
		runs := make([][]link.Backlink, 1+r.IntN(6))
		for j := range runs {
			for range r.IntN(len(pool)) {
				l := pool[r.IntN(len(pool))]
				l.SourceRev = 1 + r.Uint64N(5)
				runs[j] = append(runs[j], l)
			}
		}
		s, total := halvesScratch(runs, func() int { return 1 + r.IntN(700) })
		var keep func(*link.Backlink) bool
		if trial%2 == 1 {
			keep = func(l *link.Backlink) bool { return l.Source.DID%3 != 0 }
		}
		want, _ := mergeSegs(nil, cloneSegs(s.segs), keep, 0)
		got := mergeHalves(make([]link.Backlink, 0, total), s, keep, total)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d (%d runs, %d links): halves gave %d links, one merge %d", trial, len(runs), total, len(got), len(want))
		}
	}
}

// BenchmarkMergeHalves: nine interleaved runs of 12,000 links, merged
// whole (one) and in halves on two goroutines.
func BenchmarkMergeHalves(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 44))
	runs := make([][]link.Backlink, 9)
	for j := range runs {
		for range 12000 {
			runs[j] = append(runs[j], link.Backlink{Target: halvesTarget, Source: link.RecordID{RKey: r.Uint64N(1 << 40), Collection: link.CollectionFirst, DID: r.Uint64N(1 << 20)}, SourceRev: 1})
		}
	}
	s, total := halvesScratch(runs, func() int { return 1024 })
	orig := cloneSegs(s.segs)
	out := make([]link.Backlink, 0, total)
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			out, _ = mergeSegs(out[:0], cloneSegs(orig), nil, 0)
		}
	})
	b.Run("halves", func(b *testing.B) {
		for b.Loop() {
			s.segs = cloneSegs(orig)
			out = mergeHalves(out[:0], s, nil, total)
		}
	})
}

// cloneSegs copies segs with their own spans (mergeHalves cuts them).
func cloneSegs(segs []mergeSeg) []mergeSeg {
	out := make([]mergeSeg, len(segs))
	for i, m := range segs {
		out[i] = mergeSeg{frames: m.frames, spans: slices.Clone(m.spans)}
	}
	return out
}
