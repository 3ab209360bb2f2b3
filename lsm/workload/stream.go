package workload

import (
	"container/heap"
	"fmt"
	"math/rand/v2"

	"github.com/eddy-backlinks/eddy/link"
)

// stream writes the links and revocations.
func (g *gen) stream(pools []*zipfPool) error {
	w := g.w
	n, megaN := w.Config.Links, w.Config.MegaLinks
	w.Links = make([]link.Backlink, 0, n)
	w.LinkTarget = make([]int32, 0, n)
	w.revoked = make([]bool, n)
	codes, err := g.streamCodes()
	if err != nil {
		return err
	}
	colCode, locCode, colPick, choicePick := codes.col, codes.loc, codes.colPick, codes.choicePick
	megaCol, megaLoc, megaPick := codes.megaCol, codes.megaLoc, codes.megaPick

	actPerm := g.r.Perm(len(g.accounts))
	actZipf := rand.NewZipf(g.r, activityZipfS, activityZipfV, uint64(len(g.accounts)-1))
	startMicros := Start.UnixMicro()

	var due pendingHeap
	var seq uint64
	stamp := uint64(0)
	megaDone := 0

	type out struct {
		target int32
		loc    link.Location
	}
	var outs []out
	var chosen []int32

	emitRecord := func(col uint64, acc int, outs []out) {
		a := &g.accounts[acc]
		micros := startMicros + int64(stamp)*1000 + g.r.Int64N(1000)
		rk, _ := g.tid(micros, a.clock)
		src := link.RecordID{RKey: rk, Collection: col, DID: a.field}
		first := len(w.Links)
		for _, o := range outs {
			w.Links = append(w.Links, link.Backlink{Target: w.Targets[o.target].ID, Source: src, Location: o.loc, SourceRev: stamp})
			w.LinkTarget = append(w.LinkTarget, o.target)
		}
		w.Records++
		if g.r.Float64() < deleteP {
			var delay uint64
			if g.r.IntN(2) == 0 {
				delay = 1 + uint64(g.r.ExpFloat64()*deleteSoonMean)
			} else {
				delay = 1 + g.r.Uint64N(uint64(n))
			}
			seq++
			heap.Push(&due, pending{due: stamp + delay, seq: seq, source: src, first: first, count: len(outs)})
		}
	}
	revoke := func(p pending) {
		w.Revocations = append(w.Revocations, Revocation{
			Revocation: link.Revocation{Source: p.source, Rev: stamp},
			At:         len(w.Links), First: p.first, Count: p.count,
		})
		for i := p.first; i < p.first+p.count; i++ {
			w.revoked[i] = true
		}
	}

	for len(w.Links) < n {
		stamp++
		if len(due) > 0 && due[0].due <= stamp {
			revoke(heap.Pop(&due).(pending))
			continue
		}
		done := len(w.Links)
		megaLeft := megaN - megaDone
		if megaLeft > 0 && (uint64(megaDone) < uint64(megaN)*uint64(done+1)/uint64(n) || n-done <= megaLeft) {
			k := megaPick.pick(g.r)
			emitRecord(megaCol[k], actPerm[actZipf.Uint64()], []out{{w.Mega, megaLoc[k]}})
			megaDone++
			continue
		}
		// A record with at least one link.
		var ci int
		for {
			ci = colPick.pick(g.r)
			cs := &collections[ci]
			outs, chosen = outs[:0], chosen[:0]
			for j := range cs.links {
				ls := &cs.links[j]
				chosen = append(chosen, -1)
				if ls.p < 1 && g.r.Float64() >= ls.p {
					continue
				}
				var t int32
				if ls.sameAs >= 0 && chosen[ls.sameAs] >= 0 && g.r.Float64() < ls.pSame {
					t = chosen[ls.sameAs]
				} else {
					t = pools[ls.to[choicePick[ci][j].pick(g.r)].pool].draw()
				}
				chosen[j] = t
				outs = append(outs, out{t, locCode[ci][j]})
			}
			if len(outs) > 0 {
				break
			}
		}
		if room := n - done - megaLeft; len(outs) > room {
			outs = outs[:room]
		}
		emitRecord(colCode[ci], actPerm[actZipf.Uint64()], outs)
	}
	for len(due) > 0 {
		stamp++
		revoke(heap.Pop(&due).(pending))
	}
	w.Stamps = stamp
	if megaDone != megaN {
		return fmt.Errorf("workload: %d mega links, want %d", megaDone, megaN)
	}
	return nil
}

// streamCodes are the encoded collections and locations of the model's
// sources and the weighted choices between them.
type streamCodes struct {
	col        []uint64          // by collection of the spec
	loc        [][]link.Location // by collection, by link
	colPick    weighted          // a collection
	choicePick [][]weighted      // by collection, by link: the pool its target is drawn from
	megaCol    []uint64          // by kind of mega link
	megaLoc    []link.Location
	megaPick   weighted
}

// streamCodes encodes the spec's collections and locations (it draws
// nothing from g.r).
func (g *gen) streamCodes() (*streamCodes, error) {
	// Encoded collections and locations.
	colWeights := make([]float64, len(collections))
	colCode := make([]uint64, len(collections))
	locCode := make([][]link.Location, len(collections))
	for i, cs := range collections {
		colWeights[i] = cs.weight
		c, err := g.codec.Collection(cs.nsid, true)
		if err != nil {
			return nil, err
		}
		colCode[i] = c
		for _, ls := range cs.links {
			l, err := g.codec.Location(ls.path, ls.strongRef, true)
			if err != nil {
				return nil, err
			}
			locCode[i] = append(locCode[i], l)
		}
	}
	colPick := newWeighted(colWeights)
	choicePick := make([][]weighted, len(collections))
	for i, cs := range collections {
		for _, ls := range cs.links {
			ws := make([]float64, len(ls.to))
			for j, c := range ls.to {
				ws[j] = c.weight
			}
			choicePick[i] = append(choicePick[i], newWeighted(ws))
		}
	}
	megaWeights := make([]float64, len(megaLinks))
	megaCol := make([]uint64, len(megaLinks))
	megaLoc := make([]link.Location, len(megaLinks))
	for i, m := range megaLinks {
		megaWeights[i] = m.weight
		c, err := g.codec.Collection(m.collection, true)
		if err != nil {
			return nil, err
		}
		l, err := g.codec.Location(m.path, m.strongRef, true)
		if err != nil {
			return nil, err
		}
		megaCol[i], megaLoc[i] = c, l
	}
	megaPick := newWeighted(megaWeights)

	return &streamCodes{
		col: colCode, loc: locCode, colPick: colPick, choicePick: choicePick,
		megaCol: megaCol, megaLoc: megaLoc, megaPick: megaPick,
	}, nil
}

// pending is a delete not yet written.
type pending struct {
	due, seq     uint64
	source       link.RecordID
	first, count int
}

type pendingHeap []pending

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
