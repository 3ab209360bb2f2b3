package lsm

import (
	"context"
	"fmt"
	"testing"

	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// countBench sizes the count benchmark: a mega target of about 100,000
// live links (110,000 written, a tenth revoked) among 250,000 links,
// written in countBenchParts flushes, the first CompactionFanIn of them
// compacted into one run: one compacted run and eight delta runs per tree,
// the shape of a node's tiers between two compactions.
const (
	countBenchLinks = 250_000
	countBenchMega  = 110_000
	countBenchParts = 16
)

// countWorkloadDB loads wl into a DB on a local store in parts flushes,
// compacting the first fanIn runs into one after flush fanIn (fanIn 0:
// no compaction).
func countWorkloadDB(tb testing.TB, wl *workload.Workload, parts, fanIn int) *DB {
	tb.Helper()
	ctx := context.Background()
	store, err := local.New(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	opts := Options{Store: store, Dir: tb.TempDir(), NoGCGrace: true, CompactionFanIn: max(fanIn, 2)}
	db, err := Open(ctx, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	ri := 0
	for part := range parts {
		hi := len(wl.Links) * (part + 1) / parts
		for i := len(wl.Links) * part / parts; i < hi; i++ {
			for ri < len(wl.Revocations) && wl.Revocations[ri].At == i {
				if err := db.AddRevocation(&wl.Revocations[ri].Revocation); err != nil {
					tb.Fatal(err)
				}
				ri++
			}
			if err := db.AddBacklink(&wl.Links[i]); err != nil {
				tb.Fatal(err)
			}
		}
		if part == parts-1 {
			for ; ri < len(wl.Revocations); ri++ {
				if err := db.AddRevocation(&wl.Revocations[ri].Revocation); err != nil {
					tb.Fatal(err)
				}
			}
		}
		if err := db.Flush(ctx); err != nil {
			tb.Fatal(err)
		}
		if fanIn > 0 && part == fanIn-1 {
			if did, err := db.Compact(ctx); err != nil || !did {
				tb.Fatalf("compaction: %v, %v", did, err)
			}
		}
	}
	return db
}

// megaFilters are the filters the count benchmark and test ask of the mega
// target: none, and each (collection, path) its links come from (likes are
// the e2e's getBacklinksCount).
func megaFilters(wl *workload.Workload) map[string]Filter {
	out := map[string]Filter{"all": {}}
	seen := map[[2]uint64]bool{}
	for _, i := range wl.TargetLinks(wl.Mega) {
		l := &wl.Links[i]
		k := [2]uint64{l.Source.Collection, l.Location.PathID()}
		if seen[k] {
			continue
		}
		seen[k] = true
		name, err := wl.Codec.RenderCollection(k[0])
		if err != nil {
			name = "collection"
		}
		out[name] = Filter{Collections: []uint64{k[0]}, Paths: []uint64{k[1]}}
	}
	return out
}

// megaCount is the model's count of the mega target's live links that
// pass f.
func megaCount(wl *workload.Workload, f *Filter) uint64 {
	var n uint64
	for _, i := range wl.TargetLinks(wl.Mega) {
		if l := &wl.Links[i]; wl.Live(int(i)) && f.match(l) {
			n++
		}
	}
	return n
}

// BenchmarkCountMega: the warm count of a target of ~100,000 live links
// over nine runs, every frame in the cache, as getBacklinksCount and the
// total of every getBacklinks page ask it; and of a target a quarter that
// size (the cost per link should not grow with the target). cpu-ns/op is
// the figure (the machine is shared).
//
//	go test ./lsm -run '^$' -bench CountMega -benchmem
func BenchmarkCountMega(b *testing.B) {
	ctx := context.Background()
	for _, mega := range []int{countBenchMega, countBenchMega / 4} {
		wl, err := workload.Generate(workload.Config{Links: countBenchLinks, Seed: 6, MegaLinks: mega})
		if err != nil {
			b.Fatal(err)
		}
		db := countWorkloadDB(b, wl, countBenchParts, 8)
		target := wl.Targets[wl.Mega].ID
		for _, name := range []string{"all", "app.bsky.feed.like"} {
			f, ok := megaFilters(wl)[name]
			if !ok {
				b.Fatalf("no %s links to the mega target", name)
			}
			want := megaCount(wl, &f)
			// Warm the cache and check the answer.
			n, st, err := db.Count(ctx, target, f)
			if err != nil || n != want {
				b.Fatalf("%s: count %d, %v; want %d", name, n, err, want)
			}
			b.Run(fmt.Sprintf("mega=%d/%s", mega, name), func(b *testing.B) {
				b.ReportAllocs()
				c0 := queryBenchCPU()
				for b.Loop() {
					if _, _, err := db.Count(ctx, target, f); err != nil {
						b.Fatal(err)
					}
				}
				cpu := float64(queryBenchCPU()-c0) / float64(b.N)
				b.ReportMetric(cpu, "cpu-ns/op")
				b.ReportMetric(cpu/float64(st.Candidates), "cpu-ns/candidate")
				b.ReportMetric(float64(want), "links")
				b.ReportMetric(float64(st.Candidates), "candidates")
			})
		}
	}
}

// BenchmarkPageMega: the warm first page (limit 100) of the same target of
// ~110,000 links over nine runs, oldest first and newest first (the
// reverse order, Constellation's default). cpu-ns/op is the figure.
//
//	go test ./lsm -run '^$' -bench PageMega -benchmem
func BenchmarkPageMega(b *testing.B) {
	ctx := context.Background()
	wl, err := workload.Generate(workload.Config{Links: countBenchLinks, Seed: 6, MegaLinks: countBenchMega})
	if err != nil {
		b.Fatal(err)
	}
	db := countWorkloadDB(b, wl, countBenchParts, 8)
	target := wl.Targets[wl.Mega].ID
	for _, reverse := range []bool{false, true} {
		q := Query{Target: target, Limit: 100, Reverse: reverse}
		res, err := db.Backlinks(ctx, q) // warm the cache
		if err != nil || len(res.Links) != 100 {
			b.Fatalf("first page: %d links, %v", len(res.Links), err)
		}
		b.Run(fmt.Sprintf("reverse=%v", reverse), func(b *testing.B) {
			b.ReportAllocs()
			c0 := queryBenchCPU()
			for b.Loop() {
				if _, err := db.Backlinks(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(queryBenchCPU()-c0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(res.Stats.Candidates), "candidates")
		})
	}
}
