package lsm

import (
	"context"
	"errors"
	"flag"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore"
)

var (
	lsmMeasureLinks = flag.Int("lsm.measure-links", 40_000_000, "TestMeasureEachMemory: the kept run's --links")
	lsmMeasureMega  = flag.Int("lsm.measure-mega-links", 10_000_000, "TestMeasureEachMemory: the kept run's --mega-links")
)

// TestMeasureEachMemory measures what an answer that folds every link of
// a popular target (its distinct accounts: getBacklinkDids,
// /links/distinct-dids; per collection and path: /links/all) costs in
// memory and time, read whole (Reader.All, as those answers did) and
// window by window (Reader.Each), beside a Count, on the mega target of a
// kept bench run: the Go heap's growth at its peak (sampled every 5 ms,
// the frame cache filling included) and the bytes allocated. Reproduce:
//
//	bin/eddy-bench lsm --shape backfill --links 40000000 --mega-links 10000000 --no-pebble --keep --tmp DIR --json
//	go test ./lsm -run TestMeasureEachMemory -v -lsm.measure-dir DIR/eddy-bench-*
func TestMeasureEachMemory(t *testing.T) {
	db, _, id := openMeasuredMega(t)
	ctx := context.Background()
	v := db.View()
	measure := func(what string, f func() int) {
		n, heap, alloc, el := heapPeak(f)
		t.Logf("%-5s %d: heap +%.0f MB at its peak, %.0f MB allocated, %v", what, n, float64(heap)/1e6, float64(alloc)/1e6, el.Round(time.Millisecond))
	}
	distinct := func(dids []uint64) int {
		slices.Sort(dids)
		return len(slices.Compact(dids))
	}
	for range 2 {
		measure("Count", func() int {
			n, _, err := db.reader.Count(ctx, v, id, Filter{})
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		})
		measure("All", func() int {
			links, _, err := db.reader.All(ctx, v, id, Filter{})
			if err != nil {
				t.Fatal(err)
			}
			var dids []uint64
			for i := range links {
				dids = append(dids, links[i].Source.DID)
			}
			return distinct(dids)
		})
		measure("Each", func() int {
			var dids []uint64
			kept := 0
			_, err := db.reader.Each(ctx, v, id, Filter{}, func(ls []link.Backlink) error {
				for i := range ls {
					dids = append(dids, ls[i].Source.DID)
					if len(dids) >= 2*kept+4096 { // as the query package's didSet
						kept = distinct(dids)
						dids = dids[:kept]
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return distinct(dids)
		})
	}
}

// heapPeak runs f and returns its answer, the Go heap's growth at its
// peak (sampled every 5 ms), the bytes allocated and the time.
func heapPeak(f func() int) (n int, heap, alloc uint64, el time.Duration) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	stop, done := make(chan struct{}), make(chan struct{})
	var peak uint64
	go func() {
		defer close(done)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t0 := time.Now()
	n = f()
	el = time.Since(t0)
	close(stop)
	<-done
	runtime.ReadMemStats(&m1)
	return n, peak - min(peak, m0.HeapAlloc), m1.TotalAlloc - m0.TotalAlloc, el
}

// TestMeasureConcurrentCounts measures counts of the mega target of a
// kept bench run made at once (as the query slots let them run), each
// with a query's 10 s, without a bound on large reads and with a node's
// (DefaultLargeReadMemory): the Go heap's growth at its peak, the time of
// the whole, and the counts that ran out of time waiting (ErrBusy) or
// reading.
// Reproduce (the run of TestMeasureEachMemory):
//
//	go test ./lsm -run TestMeasureConcurrentCounts -v -lsm.measure-dir DIR/eddy-bench-*
func TestMeasureConcurrentCounts(t *testing.T) {
	db, store, id := openMeasuredMega(t)
	v := db.View()
	for _, bound := range []int64{0, DefaultLargeReadMemory} {
		for _, n := range []int{1, 4, 16} {
			r := NewReader(store, nil) // a fresh frame cache each time
			r.SetLargeReadMemory(bound)
			var busy, late, done atomic.Int64
			_, heap, _, el := heapPeak(func() int {
				var wg sync.WaitGroup
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						_, _, err := r.Count(ctx, v, id, Filter{})
						switch {
						case errors.Is(err, ErrBusy):
							busy.Add(1)
						case errors.Is(err, context.DeadlineExceeded):
							late.Add(1)
						case err != nil:
							t.Error(err)
						default:
							done.Add(1)
						}
					}()
				}
				wg.Wait()
				return 0
			})
			t.Logf("bound %4d MiB, %2d counts at once: heap +%.0f MB at its peak, %v; %d answered, %d busy (waited their time out), %d out of time reading",
				bound>>20, n, float64(heap)/1e6, el.Round(time.Millisecond), done.Load(), busy.Load(), late.Load())
		}
	}
}

// openMeasuredMega opens the kept index of -lsm.measure-dir and names the
// mega target of its run (-lsm.measure-links, -lsm.measure-mega-links).
func openMeasuredMega(t *testing.T) (*DB, objstore.Store, link.RecordID) {
	t.Helper()
	db, store := openMeasuredIndex(t)
	st, err := workload.NewStream(workload.StreamConfig{Links: *lsmMeasureLinks, MegaLinks: *lsmMeasureMega, Seed: 1, Shape: workload.ShapeBackfill})
	if err != nil {
		t.Fatal(err)
	}
	return db, store, st.Sample[workload.Mega].ID
}
