package lsm

import (
	"context"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// benchQueryLinks is the size of the synthetic workload the query
// benchmarks load (two runs per tree, as the 2M-link bench has).
const benchQueryLinks = 400_000

// queryWorkloadDB loads a synthetic workload of n links into a DB on a
// local store (in tb.TempDir): the links in two delta runs per tree, or,
// with compacted, in thirds of which the first two are compacted into one
// run.
func queryWorkloadDB(tb testing.TB, n int, compacted bool) (*DB, *workload.Workload) {
	tb.Helper()
	wl, err := workload.Generate(workload.Config{Links: n, Seed: 1})
	if err != nil {
		tb.Fatal(err)
	}
	parts, fanIn := 2, 0
	if compacted {
		parts, fanIn = 3, 2
	}
	db := countWorkloadDB(tb, wl, parts, fanIn)
	if n := len(db.View().Manifest.RunsOf(TreeLinks)); n != 2 {
		tb.Fatalf("%d link runs, want 2", n)
	}
	return db, wl
}

// queryBenchTargets draws targets as eddy-ctl bench lsm does: weighted by
// their links, with 1 to 1,000 live links, the mega target left out.
func queryBenchTargets(wl *workload.Workload, n int) []int32 {
	r := rand.New(rand.NewPCG(1, 0x7175657279))
	out := make([]int32, 0, n)
	for tries := 0; len(out) < n && tries < 100*n; tries++ {
		t := wl.LinkTarget[r.IntN(len(wl.LinkTarget))]
		if c := wl.LiveCount(t); t == wl.Mega || c == 0 || c > 1000 {
			continue
		}
		out = append(out, t)
	}
	return out
}

// BenchmarkWarmQuery: first pages of 100 links of targets with up to 1,000
// links, every frame in the cache (the warm query of eddy-ctl bench lsm).
// Run with -benchmem: allocs/op is the figure to keep down.
//
//	go test ./lsm -run '^$' -bench WarmQuery -benchmem
func BenchmarkWarmQuery(b *testing.B) {
	ctx := context.Background()
	db, wl := queryWorkloadDB(b, benchQueryLinks, false)
	targets := queryBenchTargets(wl, 2000)
	if len(targets) < 1000 {
		b.Fatalf("only %d query targets", len(targets))
	}
	// Warm the cache, and check every answer against the workload.
	for _, t := range targets {
		res, err := db.Backlinks(ctx, Query{Target: wl.Targets[t].ID, Limit: 100})
		if err != nil {
			b.Fatal(err)
		}
		if want := wl.Expected(t, 100); !slices.Equal(res.Links, want) {
			b.Fatalf("target %d: %d links differ from the workload's %d", t, len(res.Links), len(want))
		}
		if (res.Next != nil) != (wl.LiveCount(t) > 100) {
			b.Fatalf("target %d: next %v with %d live links", t, res.Next, wl.LiveCount(t))
		}
	}
	// A mid-size target of the mix, alone: allocations of one query
	// shape; and the biggest of the mix (the p99 of eddy-ctl bench lsm).
	one, big := targets[0], targets[0]
	for _, t := range targets {
		if c := wl.LiveCount(t); c >= 120 && c <= 200 && one == targets[0] {
			one = t
		}
		if wl.LiveCount(t) > wl.LiveCount(big) {
			big = t
		}
	}
	b.Run("mix", func(b *testing.B) {
		b.ReportAllocs()
		c0 := queryBenchCPU()
		i := 0
		for b.Loop() {
			if _, err := db.Backlinks(ctx, Query{Target: wl.Targets[targets[i%len(targets)]].ID, Limit: 100}); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(queryBenchCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
	for _, c := range []struct {
		name string
		t    int32
	}{{"one", one}, {"big", big}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			c0 := queryBenchCPU()
			for b.Loop() {
				if _, err := db.Backlinks(ctx, Query{Target: wl.Targets[c.t].ID, Limit: 100}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(queryBenchCPU()-c0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(wl.LiveCount(c.t)), "links")
		})
	}
	// The second page of the mega target: the windowed path.
	first, err := db.Backlinks(ctx, Query{Target: wl.Targets[wl.Mega].ID, Limit: 100})
	if err != nil || first.Next == nil {
		b.Fatalf("mega target: %v, next %v", err, first)
	}
	b.Run("mega-page2", func(b *testing.B) {
		b.ReportAllocs()
		c0 := queryBenchCPU()
		for b.Loop() {
			res, err := db.Backlinks(ctx, Query{Target: wl.Targets[wl.Mega].ID, After: first.Next, Limit: 100})
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Links) != 100 {
				b.Fatalf("%d links on the second page", len(res.Links))
			}
		}
		b.ReportMetric(float64(queryBenchCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

// queryBenchCPU is the process's CPU time (user and system): with the
// machine shared, CPU per query is steadier than wall time, and it counts
// the garbage collector's work too.
func queryBenchCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
