package lsm

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
)

// Paging through a popular target with limit 100 while links keep arriving
// (and flushes and compactions publish new generations) returns every link
// that was live before paging began, exactly once.
func TestPagingWhileIngesting(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true, CompactionFanIn: 4})
	if err != nil {
		t.Fatal(err)
	}
	target := link.RecordID{RKey: 42, Collection: link.CollectionFirst, DID: 7}
	r := rand.New(rand.NewPCG(5, 6))
	stamp := uint64(0)
	src := func() link.RecordID {
		return link.RecordID{RKey: r.Uint64() >> 1, Collection: link.CollectionFirst + uint64(r.IntN(3)), DID: uint64(1 + r.IntN(5000))}
	}
	add := func(n int) {
		for i := 0; i < n; i++ {
			stamp++
			l := link.Backlink{Target: target, Source: src(), Location: 1, SourceRev: stamp}
			if err := db.AddBacklink(&l); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const before = 100_000
	for i := 0; i < 10; i++ {
		add(before / 10)
	}
	want, _, err := db.Reader().All(ctx, db.View(), target, Filter{})
	if err != nil || len(want) != before {
		t.Fatalf("%d links before paging: %v", len(want), err)
	}
	seen := make(map[Cursor]int, before)
	var after *Cursor
	pages := 0
	for {
		res, err := db.Backlinks(ctx, Query{Target: target, After: after, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range res.Links {
			seen[Cursor{l.Source, l.Location}]++
		}
		pages++
		if pages%50 == 0 { // ingest goes on: new links before and after the cursor, new generations
			add(500)
			if _, err := db.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if res.Next == nil {
			break
		}
		after = res.Next
	}
	for _, l := range want {
		if n := seen[Cursor{l.Source, l.Location}]; n != 1 {
			t.Fatalf("link %v seen %d times", l.Source, n)
		}
	}
	for c, n := range seen {
		if n != 1 {
			t.Fatalf("link %v seen %d times", c.Source, n)
		}
	}
	t.Logf("%d pages, %d links seen (%d live before paging), %d generations", pages, len(seen), before, db.View().Generation())
}

// Paging reads only the frames a page needs (round one stops at a
// horizon); whatever the limit, direction, filter and revocations, the
// pages together are exactly the target's live links.
func TestWindowedPagingMatchesAll(t *testing.T) {
	ctx := context.Background()
	store := objstore.Counting(newLocalStore(t))
	db, err := Open(ctx, Options{Store: store, Dir: t.TempDir(), NoGCGrace: true, CompactionFanIn: 3})
	if err != nil {
		t.Fatal(err)
	}
	target := link.RecordID{RKey: 9, Collection: link.CollectionFirst, DID: 3}
	r := rand.New(rand.NewPCG(8, 9))
	stamp := uint64(0)
	var sources []link.RecordID
	for run := 0; run < 5; run++ {
		for i := 0; i < 5000; i++ {
			stamp++
			src := link.RecordID{RKey: r.Uint64() >> 1, Collection: link.CollectionFirst + uint64(r.IntN(3)), DID: uint64(1 + r.IntN(300))}
			if r.IntN(5) == 0 && len(sources) > 0 { // the same link again, newer
				src = sources[r.IntN(len(sources))]
			}
			sources = append(sources, src)
			l := link.Backlink{Target: target, Source: src, Location: link.Location(1 + r.IntN(2)), SourceRev: stamp}
			if err := db.AddBacklink(&l); err != nil {
				t.Fatal(err)
			}
			if r.IntN(4) == 0 { // revoke a random earlier source, or a repository
				stamp++
				v := link.Revocation{Source: sources[r.IntN(len(sources))], Rev: stamp}
				if r.IntN(50) == 0 {
					v.Source = v.Source.Repo()
				}
				if err := db.AddRevocation(&v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if run == 3 {
			if _, err := db.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A cold first page reads less than the whole target: the compacted
	// run (more than windowBytesMin of the target) is read only in
	// part; the small delta runs are read whole.
	readBytes := func(f func()) int64 {
		db.reader.cache = NewFrameCache(0)
		before := store.Snapshot()
		f()
		d := store.Snapshot().Sub(before)
		return d.Get.Bytes + d.GetRange.Bytes
	}
	all := readBytes(func() {
		if _, _, err := db.Reader().All(ctx, db.View(), target, Filter{}); err != nil {
			t.Fatal(err)
		}
	})
	page := readBytes(func() {
		if _, err := db.Backlinks(ctx, Query{Target: target, Limit: 100}); err != nil {
			t.Fatal(err)
		}
	})
	if page >= all {
		t.Fatalf("a cold page of 100 read %d bytes, the whole target %d", page, all)
	}
	t.Logf("cold page of 100: %d bytes; whole target: %d bytes", page, all)
	for _, c := range []struct {
		limit   int
		reverse bool
		filter  Filter
	}{
		{13, false, Filter{}}, {29, true, Filter{}}, {100, false, Filter{}}, {100, true, Filter{}},
		{1000, false, Filter{}}, {50, false, Filter{Collections: []uint64{link.CollectionFirst + 1}}},
		{33, true, Filter{Paths: []uint64{2}}},
	} {
		want, _, err := db.Reader().All(ctx, db.View(), target, c.filter)
		if err != nil {
			t.Fatal(err)
		}
		if c.reverse {
			slices.Reverse(want)
		}
		var got []link.Backlink
		var after *Cursor
		maxGets := 0
		for page := 0; ; page++ {
			res, err := db.Backlinks(ctx, Query{Target: target, After: after, Reverse: c.reverse, Limit: c.limit, Filter: c.filter})
			if err != nil {
				t.Fatal(err)
			}
			maxGets = max(maxGets, res.Stats.Round1MaxPerRun)
			got = append(got, res.Links...)
			if res.Next == nil {
				break
			}
			after = res.Next
			if page > 20000 {
				t.Fatal("paging does not end")
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d reverse %v filter %+v: %d links paged, %d live", c.limit, c.reverse, c.filter, len(got), len(want))
		}
		t.Logf("limit %d reverse %v: %d links, round-one GETs per run per page at most %d", c.limit, c.reverse, len(got), maxGets)
	}
}

// A page's merge stops once it has its window's links, but never between
// two runs' copies of one link: a link written, revoked and written again
// is live in the newer run only, at the newer rev, and a stop between the
// copies would keep the older, revoked one and lose the link. Two thirds
// of the links here are revoked for good, so a page needs more candidates
// than one window and its stops fall inside what it returns; every third
// link is in both runs.
func TestPagesNeverSplitIdenticalLinks(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true})
	if err != nil {
		t.Fatal(err)
	}
	target := link.RecordID{RKey: 9, Collection: link.CollectionFirst, DID: 3}
	const n = 300
	src := func(i int) link.RecordID {
		return link.RecordID{RKey: uint64(100 + i), Collection: link.CollectionFirst, DID: 1}
	}
	for _, rev := range []uint64{1, 3} {
		for i := range n {
			if rev == 3 && i%3 != 0 {
				continue
			}
			l := link.Backlink{Target: target, Source: src(i), Location: 1, SourceRev: rev}
			if err := db.AddBacklink(&l); err != nil {
				t.Fatal(err)
			}
			if rev == 1 {
				v := link.Revocation{Source: src(i), Rev: 2}
				if err := db.AddRevocation(&v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if runs := len(db.View().Manifest.RunsOf(TreeLinks)); runs != 2 {
		t.Fatalf("%d runs of links, want 2", runs)
	}
	for limit := 1; limit <= 60; limit++ {
		var got int
		var after *Cursor
		for {
			res, err := db.Backlinks(ctx, Query{Target: target, After: after, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range res.Links {
				if l.SourceRev != 3 {
					t.Fatalf("limit %d: %v at rev %d, want the rewritten rev 3", limit, l.Source, l.SourceRev)
				}
			}
			got += len(res.Links)
			if res.Next == nil {
				break
			}
			after = res.Next
		}
		if got != n/3 {
			t.Fatalf("limit %d: %d links over every page, want %d", limit, got, n/3)
		}
	}
}
