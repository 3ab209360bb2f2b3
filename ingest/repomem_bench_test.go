package ingest

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// BenchmarkBackfillRepositoryMemory: what writing one large repository
// holds, as the peak of the heap's live objects above what was live
// before (the CAR's own bytes aside, which both hold), over the CAR's
// bytes: "decoded", every record decoded before any is written (what a
// backfill did before 2026-12-07), against "batches", the repository
// checked by a walk without records and then decoded a batch at a time as
// it is written (ApplyRepoCAR). The memtables' growth, the same both ways,
// is in both figures. docs/bench.md, "A large repository's memory".
func BenchmarkBackfillRepositoryMemory(b *testing.B) {
	world := simnet.NewWorld(simnet.Config{Seed: 3, Accounts: 10})
	world.Step(300_000)
	var car []byte
	var did string
	for _, a := range world.Accounts() {
		if c, err := world.RepoCAR(a.DID); err == nil && len(c) > len(car) {
			car, did = c, a.DID
		}
	}
	world = nil
	for _, mode := range []string{"decoded", "batches"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			w, _, _, _ := testWriterOf(b, 1<<30) // no flush while it is written
			var peak, records int
			for range b.N {
				stamp, err := w.ReserveStamp(ctx)
				if err != nil {
					b.Fatal(err)
				}
				base, stop := heapPeak()
				switch mode {
				case "decoded":
					var ops []event.Op
					_, err = event.DecodeCARWith(car, event.CAROptions{NoCID: true}, func(o *event.Op) error { ops = append(ops, *o); return nil })
					if err == nil {
						err = w.ApplyRepo(ctx, "backfill", did, stamp, ops)
					}
					records = len(ops)
				case "batches":
					c, oerr := event.OpenCAR(car, event.CAROptions{NoCID: true})
					info, werr := c.Walk(false, nil)
					if err = oerr; err == nil {
						err = werr
					}
					if err == nil {
						_, err = w.ApplyRepoCAR(ctx, "backfill", did, stamp, c, info.Records, nil)
					}
					records = info.Records
				}
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, int(stop()-base))
			}
			b.ReportMetric(float64(len(car))/(1<<20), "CAR-MiB")
			b.ReportMetric(float64(records), "records")
			b.ReportMetric(float64(peak)/float64(len(car)), "peak-heap/CAR-byte")
		})
	}
}

// heapPeak collects the garbage, then samples the heap's live objects
// every 200 µs until stop, which returns the highest sample; base is the
// live heap after the collection.
func heapPeak() (base uint64, stop func() uint64) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base = read()
	var (
		wg   sync.WaitGroup
		peak = base
		done = make(chan struct{})
	)
	wg.Go(func() {
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return base, func() uint64 { close(done); wg.Wait(); return max(peak, read()) }
}
