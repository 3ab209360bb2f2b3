package lsm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// Round two reads a revocation table in one of two ways: cold, through its
// filter, key by key; warm, when the cache holds the table's frames over
// the keys' range, by walking them with the sorted keys. Both must give
// the model's answer, for counts (filtered or not), All and every page,
// over delta runs and a sharded compacted run whose revocation tables span
// several frames, with record and repository revocations, updates (a
// revocation, then the link again at the same rev) and revocations of
// records and repositories the target never hears of.
func TestCountScanMatchesFilters(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true, CompactionFanIn: 4, ShardTargetBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel()
	r := rand.New(rand.NewPCG(6, 66))
	target := link.RecordID{RKey: 1 << 50, Collection: link.CollectionFirst, DID: 7}
	other := link.RecordID{RKey: 1 << 50, Collection: link.CollectionFirst, DID: 8}
	stamp := uint64(1 << 20)
	var sources []link.RecordID
	addLink := func(tg, src link.RecordID, rev uint64) {
		l := link.Backlink{Target: tg, Source: src, Location: link.MakeLocation(uint64(1+src.RKey%2), src.RKey%5 == 0), SourceRev: rev}
		if err := db.AddBacklink(&l); err != nil {
			t.Fatal(err)
		}
		m.addLink(l)
	}
	revoke := func(src link.RecordID, rev uint64) {
		v := link.Revocation{Source: src, Rev: rev}
		if err := db.AddRevocation(&v); err != nil {
			t.Fatal(err)
		}
		m.revoke(v)
	}
	const flushes = 10
	for f := range flushes {
		for range 600 {
			stamp++
			src := link.RecordID{RKey: stamp, Collection: link.CollectionFirst + uint64(r.IntN(3)), DID: uint64(100 + r.IntN(80))}
			sources = append(sources, src)
			addLink(target, src, stamp)
			if r.IntN(4) == 0 {
				addLink(other, src, stamp)
			}
		}
		// Deletes and updates of the target's sources, old and new.
		for range 120 {
			stamp++
			src := sources[r.IntN(len(sources))]
			revoke(src, stamp)
			if r.IntN(3) == 0 {
				addLink(target, src, stamp)
			}
		}
		// Revocations the target never hears of: enough to spread each
		// revocation table over several frames.
		for range 5000 {
			stamp++
			revoke(link.RecordID{RKey: 1 + r.Uint64N(1<<52), Collection: link.CollectionFirst + 5, DID: uint64(1 + r.IntN(1000))}, stamp)
		}
		// Repository resets: a linking account's, and others'.
		if f%3 == 1 {
			stamp++
			revoke(link.RepoID(uint64(100+r.IntN(80))), stamp)
			revoke(link.RepoID(uint64(2000+r.IntN(80))), stamp)
			revoke(link.RepoID(uint64(1+r.IntN(50))), stamp)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		m.flush()
		if f == 5 {
			if did, err := db.Compact(ctx); err != nil || !did {
				t.Fatalf("compaction: %v %v", did, err)
			}
		}
	}
	v := db.View()
	var compacted, multiFrame bool
	for _, vr := range v.trees[TreeRevocations] {
		if vr.run.Kind == RunCompacted && vr.shardBits > 0 {
			compacted = true
		}
		for _, tb := range vr.tables {
			if tb != nil && mustMeta(t, tb).NumFrames() > 1 {
				multiFrame = true
			}
		}
	}
	if !compacted || !multiFrame {
		t.Fatalf("revocation runs: sharded compacted %v, a table of several frames %v", compacted, multiFrame)
	}

	filters := []Filter{{}, {Collections: []uint64{link.CollectionFirst + 1}}, {DIDs: []uint64{100, 101, 150}}}
	check := func(name string, wantScans bool) {
		t.Helper()
		checkCountScan(t, db, v, m, target, filters, name, wantScans)
	}
	db.reader.cache = NewFrameCache(0)
	// The first count is cold: every table through its filter.
	n, st, err := db.Count(ctx, target, Filter{})
	if want := len(m.live(target, Filter{})); err != nil || n != uint64(want) || st.Round2Scans != 0 || st.Round2GETs == 0 {
		t.Fatalf("cold count %d (%v), want %d; %+v", n, err, want, st)
	}
	// Some tables were read whole by then (every frame met a key); the
	// others still go through filters until a scan can use them: fill the
	// cache with every frame of the revocation tables.
	for _, vr := range v.trees[TreeRevocations] {
		for _, tb := range vr.tables {
			if tb == nil {
				continue
			}
			meta := mustMeta(t, tb)
			g := []fetchGroup{{t: tb, meta: meta, first: 0, last: meta.NumFrames() - 1}}
			if err := db.reader.fetchAll(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("warm", true)
	// A cache too small for the frames: scans give way to filters.
	db.reader.cache = NewFrameCache(1 << 10)
	check("no cache", false)
}

// checkCountScan demands the model's answer from counts (and whether they
// scanned revocation tables), All and every page of target, for each
// filter.
func checkCountScan(t *testing.T, db *DB, v *View, m *model, target link.RecordID, filters []Filter, name string, wantScans bool) {
	t.Helper()
	ctx := context.Background()
	for _, f := range filters {
		want := m.live(target, f)
		n, st, err := db.Count(ctx, target, f)
		if err != nil || n != uint64(len(want)) {
			t.Fatalf("%s, filter %+v: count %d (%v), want %d", name, f, n, err, len(want))
		}
		if (st.Round2Scans > 0) != wantScans {
			t.Fatalf("%s, filter %+v: %d revocation tables scanned", name, f, st.Round2Scans)
		}
		if st.Revoked == 0 {
			t.Fatalf("%s: no candidate revoked", name)
		}
		all, _, err := db.Reader().All(ctx, v, target, f)
		if err != nil || !slices.Equal(all, want) {
			t.Fatalf("%s, filter %+v: All gave %d links (%v), want %d", name, f, len(all), err, len(want))
		}
		var got []link.Backlink
		var after *Cursor
		for {
			res, err := db.Backlinks(ctx, Query{Target: target, After: after, Limit: 300, Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, res.Links...)
			if after = res.Next; after == nil {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s, filter %+v: pages gave %d links, want %d", name, f, len(got), len(want))
		}
	}
}

// shardOfHash splits a hash computed once exactly as ShardOf splits the
// prefix.
func TestShardOfHash(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		id := link.RecordID{RKey: r.Uint64(), Collection: r.Uint64N(10), DID: r.Uint64()}
		kb := id.Bytes()
		p := revProbe{s: &queryScratch{srcKeys: []link.RecordID{id}}, ready: true, nKeys: 1}
		for _, bits := range []uint8{0, 1, 3, 8, 20, 32, 40} {
			if got, want := p.shard(0, bits), ShardOf(kb[:], bits); got != want {
				t.Fatalf("%v bits %d: %d, want %d", id, bits, got, want)
			}
		}
	}
}

// A count or All of more candidates than the pool keeps leaves its scratch
// aside for the next one; counts and All running at once, on that target
// and a small one, each get the workload's answer.
func TestCountBigScratch(t *testing.T) {
	ctx := context.Background()
	wl, err := workload.Generate(workload.Config{Links: 100_000, Seed: 9, MegaLinks: 80_000})
	if err != nil {
		t.Fatal(err)
	}
	db := countWorkloadDB(t, wl, 4, 0)
	mega := wl.Targets[wl.Mega].ID
	want := wl.Expected(wl.Mega, 0)
	if len(want) <= queryScratchLinksMax {
		t.Fatalf("the mega target has %d live links", len(want))
	}
	small := queryBenchTargets(wl, 20)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Go(func() {
			for i := range 6 {
				if (g+i)%2 == 0 {
					n, _, err := db.Count(ctx, mega, Filter{})
					if err != nil || n != uint64(len(want)) {
						errs <- fmt.Errorf("count %d (%v), want %d", n, err, len(want))
						return
					}
				} else {
					all, _, err := db.Reader().All(ctx, db.View(), mega, Filter{})
					if err != nil || !slices.Equal(all, want) {
						errs <- fmt.Errorf("All: %d links (%v), want %d", len(all), err, len(want))
						return
					}
				}
				tg := small[(g*6+i)%len(small)]
				n, _, err := db.Count(ctx, wl.Targets[tg].ID, Filter{})
				if err != nil || n != uint64(wl.LiveCount(tg)) {
					errs <- fmt.Errorf("small target: count %d (%v), want %d", n, err, wl.LiveCount(tg))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := bigQueryScratch.Load()
	if s == nil || s.linksCap() <= queryScratchLinksMax || s.linksCap() > queryScratchBigMax {
		t.Fatalf("no large scratch kept aside: %v", s)
	}
}

// A count read in windows far smaller than the target (its runs read up
// to a common horizon each time) gives the workload's count, and so do
// the filtered counts; the windows cut the mega target into several steps.
func TestCountWindows(t *testing.T) {
	ctx := context.Background()
	wl, err := workload.Generate(workload.Config{Links: 60_000, Seed: 5, MegaLinks: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	db := countWorkloadDB(t, wl, 5, 0)
	defer func(n, h int) { countWindowLinks, mergeHalvesMin = n, h }(countWindowLinks, mergeHalvesMin)
	for _, w := range []int{1 << 20, 3000, 200, -200} {
		// -200: windows of 200 merged in halves (mergeHalves) however small.
		mergeHalvesMin = 1 << 16
		if w < 0 {
			w, mergeHalvesMin = -w, 1
		}
		countWindowLinks = w
		mega := wl.Targets[wl.Mega].ID
		n, st, err := db.Count(ctx, mega, Filter{})
		if err != nil || n != uint64(wl.LiveCount(wl.Mega)) {
			t.Fatalf("window %d: mega count %d (%v), want %d", w, n, err, wl.LiveCount(wl.Mega))
		}
		// A window reads at least windowBytesMin of each run (~8,000
		// links), so the small windows cut the target into a few steps.
		if (w == 200 && st.CountWindows < 3) || (w == 1<<20 && st.CountWindows != 1) {
			t.Fatalf("window %d: %d windows", w, st.CountWindows)
		}
		for _, tg := range queryBenchTargets(wl, 10) {
			n, _, err := db.Count(ctx, wl.Targets[tg].ID, Filter{})
			if err != nil || n != uint64(wl.LiveCount(tg)) {
				t.Fatalf("window %d: count %d (%v), want %d", w, n, err, wl.LiveCount(tg))
			}
		}
		// Each gives All's links, in order, window by window; fn's
		// error stops it.
		all, _, err := db.reader.All(ctx, db.View(), mega, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		var each []link.Backlink
		calls := 0
		st, err = db.reader.Each(ctx, db.View(), mega, Filter{}, func(ls []link.Backlink) error {
			if len(ls) == 0 {
				t.Fatal("Each called fn with no links")
			}
			calls++
			each = append(each, ls...)
			return nil
		})
		if err != nil || !slices.Equal(each, all) || (w == 200 && calls < 3) {
			t.Fatalf("window %d: Each gave %d links in %d calls (%v), All %d", w, len(each), calls, err, len(all))
		}
		stop := errors.New("enough")
		calls = 0
		_, err = db.reader.Each(ctx, db.View(), mega, Filter{}, func([]link.Backlink) error { calls++; return stop })
		if !errors.Is(err, stop) || calls != 1 {
			t.Fatalf("window %d: Each after fn's error: %v, %d calls", w, err, calls)
		}
	}
}
