package lsm

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
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
	const before = 20_000
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
		if pages%10 == 0 { // ingest goes on: new links before and after the cursor, new generations
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
