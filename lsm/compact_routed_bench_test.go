package lsm

import (
	"context"
	"fmt"
	"testing"

	"github.com/eddy-backlinks/eddy/objstore/local"
)

// BenchmarkMergeFlushes: the merge of eight flushes of ~1M synthetic
// backlinks into the fast form, aligned as the leader aligns it (32
// output shards at this size), in one pass with each record routed to its
// shard's table (mergeRouted) and split into spills first (noRoute).
//
//	go test ./lsm -run XXX -bench BenchmarkMergeFlushes -benchtime 3x -cpu 1
func BenchmarkMergeFlushes(b *testing.B) {
	ctx := context.Background()
	store, err := local.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	cat := NewCatalog(b.TempDir(), store)
	const flushes, perFlush = 8, 1 << 20
	var runs []Run
	for i := range flushes {
		runs = append(runs, writeFlush(b, store, cat, synthBacklinks(uint64(100+i), perFlush)))
	}
	m, _, err := (&Manifest{}).Apply(Edit{Base: 0, Add: runs})
	if err != nil {
		b.Fatal(err)
	}
	v, err := OpenView(ctx, cat, m)
	if err != nil {
		b.Fatal(err)
	}
	for _, noRoute := range []bool{false, true} {
		b.Run(fmt.Sprintf("spilled=%v", noRoute), func(b *testing.B) {
			opt := CompactOptions{SpillDir: b.TempDir(), noRoute: noRoute}
			opt.ForMerge(runs, false, 0)
			cpu0 := processCPU()
			n := 0
			for b.Loop() {
				out, err := CompactRuns(ctx, store, cat, v, runs, opt)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(out.Tables)), "tables")
				n++
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(n), "cpu-ns/op")
		})
	}
}
