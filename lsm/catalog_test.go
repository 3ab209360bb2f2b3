package lsm

import (
	"context"
	"sync"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// Concurrent queries over a meta cache too small for two metas: each
// decodes what it needs as the others evict it, and every count is right.
func TestCatalogBoundedConcurrent(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), MetaCacheBytes: 1, NoGCGrace: true, CompactionFanIn: 100})
	if err != nil {
		t.Fatal(err)
	}
	const runs, targets, per = 6, 20, 5
	for r := range runs {
		for tg := range targets {
			for i := range per {
				l := link.Backlink{
					Target: link.RecordID{RKey: uint64(tg), Collection: 3, DID: 1},
					Source: link.RecordID{RKey: uint64(r*1000 + i), Collection: 5, DID: uint64(2 + i)},
				}
				if err := db.AddBacklink(&l); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(db.View().Manifest.RunsOf(TreeLinks)); n != runs {
		t.Fatalf("%d runs, want %d", n, runs)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				tg := link.RecordID{RKey: uint64((g + i) % targets), Collection: 3, DID: 1}
				n, _, err := db.Count(ctx, tg, Filter{})
				if err != nil || n != runs*per {
					errs <- err
					if err == nil {
						t.Errorf("count %d, want %d", n, runs*per)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := db.CatalogStats()
	if st.Evictions == 0 || st.Metas > 1 {
		t.Fatalf("meta cache %+v: want evictions and at most one meta held", st)
	}
}
