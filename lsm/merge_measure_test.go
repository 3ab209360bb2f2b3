package lsm

import (
	"context"
	"flag"
	"runtime"
	"testing"
)

var lsmMeasureRuns = flag.Int("lsm.measure-runs", 4, "TestMeasureColumnMerge: how many merged runs in the fast form to merge into columns")

// TestMeasureColumnMerge merges the oldest -lsm.measure-runs merges of
// flushes (runs in the fast form) of a bench run's index into columns,
// as the tier above merges them (CompactRuns with a node's options, on
// one core), and reports the merge's CPU time a record: the costliest
// stage of the write path at 1B, measured on its real data in seconds
// instead of a run of an hour. The output's tables are written to the
// index's store (their metas to its db directory) and left out of its
// manifest (the directory is a copy: cp -al of a running bench's).
// Reproduce:
//
//	go test ./lsm -run TestMeasureColumnMerge -v -lsm.measure-dir DIR -lsm.measure-runs 4
func TestMeasureColumnMerge(t *testing.T) {
	ctx := context.Background()
	db, store := openMeasuredIndex(t)
	v := db.View()
	var inputs []Run
	for _, r := range v.Manifest.RunsOf(TreeLinks) {
		if len(inputs) == *lsmMeasureRuns {
			break
		}
		if r.Kind == RunDelta {
			continue
		}
		fast, err := RunInFastForm(ctx, db.cat, r)
		if err != nil {
			t.Fatal(err)
		}
		if fast {
			inputs = append(inputs, r)
		}
	}
	if len(inputs) < 2 {
		t.Fatalf("%d merged runs in the fast form, want at least 2", len(inputs))
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	opt := CompactOptions{SpillDir: t.TempDir()}
	opt.ForMerge(inputs, false, DefaultCompactionFanIn)
	if opt.Fast {
		t.Fatal("a merge of merged runs writes the fast form")
	}
	runtime.GC()
	c0 := processCPU()
	out, err := CompactRuns(ctx, store, db.cat, v, inputs, opt)
	if err != nil {
		t.Fatal(err)
	}
	cpu := processCPU() - c0
	n := runsRecords(inputs)
	t.Logf("merged %d runs, %d records, into %d tables of columns (%d bytes): %.1f s of CPU, %.0f ns a record",
		len(inputs), n, len(out.Tables), out.Bytes(), cpu.Seconds(), float64(cpu.Nanoseconds())/float64(n))
}
