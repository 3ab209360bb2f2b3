package ingest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// A repository written whole (ApplyRepo: its revocation, then its records
// in batches of 256, the writer's lock released between them) never goes
// out in two flushes: every generation a flush commits holds
// all of a repository's links or none. (Split, a resynced repository's
// links would vanish in the generation between: found by the chaos
// schedules' history checker, a source appearing twice.)
func TestScheduledFlushKeepsRepoWhole(t *testing.T) {
	ctx := context.Background()
	w, node, store, _ := testWriterOf(t, 64<<20)
	const repos, records = 16, 2048 // eight batches a repository
	var manifests []*lsm.Manifest
	done := make(chan struct{})
	var wg sync.WaitGroup
	stop := sync.OnceFunc(func() { close(done); wg.Wait() })
	defer stop() // a Fatal below: the flusher ends before the test does
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := w.Flush(ctx); err != nil {
				t.Error(err)
				return
			}
			manifests = append(manifests, node.FSM.Manifest())
		}
	})
	for i := range repos {
		did, stamp, ops := repoOfLikes(t, w, i, records)
		if err := w.ApplyRepo(ctx, "backfill", did, stamp, ops); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	manifests = append(manifests, node.FSM.Manifest())
	seen := map[uint64]bool{}
	for _, mf := range manifests {
		if seen[mf.Generation] {
			continue
		}
		seen[mf.Generation] = true
		per := map[link.RecordID]int{}
		for _, l := range linksTree(t, store, mf) {
			per[l.Target]++
		}
		for tg, n := range per {
			if n != records {
				t.Errorf("generation %d holds %d of a repository's %d links (target %v): written across two flushes", mf.Generation, n, records, tg)
			}
		}
	}
	if len(seen) < 3 {
		t.Fatalf("only %d generations committed while the repositories were written: the test did not interleave", len(seen))
	}
	if last := manifests[len(manifests)-1]; len(linksTree(t, store, last)) != repos*records {
		t.Fatalf("the last generation holds %d links, want %d", len(linksTree(t, store, last)), repos*records)
	}
}

// When the memtables fill while repositories are written at once (a
// backfill's concurrency), the flush made for room splits each of them,
// not only the one that filled them: eddy_ingest_repo_splits_total
// counts every one. (It counted the one that flushed.)
func TestRepoSplitsCountEveryRepositoryBeingWritten(t *testing.T) {
	ctx := context.Background()
	w, node, store, reg := testWriterOf(t, 1<<20) // ~15,000 links
	const repos, records = 6, 4000
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range repos {
		did, stamp, ops := repoOfLikes(t, w, i, records)
		wg.Go(func() {
			<-start
			if err := w.ApplyRepo(ctx, "backfill", did, stamp, ops); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A repository split: its links in more than one flush's run (no
	// compaction runs here).
	runs := map[link.RecordID]int{}
	for _, run := range node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		m := lsm.Manifest{Runs: []lsm.Run{run}}
		seen := map[link.RecordID]bool{}
		for _, l := range linksTree(t, store, &m) {
			if !seen[l.Target] {
				seen[l.Target] = true
				runs[l.Target]++
			}
		}
	}
	split := 0
	for _, n := range runs {
		if n > 1 {
			split++
		}
	}
	if split < 2 {
		t.Fatalf("%d repositories split (runs per target: %v): the writes did not overlap a flush", split, runs)
	}
	if got := metricstest.Values(t, reg)["eddy_ingest_repo_splits_total"]; got < float64(split) {
		t.Fatalf("eddy_ingest_repo_splits_total %v, but %d repositories went out in two flushes", got, split)
	}
}

// repoOfLikes is repository i of n likes of poster i's post, as a
// backfill gives, with a stamp reserved for it.
func repoOfLikes(t *testing.T, w *Writer, i, n int) (string, uint64, []event.Op) {
	t.Helper()
	did := fmt.Sprintf("did:plc:liker%019d", i)
	stamp, err := w.ReserveStamp(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	post := fmt.Sprintf("at://did:plc:poster%018d/app.bsky.feed.post/3mptbyplj5d2a", i)
	ops := make([]event.Op, n)
	for k := range ops {
		ops[k] = jsCommit(t, 1783175888000000, did, "create", "app.bsky.feed.like", fmt.Sprintf("3mptbyp%06d", k),
			map[string]any{"subject": strongRef(post), "createdAt": "2026-07-04T14:38:08.999Z"})
	}
	return did, stamp, ops
}
