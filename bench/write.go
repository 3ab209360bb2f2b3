package bench

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// write replays the workload into the DB on one core: links and
// revocations in stamp order; on ErrFull a flush, then compactions until
// none is due; at the end a flush and compactions.
func (b *bench) write(ctx context.Context) error {
	wl, db, res := b.wl, b.db, b.res
	if err := b.profileStart("write"); err != nil {
		return err
	}
	defer b.profileStop("write")
	b.logf("writing %d links and %d revocations on one core (GOMAXPROCS=1)", len(wl.Links), len(wl.Revocations))
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	runtime.GC()
	puts0 := b.counting.Snapshot()

	var flushCPU, compactCPU time.Duration
	flushCompact := func() error {
		if err := b.flushCompact(ctx, &flushCPU, &compactCPU); err != nil {
			return err
		}
		b.logf("flush %d: %.2fs CPU flushing, %.2fs compacting so far; %d compactions", res.Flushes, flushCPU.Seconds(), compactCPU.Seconds(), res.Compactions)
		return nil
	}
	addRev := func(v *link.Revocation) error {
		err := db.AddRevocation(v)
		if errors.Is(err, lsm.ErrFull) {
			if err := flushCompact(); err != nil {
				return err
			}
			err = db.AddRevocation(v)
		}
		return err
	}
	wall0, cpu0 := time.Now(), cpuTime()
	ri := 0
	for i := range wl.Links {
		for ri < len(wl.Revocations) && wl.Revocations[ri].At == i {
			if err := addRev(&wl.Revocations[ri].Revocation); err != nil {
				return err
			}
			ri++
		}
		err := db.AddBacklink(&wl.Links[i])
		if errors.Is(err, lsm.ErrFull) {
			if err := flushCompact(); err != nil {
				return err
			}
			err = db.AddBacklink(&wl.Links[i])
		}
		if err != nil {
			return err
		}
		if i&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for ; ri < len(wl.Revocations); ri++ {
		if err := addRev(&wl.Revocations[ri].Revocation); err != nil {
			return err
		}
	}
	if err := flushCompact(); err != nil {
		return err
	}
	cpu := cpuTime() - cpu0
	wall := time.Since(wall0)
	res.WriteCPUS, res.WriteWallS = cpu.Seconds(), wall.Seconds()
	res.FlushCPUS, res.CompactCPUS = flushCPU.Seconds(), compactCPU.Seconds()
	res.AddCPUS = (cpu - flushCPU - compactCPU).Seconds()
	res.WriteLinksPerSecPerCore = float64(len(wl.Links)) / cpu.Seconds()
	res.WriteLinksPerSecWall = float64(len(wl.Links)) / wall.Seconds()
	res.FlushLinksPerSecPerCore = float64(len(wl.Links)) / (flushCPU + time.Duration(res.AddCPUS*float64(time.Second))).Seconds()
	res.WriteMethod = "links written / process CPU time (getrusage user+sys) of the whole write phase (adds, flushes, compactions, final flush), run with GOMAXPROCS=1"
	puts := b.counting.Snapshot().Sub(puts0)
	res.StorePuts, res.StorePutBytes = puts.Put.Requests, puts.Put.Bytes
	b.logf("wrote in %.1fs wall, %.1fs CPU (%.0f links/s/core): %d flushes, %d compactions",
		wall.Seconds(), cpu.Seconds(), res.WriteLinksPerSecPerCore, res.Flushes, res.Compactions)
	return nil
}

// flushCompact flushes the DB, then compacts until no tier is full,
// adding the CPU time of each to flushCPU and compactCPU.
func (b *bench) flushCompact(ctx context.Context, flushCPU, compactCPU *time.Duration) error {
	db, res := b.db, b.res
	b.mem.setPhase("write: flush")
	defer b.mem.setPhase("write")
	c0 := cpuTime()
	if err := db.Flush(ctx); err != nil {
		return err
	}
	c1 := cpuTime()
	*flushCPU += c1 - c0
	res.Flushes++
	defer func() { *compactCPU += cpuTime() - c1 }()
	b.mem.setPhase("write: compaction")
	for {
		did, err := db.Compact(ctx)
		if err != nil {
			return err
		}
		if !did {
			return nil
		}
		res.Compactions++
	}
}
