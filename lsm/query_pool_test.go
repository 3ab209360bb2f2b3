package lsm

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// Queries reuse pooled working memory. A page, once returned, never
// changes, whatever queries follow; queries running at once (pages both
// ways, paging a popular target, counts, All) each get exactly the
// workload's answer. The DB holds a compacted run and a delta run per tree.
func TestQueryScratchReuse(t *testing.T) {
	ctx := context.Background()
	db, wl := queryWorkloadDB(t, 60_000, true)
	kinds := map[RunKind]int{}
	for _, r := range db.View().Manifest.Runs {
		kinds[r.Kind]++
	}
	if kinds[RunCompacted] != 2 || len(db.View().Manifest.Runs) != 4 {
		t.Fatalf("runs: %v", kinds)
	}
	targets := queryBenchTargets(wl, 300)
	if len(targets) < 300 {
		t.Fatalf("%d targets", len(targets))
	}
	// Some targets have more than a page; the mega target spans many
	// frames of each run, so its pages are windowed.
	over := 0
	for _, tg := range targets {
		if wl.LiveCount(tg) > 100 {
			over++
		}
	}
	if over == 0 || wl.LiveCount(wl.Mega) < 20_000 {
		t.Fatalf("%d targets over a page, mega target of %d", over, wl.LiveCount(wl.Mega))
	}

	check := func(tg int32) error { return checkPoolQueries(db, wl, tg) }
	pageAll := func(tg int32, limit int) error { return pagePoolTarget(db, wl, tg, limit) }

	// Pages and All answers kept across later queries stay as they were.
	kept := make([]*Result, len(targets))
	keptAll := make([][]link.Backlink, len(targets))
	for i, tg := range targets {
		res, err := db.Backlinks(ctx, Query{Target: wl.Targets[tg].ID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		kept[i] = res
		if keptAll[i], _, err = db.Reader().All(ctx, db.View(), wl.Targets[tg].ID, Filter{}); err != nil {
			t.Fatal(err)
		}
		if err := check(tg); err != nil {
			t.Fatal(err)
		}
	}
	if err := pageAll(wl.Mega, 100); err != nil {
		t.Fatal(err)
	}
	for i, tg := range targets {
		if want := wl.Expected(tg, 100); !slices.Equal(kept[i].Links, want) {
			t.Fatalf("target %d: a kept page changed after later queries", tg)
		}
		if want := wl.Expected(tg, 0); !slices.Equal(keptAll[i], want) {
			t.Fatalf("target %d: a kept All answer changed after later queries", tg)
		}
	}

	// At once: four goroutines over the targets in different orders, one
	// paging the mega target.
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for g := range 4 {
		wg.Go(func() {
			for i := range targets {
				if err := check(targets[(i*(2*g+1)+g*71)%len(targets)]); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Go(func() { errs[4] = pageAll(wl.Mega, 250) })
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkPoolQueries asks every kind of query about target tg of wl.
func checkPoolQueries(db *DB, wl *workload.Workload, tg int32) error {
	ctx := context.Background()
	id := wl.Targets[tg].ID
	all := wl.Expected(tg, 0)
	res, err := db.Backlinks(ctx, Query{Target: id, Limit: 100})
	if err != nil {
		return err
	}
	if want := all[:min(100, len(all))]; !slices.Equal(res.Links, want) {
		return fmt.Errorf("target %d: first page of %d links differs from the workload's %d", tg, len(res.Links), len(want))
	}
	rev, err := db.Backlinks(ctx, Query{Target: id, Limit: 37, Reverse: true})
	if err != nil {
		return err
	}
	want := slices.Clone(all[max(0, len(all)-37):])
	slices.Reverse(want)
	if !slices.Equal(rev.Links, want) {
		return fmt.Errorf("target %d: reverse page of %d links differs from the workload's %d", tg, len(rev.Links), len(want))
	}
	n, _, err := db.Count(ctx, id, Filter{})
	if err != nil {
		return err
	}
	if n != uint64(len(all)) {
		return fmt.Errorf("target %d: count %d, want %d", tg, n, len(all))
	}
	got, _, err := db.Reader().All(ctx, db.View(), id, Filter{})
	if err != nil {
		return err
	}
	if !slices.Equal(got, all) {
		return fmt.Errorf("target %d: All gave %d links, want %d", tg, len(got), len(all))
	}
	return nil
}

// pagePoolTarget pages through target tg of wl, limit links a page.
func pagePoolTarget(db *DB, wl *workload.Workload, tg int32, limit int) error {
	ctx := context.Background()
	var got []link.Backlink
	var after *Cursor
	for {
		res, err := db.Backlinks(ctx, Query{Target: wl.Targets[tg].ID, After: after, Limit: limit})
		if err != nil {
			return err
		}
		got = append(got, res.Links...)
		if res.Next == nil {
			break
		}
		after = res.Next
	}
	if want := wl.Expected(tg, 0); !slices.Equal(got, want) {
		return fmt.Errorf("target %d paged by %d: %d links, want %d", tg, limit, len(got), len(want))
	}
	return nil
}

// The merge of round one: sorted runs of links read from their frames
// (the target's records amid others', over one to three frames), with
// duplicates across runs, empty runs, any number of runs, give the sorted
// concatenation; a keep function drops links as they are read.
func TestMergeLinks(t *testing.T) {
	target := link.RecordID{RKey: 9, Collection: link.CollectionFirst, DID: 4}
	mk := func(tg link.RecordID, src uint64, loc link.Location, rev uint64) link.Backlink {
		return link.Backlink{Target: tg, Source: link.RecordID{RKey: src, Collection: link.CollectionFirst, DID: src % 7}, Location: loc, SourceRev: rev}
	}
	before, after := target, target
	before.RKey--
	after.RKey++
	prefix := target.Bytes()
	for runs := 1; runs <= 9; runs++ {
		var all []link.Backlink
		var segs []mergeSeg
		for r := range runs {
			var seg []link.Backlink
			n := (r*13 + 5) % 40
			if r == 2 {
				n = 0 // an empty run
			}
			for i := range n {
				seg = append(seg, mk(target, uint64((i*(r+3))%50), link.Location(1+i%2), uint64(r)))
			}
			slices.SortFunc(seg, func(a, b link.Backlink) int { return a.Compare(&b) })
			seg = slices.CompactFunc(seg, func(a, b link.Backlink) bool { return a == b })
			all = append(all, seg...)
			// The table: other targets' links around the target's, cut
			// into 1 + r%3 frames.
			recs := []link.Backlink{mk(before, 1, 1, 1)}
			recs = append(recs, seg...)
			recs = append(recs, mk(after, 1, 1, 1))
			nf := 1 + r%3
			var m mergeSeg
			for f := range nf {
				part := recs[len(recs)*f/nf : len(recs)*(f+1)/nf]
				b := make([]byte, 0, len(part)*link.BacklinkSize)
				for _, l := range part {
					b = append(b, make([]byte, link.BacklinkSize)...)
					l.Put(b[len(b)-link.BacklinkSize:])
				}
				lo, hi := prefixRange(b, link.BacklinkSize, prefix[:])
				m.frames = append(m.frames, b)
				m.spans = append(m.spans, lo, hi)
			}
			segs = append(segs, m)
		}
		want := slices.Clone(all)
		slices.SortFunc(want, func(a, b link.Backlink) int { return a.Compare(&b) })
		got, stopped := mergeSegs(nil, slices.Clone(segs), nil, 0)
		if !slices.Equal(got, want) || stopped {
			t.Fatalf("%d runs: merge gave %v (stopped %v), want %v", runs, got, stopped, want)
		}
		// Stopped early: a prefix of the merge, at least stop links,
		// never ending inside a group of links at one position.
		for _, stop := range []int{1, 2, 5, len(want) - 1} {
			if stop < 1 {
				continue
			}
			got, stopped := mergeSegs(nil, slices.Clone(segs), nil, stop)
			if len(got) < min(stop, len(want)) || !slices.Equal(got, want[:len(got)]) || stopped != (len(got) < len(want)) {
				t.Fatalf("%d runs, stop %d: merge gave %d links (stopped %v) of %d, not a prefix of the merge", runs, stop, len(got), stopped, len(want))
			}
			if n := len(got); stopped && cmpPos(got[n-1].Source, got[n-1].Location, want[n].Source, want[n].Location) == 0 {
				t.Fatalf("%d runs, stop %d: stopped between two links at one position", runs, stop)
			}
		}
		odd := func(l *link.Backlink) bool { return l.Source.RKey%2 == 1 }
		want = slices.DeleteFunc(want, func(l link.Backlink) bool { return !odd(&l) })
		got, _ = mergeSegs(got[:0], segs, odd, 0)
		if !slices.Equal(got, want) {
			t.Fatalf("%d runs, odd sources: merge gave %v, want %v", runs, got, want)
		}
	}
}

// compareWords orders like bytes.Compare on slices of 8-byte words.
func TestCompareWords(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		n := 8 * (1 + r.IntN(7))
		a, b := make([]byte, n), make([]byte, n)
		for i := range a {
			a[i] = byte(r.IntN(3))
			b[i] = byte(r.IntN(3))
		}
		if r.IntN(4) == 0 {
			copy(b, a)
		}
		if got, want := compareWords(a, b), bytes.Compare(a, b); got != want {
			t.Fatalf("compareWords(%x, %x) = %d, want %d", a, b, got, want)
		}
	}
}

// prefixRange and boundIn (their shortcuts at a frame's ends included)
// agree with a scan of the records.
func TestPrefixRangeAndBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		n := r.IntN(12)
		ls := make([]link.Backlink, n)
		for i := range ls {
			ls[i] = link.Backlink{Target: link.RecordID{RKey: uint64(r.IntN(3)), Collection: 5, DID: 1},
				Source: link.RecordID{RKey: uint64(r.IntN(6)), Collection: 3, DID: 2}, Location: link.Location(r.IntN(2))}
		}
		slices.SortFunc(ls, func(a, b link.Backlink) int { return a.Compare(&b) })
		recs := make([]byte, n*link.BacklinkSize)
		for i := range ls {
			ls[i].Put(recs[i*link.BacklinkSize:])
		}
		target := link.RecordID{RKey: uint64(r.IntN(3)), Collection: 5, DID: 1}
		p := target.Bytes()
		lo, hi := prefixRange(recs, link.BacklinkSize, p[:])
		wlo, whi := n, n
		for i := range ls {
			if ls[i].Target == target {
				wlo = min(wlo, i)
				whi = i + 1
			}
		}
		if wlo == n {
			// Absent: an empty range where the target would be.
			wlo = slices.IndexFunc(ls, func(l link.Backlink) bool { return l.Target.Compare(target) > 0 })
			if wlo < 0 {
				wlo = n
			}
			whi = wlo
		}
		if lo != wlo*link.BacklinkSize || hi != whi*link.BacklinkSize {
			t.Fatalf("prefixRange of %v in %v: [%d, %d), want [%d, %d)", target, ls, lo/64, hi/64, wlo, whi)
		}
		c := Cursor{Source: link.RecordID{RKey: uint64(r.IntN(6)), Collection: 3, DID: 2}, Location: link.Location(r.IntN(2))}
		key := posKey(p[:], &c)
		for _, strict := range []bool{false, true} {
			got := boundIn(recs, lo, hi, key[:], strict)
			want := hi
			for off := lo; off < hi; off += link.BacklinkSize {
				cmp := bytes.Compare(recs[off:off+posKeySize], key[:])
				if cmp > 0 || !strict && cmp == 0 {
					want = off
					break
				}
			}
			if got != want {
				t.Fatalf("boundIn(strict %v) of %v in %v: %d, want %d", strict, c, ls[lo/64:hi/64], got/64, want/64)
			}
		}
	}
}

// A scratch put back in the pool keeps no table alive: neither a group's
// or a plan's view table nor its meta (whose mapping, and the local file a dropped
// table's meta still holds open, would stay while the pool keeps the
// scratch; bigQueryScratch keeps one for good).
func TestPutQueryScratchKeepsNoTable(t *testing.T) {
	meta, vt := &TableMeta{}, &viewTable{}
	s := &queryScratch{groups: make([]fetchGroup, 2, 4), rgroups: make([]fetchGroup, 1, 2)}
	s.groups[0] = fetchGroup{t: vt, meta: meta, frames: [][]byte{{1}}, own: [][]byte{{2}}}
	s.groups[1] = fetchGroup{t: vt, meta: meta}
	s.groups[:3][2] = fetchGroup{t: vt, meta: meta} // past the length, from an earlier query
	s.rgroups[0] = fetchGroup{t: vt, meta: meta}
	s.plan = append(make([]planEntry, 0, 3), planEntry{t: vt, m: meta}, planEntry{t: vt, m: meta})
	s.tableMetas = append(make([]*TableMeta, 0, 3), meta, meta)
	groups, rgroups := s.groups[:cap(s.groups)], s.rgroups[:cap(s.rgroups)]
	plan, metas := s.plan[:cap(s.plan)], s.tableMetas[:cap(s.tableMetas)]
	putQueryScratch(s)
	for i, p := range plan {
		if p.t != nil || p.m != nil {
			t.Errorf("plan[%d] keeps its table", i)
		}
	}
	for i, m := range metas {
		if m != nil {
			t.Errorf("tableMetas[%d] keeps a meta", i)
		}
	}
	for name, gs := range map[string][]fetchGroup{"groups": groups, "rgroups": rgroups} {
		for i, g := range gs {
			if g.t != nil || g.meta != nil || g.own != nil || slices.ContainsFunc(g.frames[:cap(g.frames)], func(b []byte) bool { return b != nil }) {
				t.Errorf("%s[%d] keeps table %v meta %v own %v frames %v", name, i, g.t != nil, g.meta != nil, g.own != nil, g.frames)
			}
		}
	}
}
