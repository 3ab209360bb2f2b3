package lsm

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

func BenchmarkMergeHalves(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 44))
	target := link.RecordID{RKey: 1 << 50, Collection: link.CollectionFirst, DID: 9}
	s := &queryScratch{}
	total := 0
	for range 9 {
		var ls []link.Backlink
		for range 12000 {
			ls = append(ls, link.Backlink{Target: target, Source: link.RecordID{RKey: r.Uint64N(1 << 40), Collection: link.CollectionFirst, DID: r.Uint64N(1 << 20)}, SourceRev: 1})
		}
		slices.SortFunc(ls, func(a, b link.Backlink) int {
			if linkLess(&a, &b) {
				return -1
			}
			return 1
		})
		var frames [][]byte
		var spans []int
		for len(ls) > 0 {
			k := min(len(ls), 1024)
			fr := make([]byte, k*link.BacklinkSize)
			for i := range k {
				ls[i].Put(fr[i*link.BacklinkSize:])
			}
			frames = append(frames, fr)
			spans = append(spans, 0, len(fr))
			ls = ls[k:]
			total += k
		}
		s.segs = append(s.segs, mergeSeg{frames: frames, spans: spans})
		s.spans = append(s.spans, spans...)
	}
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
