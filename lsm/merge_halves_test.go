package lsm

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// mergeHalves gives what one merge gives: the same links in the same
// order, with or without a filter, whatever the runs' overlap; identical
// links of several runs (one position, other revs) are never split
// between the halves, so the fold after the merge still sees them
// together.
func TestMergeHalvesMatchesMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 44))
	target := link.RecordID{RKey: 1 << 50, Collection: link.CollectionFirst, DID: 9}
	for trial := range 300 {
		nsegs := 1 + r.IntN(6)
		// A pool of positions the runs draw from, so that runs share some.
		pool := make([]link.Backlink, 50+r.IntN(3000))
		for i := range pool {
			pool[i] = link.Backlink{Target: target,
				Source:   link.RecordID{RKey: r.Uint64N(1 << 20), Collection: link.CollectionFirst + r.Uint64N(3), DID: r.Uint64N(40)},
				Location: link.MakeLocation(1+r.Uint64N(2), false)}
		}
		s := &queryScratch{}
		var total int
		for range nsegs {
			var ls []link.Backlink
			for range r.IntN(len(pool)) {
				l := pool[r.IntN(len(pool))]
				l.SourceRev = 1 + r.Uint64N(5)
				ls = append(ls, l)
			}
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
			// Frames of random sizes, each span the whole frame.
			var frames [][]byte
			var spans []int
			for len(ls) > 0 {
				k := min(len(ls), 1+r.IntN(700))
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
		var keep func(*link.Backlink) bool
		if trial%2 == 1 {
			keep = func(l *link.Backlink) bool { return l.Source.DID%3 != 0 }
		}
		want, _ := mergeSegs(nil, cloneSegs(s.segs), keep, 0)
		got := mergeHalves(make([]link.Backlink, 0, total), s, keep, total)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d (%d runs, %d links): halves gave %d links, one merge %d", trial, nsegs, total, len(got), len(want))
		}
	}
}

// cloneSegs copies segs with their own spans (mergeHalves cuts them).
func cloneSegs(segs []mergeSeg) []mergeSeg {
	out := make([]mergeSeg, len(segs))
	for i, m := range segs {
		out[i] = mergeSeg{frames: m.frames, spans: slices.Clone(m.spans)}
	}
	return out
}
