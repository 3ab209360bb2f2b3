package ingest

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runPipeline runs the leader's write path on one Raft node over sources
// until done(node) and reports events (or records) per CPU-second.
func runPipeline(b *testing.B, sources []Source, done func(*Runner) bool, units int, unit string) {
	b.Helper()
	node := oneNode(b)
	store, err := local.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	cat := lsm.NewCatalog(b.TempDir(), store)
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: cat, FlushInterval: 2 * time.Second}, Sources: sources}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cpu0, start := processCPU(), time.Now()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	for !done(r) {
		select {
		case err := <-errc:
			b.Fatalf("write path stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cpu, wall := processCPU()-cpu0, time.Since(start)
	cancel()
	<-errc
	b.ReportMetric(float64(units)/cpu.Seconds(), unit+"/cpu-s")
	b.ReportMetric(float64(units)/wall.Seconds(), unit+"/s")
}

// BenchmarkPipelineReplay: stream to published tables, per core, for a
// firehose capture and its Jetstream twin of a simulated network
// (go test ./ingest -run '^$' -bench Pipeline -benchtime 1x).
func BenchmarkPipelineReplay(b *testing.B) {
	world := simnet.NewWorld(simnet.Config{Seed: 3, Accounts: 2000})
	world.Step(100_000)
	dir := b.TempDir()
	for _, c := range []struct{ name, file string }{{"firehose", "capture.bin"}, {"jetstream", "capture.jsonl"}} {
		path := filepath.Join(dir, c.file)
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if c.name == "firehose" {
			err = world.WriteFirehose(f)
		} else {
			err = world.WriteJetstream(f)
		}
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		events := world.JetstreamCount()
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				src := &Replay{Path: path}
				runPipeline(b, []Source{src}, func(r *Runner) bool {
					return Done(r.Config.Node.FSM.Cursor(src.Name()))
				}, events, "events")
			}
		})
	}
}

// BenchmarkBackfill: repositories from the simulated PDSes to published
// tables, records per core.
func BenchmarkBackfill(b *testing.B) {
	world := simnet.NewWorld(simnet.Config{Seed: 4, Accounts: 1000})
	world.Step(100_000)
	sim, err := simnet.Serve(world)
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	records := world.RecordCount()
	for i := 0; i < b.N; i++ {
		bf := &Backfill{Relay: sim.RelayURL(), PLC: sim.PLCURL(), DIDWeb: sim.PLCURL()}
		runPipeline(b, []Source{bf}, func(r *Runner) bool {
			return Done(r.Config.Node.FSM.Cursor(bf.Name()))
		}, records, "records")
	}
}
