package bench

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// The streaming shapes (--shape backfill|live): the workload is generated
// while it is written (package lsm/workload's Stream), so the bench's
// memory does not grow with --links; its sample of targets is checked
// whole (every page and the count) at the end. The write figures leave out
// the generator's CPU time, measured around each batch of ops.

// Query targets of the streaming shapes: live links in this range (about
// 150), widened if the sample has too few.
const (
	streamQueryMin = 100
	streamQueryMax = 250
	streamBatch    = 4096
	checkBigTarget = 10_000
)

// newStream builds the streaming workload (its accounts, pools and
// sample; the links come while writing).
func (b *bench) newStream() error {
	shape, err := workload.ParseShape(b.cfg.Shape)
	if err != nil {
		return err
	}
	t0 := time.Now()
	st, err := workload.NewStream(workload.StreamConfig{
		Links: b.cfg.Links, Seed: b.cfg.Seed, Shape: shape, LiveLinks: b.cfg.LiveLinks, MegaLinks: b.cfg.MegaLinks,
		AccountClocks: b.cfg.AccountClocks,
	})
	if err != nil {
		return err
	}
	b.st = st
	b.res.GenerateS = time.Since(t0).Seconds()
	b.logf("streaming workload, shape %s: %d links, %d accounts, %d targets in the pools, %d sample targets (set up in %.1fs)",
		shape, b.cfg.Links, st.Accounts(), st.Targets(), len(st.Sample), b.res.GenerateS)
	return nil
}

// streamPhases runs the measured phases of a streaming run.
func (b *bench) streamPhases(ctx context.Context) error {
	res := b.res
	b.mem.setPhase("write")
	if err := b.streamWrite(ctx); err != nil {
		return fmt.Errorf("write phase: %w", err)
	}
	if b.cfg.CompactFull {
		b.mem.setPhase("full compaction")
		if err := b.compactFull(ctx); err != nil {
			return fmt.Errorf("full compaction: %w", err)
		}
	}
	st := b.st
	res.Links, res.LinksWritten, res.LinksRevoked = st.LiveLinks(), st.Written, st.Revoked
	res.Revocations, res.Records, res.Accounts, res.Targets = st.Revocations, st.Records, st.Accounts(), st.Targets()
	res.Updates, res.BackfillDeletes, res.Repos = st.Updates, st.BackfillDeletes, st.Repos
	res.SampleTargets, res.SampleLinks = len(st.Sample), st.SampleLinks()
	b.mem.setPhase("size")
	if err := b.size(ctx, b.store); err != nil {
		return fmt.Errorf("size: %w", err)
	}
	res.ModelTargets = len(st.Sample)
	b.mem.setPhase("model check")
	if err := b.streamCheck(ctx); err != nil {
		res.ModelCheck = "FAIL: " + err.Error()
		return fmt.Errorf("model check: %w", err)
	}
	mega := st.Sample[workload.Mega]
	b.mem.setPhase("queries")
	if err := b.queries(ctx, b.streamQueryTargets(), qtarget{mega.ID, mega.LiveCount()}); err != nil {
		return fmt.Errorf("queries: %w", err)
	}
	b.mem.setPhase("count")
	if err := b.count(ctx, mega.ID, mega.Written, mega.LiveCount()); err != nil {
		return fmt.Errorf("count: %w", err)
	}
	res.LargestTargetLive = mega.LiveCount()
	for _, t := range st.Sample {
		res.LargestTargetLive = max(res.LargestTargetLive, t.LiveCount())
	}
	return nil
}

// streamWrite generates and writes the workload on one core, in batches:
// the generator's CPU time is measured around each batch and left out of
// the write figures.
// (Over 120 lines: the write phase's one loop, its timers and its checks, read in order.)
func (b *bench) streamWrite(ctx context.Context) error {
	db, res, st := b.db, b.res, b.st
	if err := b.profileStart("write"); err != nil {
		return err
	}
	defer b.profileStop("write")
	b.logf("generating and writing %d links on one core (GOMAXPROCS=1)", b.cfg.Links)
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	lsm.ResetSpillPeak()
	runtime.GC()
	puts0 := b.counting.Snapshot()

	var flushCPU, compactCPU, genCPU time.Duration
	flushCompact := func() error { return b.flushCompact(ctx, &flushCPU, &compactCPU) }
	apply := func(op *workload.Op) error {
		var err error
		if op.Revoke {
			err = db.AddRevocation(&op.Revocation)
		} else {
			err = db.AddBacklink(&op.Link)
		}
		if errors.Is(err, lsm.ErrFull) {
			if err := flushCompact(); err != nil {
				return err
			}
			if op.Revoke {
				err = db.AddRevocation(&op.Revocation)
			} else {
				err = db.AddBacklink(&op.Link)
			}
		}
		return err
	}
	batch := make([]workload.Op, 0, streamBatch)
	wall0, cpu0, gc0 := time.Now(), cpuTime(), gcCPUTime()
	mark := cpu0
	nextLog := b.cfg.Links / 20
	write := func() error {
		c := cpuTime()
		genCPU += c - mark
		for i := range batch {
			if err := apply(&batch[i]); err != nil {
				return err
			}
		}
		batch = batch[:0]
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if st.Written >= nextLog {
			nextLog += b.cfg.Links / 20
			el := time.Since(wall0).Seconds()
			w := (cpuTime() - cpu0 - genCPU).Seconds()
			b.logf("%d links written (%.0f%%) in %.0fs: %.0f links/s wall; engine %.0fs CPU (%.0f links/s/core), generator %.0fs, collector %.1fs; %d flushes, %d compactions, %d runs; RSS %.2f GB (anonymous %.2f), Go heap live %.2f GB",
				st.Written, 100*float64(st.Written)/float64(b.cfg.Links), el, float64(st.Written)/el, w, float64(st.Written)/w, genCPU.Seconds(), (gcCPUTime() - gc0).Seconds(),
				res.Flushes, res.Compactions, len(db.View().Manifest.Runs), float64(rssBytes())/1e9, float64(rssAnonBytes())/1e9, float64(heapLiveBytes())/1e9)
		}
		mark = cpuTime()
		return nil
	}
	if err := st.Run(func(op *workload.Op) error {
		batch = append(batch, *op)
		if len(batch) == cap(batch) {
			return write()
		}
		return nil
	}); err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	if err := flushCompact(); err != nil {
		return err
	}
	cpu := cpuTime() - cpu0 - genCPU
	wall := time.Since(wall0)
	n := float64(st.Written)
	res.WriteCPUS, res.WriteWallS, res.GeneratorCPUS = cpu.Seconds(), wall.Seconds(), genCPU.Seconds()
	res.WriteGCCPUS = (gcCPUTime() - gc0).Seconds()
	res.FlushCPUS, res.CompactCPUS = flushCPU.Seconds(), compactCPU.Seconds()
	res.AddCPUS = (cpu - flushCPU - compactCPU).Seconds()
	res.WriteLinksPerSecPerCore = n / cpu.Seconds()
	res.WriteLinksPerSecWall = n / wall.Seconds()
	res.FlushLinksPerSecPerCore = n / (flushCPU + time.Duration(res.AddCPUS*float64(time.Second))).Seconds()
	res.WriteMethod = "links written / process CPU time (getrusage user+sys) of the whole write phase (adds, flushes, compactions, final flush) minus the generator's CPU time measured around each batch of 4096 ops, run with GOMAXPROCS=1"
	res.SpillPeakBytes = lsm.SpillPeakBytes()
	puts := b.counting.Snapshot().Sub(puts0)
	res.StorePuts, res.StorePutBytes = puts.Put.Requests, puts.Put.Bytes
	b.logf("wrote %d links and %d revocations in %.1fs wall, %.1fs engine CPU (%.0f links/s/core), %.1fs generator CPU: %d flushes, %d compactions",
		st.Written, st.Revocations, wall.Seconds(), cpu.Seconds(), res.WriteLinksPerSecPerCore, genCPU.Seconds(), res.Flushes, res.Compactions)
	return nil
}

// compactFull merges every run of each tree into one and times it.
func (b *bench) compactFull(ctx context.Context) error {
	res := b.res
	m := b.db.View().Manifest
	res.RunsBeforeFull = len(m.Runs)
	// The index as written, before the merge: its tables' bytes and the
	// local directory's, a live link each.
	var tables uint64
	for _, r := range m.Runs {
		for _, t := range r.Tables {
			tables += t.DataBytes + t.MetaBytes
		}
	}
	live := float64(b.st.LiveLinks())
	res.TableBytesBeforeFull = tables
	res.BytesPerLinkBeforeFull, res.LocalDirBytesPerLinkBeforeFull = float64(tables)/live, float64(b.localDirBytes())/live
	b.logf("before the full compaction: %.3f bytes/link in the tables, %.3f in the local directory", res.BytesPerLinkBeforeFull, res.LocalDirBytesPerLinkBeforeFull)
	puts0 := b.counting.Snapshot()
	runtime.GC()
	lsm.ResetSpillPeak()
	if err := b.profileStart("compact"); err != nil {
		return err
	}
	wall0, cpu0 := time.Now(), cpuTime()
	if _, err := b.db.CompactFull(ctx); err != nil {
		return err
	}
	b.profileStop("compact")
	res.FullCompactCPUS, res.FullCompactWallS = (cpuTime() - cpu0).Seconds(), time.Since(wall0).Seconds()
	res.FullCompactPutBytes = b.counting.Snapshot().Sub(puts0).Put.Bytes
	res.FullCompactSpillPeakBytes = lsm.SpillPeakBytes()
	b.logf("full compaction: %d runs became %d in %.1fs wall, %.1fs CPU (%.0f links/s/core), %.2f GB put, spill files at most %.2f GB",
		res.RunsBeforeFull, len(b.db.View().Manifest.Runs), res.FullCompactWallS, res.FullCompactCPUS,
		float64(b.st.Written)/res.FullCompactCPUS, float64(res.FullCompactPutBytes)/1e9, float64(res.FullCompactSpillPeakBytes)/1e9)
	return nil
}

// streamCheck compares every sample target's count and every page of its
// links (limit 100, following the cursor; lsm.LimitMax for targets of more
// than checkBigTarget links, so the mega target's million take a thousand
// pages, not ten thousand) with the stream's bookkeeping.
func (b *bench) streamCheck(ctx context.Context) error {
	t0 := time.Now()
	pages := 0
	for _, t := range b.st.Sample {
		t1 := time.Now()
		n, _, err := b.db.Count(ctx, t.ID, lsm.Filter{})
		if err != nil {
			return err
		}
		if want := t.LiveCount(); n != uint64(want) {
			return fmt.Errorf("%s target %s: Count %d, the workload has %d live links", t.Kind, t.Desc, n, want)
		}
		want := t.Expected()
		q := lsm.Query{Target: t.ID, Limit: queryLimit}
		if len(want) > checkBigTarget {
			q.Limit = lsm.LimitMax
		}
		at := 0
		for {
			r, err := b.db.Backlinks(ctx, q)
			if err != nil {
				return err
			}
			pages++
			if at+len(r.Links) > len(want) || !slices.Equal(r.Links, want[at:at+len(r.Links)]) {
				return fmt.Errorf("%s target %s: page at %d (%d links) differs from the workload's %d live links", t.Kind, t.Desc, at, len(r.Links), len(want))
			}
			at += len(r.Links)
			if r.Next == nil {
				break
			}
			if len(r.Links) == 0 {
				return fmt.Errorf("%s target %s: empty page with a cursor at %d", t.Kind, t.Desc, at)
			}
			q.After = r.Next
		}
		if at != len(want) {
			return fmt.Errorf("%s target %s: %d links paged, the workload has %d", t.Kind, t.Desc, at, len(want))
		}
		if d := time.Since(t1); d > 5*time.Second {
			b.logf("model check: %s target %s (%d live links) took %.1fs", t.Kind, t.Desc, len(want), d.Seconds())
		}
	}
	b.logf("model check: %d sample targets (%d live links, %d pages) agree in %.1fs", len(b.st.Sample), b.st.SampleLinks(), pages, time.Since(t0).Seconds())
	return nil
}

// streamQueryTargets draws the query set from the sample: targets of about
// 150 live links (streamQueryMin..Max; wider if fewer than ten are).
func (b *bench) streamQueryTargets() []qtarget {
	var pool []qtarget
	for lo, hi := streamQueryMin, streamQueryMax; len(pool) < 10 && lo > 1; lo, hi = lo/2, hi*2 {
		pool = pool[:0]
		for i, t := range b.st.Sample {
			if i != workload.Mega && t.LiveCount() >= lo && t.LiveCount() <= hi {
				pool = append(pool, qtarget{t.ID, t.LiveCount()})
			}
		}
	}
	if len(pool) == 0 {
		return nil
	}
	r := mrand.New(mrand.NewPCG(b.cfg.Seed, 0x7175657279))
	out := make([]qtarget, b.cfg.Queries)
	for i := range out {
		out[i] = pool[r.IntN(len(pool))]
	}
	return out
}

// manifestBytes is the size of the DB's local manifest copy.
func (b *bench) manifestBytes() int64 {
	fi, err := os.Stat(filepath.Join(b.dbDir, "MANIFEST"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// localDirBytes sums the DB's local directory (table metas, manifest).
func (b *bench) localDirBytes() int64 {
	var n int64
	filepath.Walk(b.dbDir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
