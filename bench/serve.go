package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// ServeResult is what `eddy-bench serve` measures: a fresh process
// serving a kept run's index the way a node does (its store, its local
// metadata directory, the default caches), and the memory that costs.
type ServeResult struct {
	Dir               string  `json:"dir"`
	Links             int     `json:"links"`
	Runs              int     `json:"runs"`
	Tables            int     `json:"tables"`
	OpenS             float64 `json:"open_s"`
	CacheBytes        int64   `json:"cache_bytes"`
	MetaCacheBudget   int64   `json:"meta_cache_budget"`
	QueryTargets      int     `json:"query_targets"`
	QueryLinksMean    float64 `json:"query_target_links_mean"`
	Queries           int     `json:"queries"`
	QueryP50us        float64 `json:"query_p50_us"`
	QueryP99us        float64 `json:"query_p99_us"`
	MetaCacheBytes    int64   `json:"meta_cache_bytes"`
	MetaCacheMetas    int     `json:"meta_cache_metas"`
	MetaCacheMisses   uint64  `json:"meta_cache_misses"`
	FrameCacheBytes   int64   `json:"frame_cache_bytes"`
	RSSBytes          int64   `json:"rss_bytes"`
	MinorFaults       int64   `json:"minor_faults"` // over the timed pass
	MajorFaults       int64   `json:"major_faults"`
	RSSAnonBytes      int64   `json:"rss_anon_bytes"`
	RSSFileBytes      int64   `json:"rss_file_bytes"`
	MetaMapped        bool    `json:"meta_mapped"`
	PeakRSSBytes      int64   `json:"peak_rss_bytes"`
	GoHeapInuseBytes  uint64  `json:"go_heap_inuse_bytes"`
	LocalMetaDirBytes int64   `json:"local_meta_dir_bytes"`
	RevocationRuns    int     `json:"revocation_runs"`
	Compactions       int     `json:"compactions,omitempty"` // --compact: merges made before the queries
	CompactS          float64 `json:"compact_s,omitempty"`
	// --compact-full: every tree merged into one run before the queries
	// (DB.CompactFull), its CPU time and wall time.
	FullCompactCPUs float64 `json:"full_compact_cpu_s,omitempty"`
	FullCompactS    float64 `json:"full_compact_s,omitempty"`
	// StoreTableBytes: the data and meta objects of the manifest's
	// tables, what the bucket holds but for its manifests.
	StoreTableBytes uint64 `json:"store_table_bytes"`
	// --counts: Count of the mega target, warm (after one count to warm
	// the cache), the median of the timed ones, measured after the memory
	// figures above.
	MegaLive     uint64  `json:"mega_live,omitempty"`
	CountWarmMs  float64 `json:"count_warm_ms,omitempty"`
	CountMinMs   float64 `json:"count_min_ms,omitempty"`
	CountCPUMs   float64 `json:"count_cpu_ms,omitempty"`
	CountPeakRSS int64   `json:"count_peak_rss_bytes,omitempty"`
}

// serveMain is `eddy-bench serve --dir DIR`: DIR is the temporary
// directory a `bench lsm --keep` run of a streaming shape left (its store
// and db directories); --links, --seed, --shape and --mega-links must be
// the run's, so that the workload's sample targets are the same. It opens
// the index with the node's default caches, picks the sample targets of
// 100-250 live links (counted), answers --queries of them twice (the
// first fills the caches) and reports the second pass's latency and the
// process's memory.
func serveMain(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name+" serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "a kept run's temporary directory (holding store/ and db/)")
	links := fs.Int("links", 0, "the run's --links")
	seed := fs.Uint64("seed", 1, "the run's --seed")
	shape := fs.String("shape", "backfill", "the run's --shape (backfill or live)")
	mega := fs.Int("mega-links", 0, "the run's --mega-links")
	accountClocks := fs.Bool("account-clocks", false, "the run's --account-clocks")
	queries := fs.Int("queries", 4000, "timed queries")
	metaCache := fs.Int64("meta-cache-bytes", 0, "0: table metadata mapped and read in place (the default); > 0: a cache of decoded metadata of that size; < 0: all decoded")
	cache := fs.Int64("cache-bytes", 0, "decoded-frame cache (0: lsm.DefaultCacheBytes)")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the timed pass to this file (and of the counts to FILE.count)")
	counts := fs.Int("counts", 0, "then time this many counts of the mega target (after one that warms the cache; the median is reported)")
	compact := fs.Bool("compact", false, "first make every compaction this engine's policy picks on the index (as a node of this version would after an upgrade), then measure")
	full := fs.Bool("compact-full", false, "first merge every tree into one run (a major compaction, as after a backfill; after --compact), then measure")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *links <= 0 {
		return fmt.Errorf("%w: serve needs --dir and --links", ErrUsage)
	}
	sh, err := workload.ParseShape(*shape)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	st, err := workload.NewStream(workload.StreamConfig{Links: *links, Seed: *seed, Shape: sh, MegaLinks: *mega, AccountClocks: *accountClocks})
	if err != nil {
		return err
	}
	res, err := serve(ctx, *dir, st, *seed, *queries, *cache, *metaCache, *profile, *compact, *full, stderr)
	if err != nil {
		return err
	}
	res.Links = *links
	if *counts > 0 {
		if err := serveCounts(ctx, *dir, st, res, *counts, *cache, *metaCache, *profile, stderr); err != nil {
			return err
		}
	}
	return json.NewEncoder(stdout).Encode(res)
}

// serve opens the index in dir and measures it (serveMain).
func serve(ctx context.Context, dir string, st *workload.Stream, seed uint64, queries int, cache, metaCache int64, profile string, compact, full bool, log io.Writer) (*ServeResult, error) {
	t0 := time.Now()
	db, err := openKept(ctx, dir, cache, metaCache)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res := &ServeResult{Dir: dir, OpenS: time.Since(t0).Seconds(), CacheBytes: cache}
	if compact {
		t1 := time.Now()
		for {
			did, err := db.Compact(ctx)
			if err != nil {
				return nil, err
			}
			if !did {
				break
			}
			res.Compactions++
		}
		res.CompactS = time.Since(t1).Seconds()
		fmt.Fprintf(log, "serve: %d compactions in %.1fs\n", res.Compactions, res.CompactS)
	}
	if full {
		t1, c1 := time.Now(), cpuTime()
		if _, err := db.CompactFull(ctx); err != nil {
			return nil, err
		}
		res.FullCompactCPUs, res.FullCompactS = (cpuTime() - c1).Seconds(), time.Since(t1).Seconds()
		fmt.Fprintf(log, "serve: full compaction in %.1fs (%.1fs of CPU)\n", res.FullCompactS, res.FullCompactCPUs)
	}
	m := db.View().Manifest
	res.Runs = len(m.Runs)
	res.RevocationRuns = len(m.RunsOf(lsm.TreeRevocations))
	for _, r := range m.Runs {
		res.Tables += len(r.Tables)
		for _, t := range r.Tables {
			res.StoreTableBytes += t.DataBytes + t.MetaBytes
		}
	}
	var pool []qtarget
	for i, t := range st.Sample {
		if i == workload.Mega {
			continue
		}
		n, _, err := db.Count(ctx, t.ID, lsm.Filter{})
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", t.Desc, err)
		}
		if n >= streamQueryMin && n <= streamQueryMax {
			pool = append(pool, qtarget{t.ID, int(n)})
		}
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("no sample target of %d-%d live links", streamQueryMin, streamQueryMax)
	}
	r := mrand.New(mrand.NewPCG(seed, 0x7175657279))
	targets := make([]qtarget, queries)
	var sum float64
	for i := range targets {
		targets[i] = pool[r.IntN(len(pool))]
		sum += float64(targets[i].live)
	}
	res.QueryTargets, res.Queries, res.QueryLinksMean = len(pool), queries, sum/float64(queries)
	lat := make([]time.Duration, 0, queries)
	for pass := range 2 {
		if pass == 1 {
			quiesceGC()
			res.MinorFaults, res.MajorFaults = pageFaults()
		}
		if pass == 1 && profile != "" {
			stop, err := startCPUProfile(profile)
			if err != nil {
				return nil, err
			}
			defer stop()
		}
		for _, t := range targets {
			t0 := time.Now()
			out, err := db.Backlinks(ctx, lsm.Query{Target: t.id, Limit: queryLimit})
			if err != nil {
				return nil, err
			}
			if len(out.Links) != min(queryLimit, t.live) {
				return nil, fmt.Errorf("target %v: %d links, want %d", t.id, len(out.Links), min(queryLimit, t.live))
			}
			if pass == 1 {
				lat = append(lat, time.Since(t0))
			}
		}
	}
	min1, maj1 := pageFaults()
	res.MinorFaults, res.MajorFaults = min1-res.MinorFaults, maj1-res.MajorFaults
	slices.Sort(lat)
	res.QueryP50us, res.QueryP99us = percentile(lat, 0.5), percentile(lat, 0.99)
	mc := db.CatalogStats()
	res.MetaCacheBudget, res.MetaCacheBytes, res.MetaCacheMetas, res.MetaCacheMisses = mc.Budget, mc.Bytes, mc.Metas, mc.Misses
	res.FrameCacheBytes = db.Reader().Cache().Stats().Bytes
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.GoHeapInuseBytes = ms.HeapInuse
	res.RSSBytes, res.PeakRSSBytes = rssBytes(), peakRSSBytes()
	res.RSSAnonBytes, res.RSSFileBytes, res.MetaMapped = rssAnonBytes(), rssFileBytes(), mc.Mapped
	res.LocalMetaDirBytes, _, _ = dirBytes(filepath.Join(dir, "db"))
	fmt.Fprintf(log, "serve: %d runs (%d of revocations), %d tables, opened in %.1fs; %d queries of %d targets (mean %.0f links): p50 %.0fµs p99 %.0fµs (page faults %d minor, %d major); RSS %.2f GB (anon %.2f, mapped files %.2f; peak %.2f GB), Go heap %.2f GB, meta cache %.1f MB (%d misses), frame cache %.1f MB\n",
		res.Runs, res.RevocationRuns, res.Tables, res.OpenS, queries, len(pool), res.QueryLinksMean, res.QueryP50us, res.QueryP99us, res.MinorFaults, res.MajorFaults,
		float64(res.RSSBytes)/1e9, float64(res.RSSAnonBytes)/1e9, float64(res.RSSFileBytes)/1e9, float64(res.PeakRSSBytes)/1e9, float64(ms.HeapInuse)/1e9, float64(mc.Bytes)/1e6, mc.Misses, float64(res.FrameCacheBytes)/1e6)
	return res, nil
}

// openKept opens the index a kept run left in dir (its store and db
// directories) as a node would, with these caches.
func openKept(ctx context.Context, dir string, cache, metaCache int64) (*lsm.DB, error) {
	store, err := local.New(filepath.Join(dir, "store"))
	if err != nil {
		return nil, err
	}
	return lsm.Open(ctx, lsm.Options{Store: store, Dir: filepath.Join(dir, "db"), CacheBytes: cache, MetaCacheBytes: metaCache, NoGCGrace: true})
}

// serveCounts times Count of the stream's mega target in a fresh DB on
// dir (as a node would answer getBacklinksCount: no model in the heap):
// one count to warm the cache, then n timed.
func serveCounts(ctx context.Context, dir string, st *workload.Stream, res *ServeResult, n int, cache, metaCache int64, profile string, log io.Writer) error {
	db, err := openKept(ctx, dir, cache, metaCache)
	if err != nil {
		return err
	}
	defer db.Close()
	id := st.Sample[workload.Mega].ID
	want, _, err := db.Count(ctx, id, lsm.Filter{})
	if err != nil {
		return err
	}
	if profile != "" {
		stop, err := startCPUProfile(profile + ".count")
		if err != nil {
			return err
		}
		defer stop()
	}
	lat, cpu, err := timeCounts(ctx, db, id, n, want, true)
	if err != nil {
		return err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	res.MegaLive = want
	res.CountWarmMs, res.CountMinMs, res.CountCPUMs = ms(lat[len(lat)/2]), ms(lat[0]), ms(cpu[len(cpu)/2])
	res.CountPeakRSS = peakRSSBytes()
	fmt.Fprintf(log, "serve: count of the mega target (%d live links): %.0f ms warm (median of %d; min %.0f; %.0f ms CPU); peak RSS %.2f GB\n",
		want, res.CountWarmMs, n, res.CountMinMs, res.CountCPUMs, float64(res.CountPeakRSS)/1e9)
	return nil
}
