// Package bench is Eddy's storage benchmark (bench lsm), run by the
// eddy-bench binary (cmd/bench) and, through it, by `eddy-ctl bench`: it
// writes a deterministic synthetic workload shaped like the network
// (package lsm/workload) through lsm.DB on one core, checks the answers
// against the workload's own bookkeeping, measures size, warm and cold
// queries and the count of a 1M-link target, and loads the same
// operations into Pebble for comparison. It lives apart from eddy-ctl so
// that Pebble is linked into the benchmark only.
//
// A run's phases, each in its own file: workload.go (generating the
// workload, drawing the checked and queried targets), store.go (the
// object store), write.go, size.go and breakdown.go (where the bytes go),
// check.go (the model check), query.go (warm and cold queries), count.go,
// pebble.go (the comparison), result.go and report.go (the figures and
// their output), cli.go (the command line).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore"
)

// Query set sizes.
const (
	queryLinksMax    = 1000 // queried targets have at most this many live links
	queryLimit       = 100
	modelTargetCount = 50
)

type bench struct {
	cfg   Config
	log   io.Writer
	start time.Time
	prof  *os.File
	res   *Result
	wl    *workload.Workload
	st    *workload.Stream // the streaming shapes (wl is nil then)
	store objstore.Store
	dbDir string

	counting *objstore.CountingStore
	db       *lsm.DB
	mem      *memWatch
}

// Run runs the benchmark cfg describes (validated by the caller), writing
// its progress to log. The result is non-nil on success, and also when the
// answers disagreed with the model (ModelCheck says how) along with the
// error.
func Run(ctx context.Context, cfg Config, log io.Writer) (*Result, error) {
	b := &bench{cfg: cfg, log: log}
	return b.run(ctx)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench %6.1fs: %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

// profile starts (or stops) the CPU profile around a phase, and the heap
// profile's window (--heapprofile): --profile-phase's own phase, or for
// "all" the run's "all", from the first write to the end.
func (b *bench) profileStart(phase string) error {
	if b.cfg.ProfilePhase == phase {
		b.mem.profiling.Store(true)
	}
	if b.cfg.CPUProfile == "" || b.prof != nil || (b.cfg.ProfilePhase != "all" && b.cfg.ProfilePhase != phase) {
		return nil
	}
	f, err := os.Create(b.cfg.CPUProfile)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	b.prof = f
	return nil
}

func (b *bench) profileStop(phase string) {
	if b.cfg.ProfilePhase == phase {
		b.mem.profiling.Store(false)
	}
	if b.prof == nil || (b.cfg.ProfilePhase == "all" && phase != "all") {
		return
	}
	pprof.StopCPUProfile()
	b.prof.Close()
	b.prof = nil
	b.logf("CPU profile of %s written to %s", b.cfg.ProfilePhase, b.cfg.CPUProfile)
}

func (b *bench) run(ctx context.Context) (*Result, error) {
	b.start = time.Now()
	res := newResult(b.cfg.Seed)
	b.res = res
	if b.cfg.HeapProfile != "" {
		// A path that cannot be written fails the run now, not after it.
		if err := writeHeapProfile(b.cfg.HeapProfile); err != nil {
			return nil, err
		}
	}
	b.mem = newMemWatch("generate", b.cfg.HeapProfile)
	defer b.mem.close()
	res.Shape = b.cfg.Shape
	res.FanIn = lsm.FanInOrDefault(b.cfg.FanIn)
	if b.cfg.Shape != ShapeMem {
		res.Clocks = "host"
		if b.cfg.AccountClocks {
			res.Clocks = "account"
		}
	}
	if b.cfg.Shape == ShapeMem {
		if err := b.generate(); err != nil {
			return nil, err
		}
	} else if err := b.newStream(); err != nil {
		return nil, err
	}

	tmp, err := os.MkdirTemp(b.cfg.Tmp, "eddy-bench-*")
	if err != nil {
		return nil, err
	}
	if b.cfg.Keep {
		b.logf("temporary files in %s (kept)", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	store, storeName, closeStore, err := b.openStore(ctx, tmp)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	res.Store = storeName

	if err := b.profileStart("all"); err != nil {
		return nil, err
	}
	defer b.profileStop("all")

	b.counting = objstore.Counting(store)
	b.store = store
	b.dbDir = filepath.Join(tmp, "db")
	b.db, err = lsm.Open(ctx, lsm.Options{
		Store: b.counting, Dir: b.dbDir, MemtableBytes: b.cfg.MemtableBytes, CompactionFanIn: b.cfg.FanIn, ShardTargetBytes: b.cfg.ShardTargetBytes, MetaCacheBytes: b.cfg.MetaCacheBytes, NoGCGrace: true,
	})
	if err != nil {
		return nil, err
	}
	defer b.db.Close()
	phases := func() error { return b.phases(ctx, store, filepath.Join(tmp, "pebble")) }
	if b.st != nil {
		phases = func() error { return b.streamPhases(ctx) }
	}
	if err := phases(); err != nil {
		if res.ModelCheck != "" {
			return res, err
		}
		return nil, err
	}
	res.ModelCheck = "ok"
	res.ElapsedS = time.Since(b.start).Seconds()
	res.LoadAvgEnd = loadAvg()
	res.PeakRSSBytes, res.LocalDirBytes = peakRSSBytes(), b.localDirBytes()
	b.mem.sample()
	heapPeak, heapErr := b.mem.finishProfile()
	b.mem.report(res)
	b.logf("memory: peak RSS %.2f GB; sampled, anonymous at most %.2f GB (%s), mapped files %.2f GB (%s); at their sum's peak %.2f + %.2f GB (%s); Go heap live at most %.2f GB (%s)",
		float64(res.PeakRSSBytes)/1e9, float64(res.PeakRSSAnonBytes)/1e9, res.PeakRSSAnonPhase, float64(res.PeakRSSFileBytes)/1e9, res.PeakRSSFilePhase,
		float64(res.PeakRSSSampledAnon)/1e9, float64(res.PeakRSSSampledFile)/1e9, res.PeakRSSPhase, float64(res.PeakHeapLiveBytes)/1e9, res.PeakHeapLivePhase)
	switch {
	case heapErr != nil:
		// The run's figures stand; only the profile is lost.
		b.logf("no heap profile: %v", heapErr)
	case b.cfg.HeapProfile != "" && heapPeak == 0:
		b.logf("heap profile written to %s: of the heap at the end (no sample of %s after a collection)", b.cfg.HeapProfile, b.cfg.ProfilePhase)
	case b.cfg.HeapProfile != "":
		b.logf("heap profile of the largest live heap of %s (%.2f GB live at the samples) written to %s", b.cfg.ProfilePhase, float64(heapPeak)/1e9, b.cfg.HeapProfile)
	}
	mc := b.db.CatalogStats()
	res.MetaCacheBudget, res.MetaCacheBytes, res.MetaCacheMetas = mc.Budget, mc.Bytes, mc.Metas
	res.MetaCacheHits, res.MetaCacheMisses, res.MetaCacheEvictions = mc.Hits, mc.Misses, mc.Evictions
	res.setGoals(!b.cfg.NoPebble)
	b.logf("done in %.1fs", res.ElapsedS)
	return res, nil
}

// phases runs the measured phases on the open DB, in order. An error that
// sets res.ModelCheck (the answers disagreed) returns the result with it.
func (b *bench) phases(ctx context.Context, store objstore.Store, pebbleDir string) error {
	res := b.res
	if err := b.write(ctx); err != nil {
		return fmt.Errorf("write phase: %w", err)
	}
	if err := b.size(ctx, store); err != nil {
		return fmt.Errorf("size: %w", err)
	}
	if b.cfg.Breakdown {
		if err := b.breakdown(ctx, store); err != nil {
			return fmt.Errorf("breakdown: %w", err)
		}
	}
	modelTargets := b.modelTargets()
	res.ModelTargets = len(modelTargets)
	if err := b.check(ctx, modelTargets); err != nil {
		res.ModelCheck = "FAIL: " + err.Error()
		return fmt.Errorf("model check: %w", err)
	}
	queries := b.queryTargets()
	wl := b.wl
	mega := qtarget{wl.Targets[wl.Mega].ID, wl.LiveCount(wl.Mega)}
	if err := b.queries(ctx, b.memQueryTargets(queries), mega); err != nil {
		return fmt.Errorf("queries: %w", err)
	}
	if err := b.count(ctx, mega.id, wl.WrittenCount(wl.Mega), mega.live); err != nil {
		return fmt.Errorf("count: %w", err)
	}
	if !b.cfg.NoPebble {
		if err := b.pebble(ctx, pebbleDir, queries, modelTargets); err != nil {
			res.ModelCheck = "FAIL: " + err.Error()
			return fmt.Errorf("pebble: %w", err)
		}
	}
	return nil
}
