package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

func init() {
	register("bench", command{
		summary: "run a benchmark: bench lsm --links N [--store file|s3|URL] [--seed S] [--json]",
		run:     runBench,
	})
}

const benchUsage = `Usage: eddy-ctl bench lsm [flags]

Writes a deterministic synthetic workload shaped like the atproto network
(package lsm/workload) through lsm.DB, checks the answers against the
workload's own bookkeeping, measures size, write speed, queries and counts,
loads the same links into Pebble for comparison, and prints the figures.

Flags:
`

// Query set sizes.
const (
	benchQueryLinksMax = 1000 // queried targets have at most this many live links
	benchQueryLimit    = 100
	benchModelTargets  = 50
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "lsm" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, benchUsage)
			benchFlags(&benchConfig{}, stdout).PrintDefaults()
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: want `bench lsm [flags]`", errUsage)
	}
	var cfg benchConfig
	fs := benchFlags(&cfg, stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if cfg.links < 1000 {
		return fmt.Errorf("%w: --links must be at least 1000", errUsage)
	}
	switch cfg.profilePhase {
	case "all", "write", "query", "cold", "count", "pebble":
	default:
		return fmt.Errorf("%w: --profile-phase must be all, write, query, cold, count or pebble", errUsage)
	}
	b := &bench{cfg: cfg, log: stderr}
	res, err := b.run(ctx)
	if res != nil {
		if cfg.json {
			enc := json.NewEncoder(stdout)
			if e := enc.Encode(res); e != nil && err == nil {
				err = e
			}
		} else {
			printBenchText(stdout, res)
		}
	}
	return err
}

type benchConfig struct {
	links        int
	seed         uint64
	store        string
	json         bool
	queries      int
	memtable     int
	cpuProfile   string
	profilePhase string
	tmp          string
	keep         bool
	noPebble     bool
	breakdown    bool
}

func benchFlags(c *benchConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bench lsm", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.links, "links", 2_000_000, "backlinks to write")
	fs.Uint64Var(&c.seed, "seed", 1, "workload seed")
	fs.StringVar(&c.store, "store", "file", "object store: file (a temporary directory), s3 (a MinIO server started for the run), or a store URL (objstore.Open; the run uses a fresh prefix in it and deletes it after)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object")
	fs.IntVar(&c.queries, "queries", 4000, "warm queries (targets with up to 1,000 links, limit 100)")
	fs.IntVar(&c.memtable, "memtable-bytes", 0, "memtable bound per tree (0: lsm.DefaultMemtableBytes)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of --profile-phase to this file")
	fs.StringVar(&c.profilePhase, "profile-phase", "all", "phase the CPU profile covers: all (from the first write to the end), write (the write phase), query (the timed warm queries), cold (the cold queries), count (the counts of the mega target) or pebble")
	fs.StringVar(&c.tmp, "tmp", "", "directory for the run's temporary files (default: the system's)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary files (and a URL store's objects)")
	fs.BoolVar(&c.noPebble, "no-pebble", false, "skip the Pebble comparison")
	fs.BoolVar(&c.breakdown, "breakdown", false, "estimate what each field of a backlink costs in the data objects (rebuilds the tables with one field blanked at a time)")
	return fs
}

// benchResult is the JSON the command prints.
type benchResult struct {
	Go       string  `json:"go"`
	GOOS     string  `json:"goos"`
	GOARCH   string  `json:"goarch"`
	CPUs     int     `json:"cpus"`
	Store    string  `json:"store"`
	Seed     uint64  `json:"seed"`
	ElapsedS float64 `json:"elapsed_s"`
	// The machine's load (/proc/loadavg, 1 minute) when the run started and
	// ended: other processes competing for the cores skew the timings.
	LoadAvgStart float64 `json:"loadavg_start"`
	LoadAvgEnd   float64 `json:"loadavg_end"`

	// The workload.
	Links        int     `json:"links"` // live links after the run
	LinksWritten int     `json:"links_written"`
	LinksRevoked int     `json:"links_revoked"`
	Revocations  int     `json:"revocations"`
	Records      int     `json:"records"`
	Accounts     int     `json:"accounts"`
	Targets      int     `json:"targets"`
	GenerateS    float64 `json:"generate_s"`

	// Size.
	BytesPerLink          float64 `json:"bytes_per_link"`
	MetaBytesPerLink      float64 `json:"meta_bytes_per_link"`
	DataBytesPerLink      float64 `json:"data_bytes_per_link"`
	LinkTreeBytesPerLink  float64 `json:"links_tree_bytes_per_link"`
	RevTreeBytesPerLink   float64 `json:"revocations_tree_bytes_per_link"`
	LinkTreeMetaPerLink   float64 `json:"links_tree_meta_bytes_per_link"`
	RevTreeMetaPerLink    float64 `json:"revocations_tree_meta_bytes_per_link"`
	FilterBytesPerLink    float64 `json:"filter_bytes_per_link"`
	FenceBytesPerLink     float64 `json:"fence_bytes_per_link"`
	DataBytes             uint64  `json:"data_bytes"`
	MetaBytes             uint64  `json:"meta_bytes"`
	StoreBytes            int64   `json:"store_bytes"` // every object under the store, manifests included
	StoreObjects          int     `json:"store_objects"`
	Tables                int     `json:"tables"`
	LinkTables            int     `json:"links_tables"`
	RevTables             int     `json:"revocations_tables"`
	Runs                  int     `json:"runs"`
	Frames                int     `json:"frames"`
	Flushes               int     `json:"flushes"`
	Compactions           int     `json:"compactions"`
	RawBytesPerLink       float64 `json:"raw_bytes_per_link"` // 64-byte links + 32-byte revocations, uncompressed
	CompressionVsRawRatio float64 `json:"compression_ratio"`

	// With --breakdown: bytes per live link of the links tree's data that
	// each backlink field costs (the data shrinks by this much when the
	// field is blanked and the tables rebuilt); "target" is what is left
	// with every source field blanked.
	LinkDataBreakdown map[string]float64 `json:"links_data_bytes_per_link_by_field,omitempty"`

	// Writes.
	WriteLinksPerSecPerCore float64 `json:"write_links_per_sec_per_core"`
	WriteMethod             string  `json:"write_method"`
	WriteCPUS               float64 `json:"write_cpu_s"`
	WriteWallS              float64 `json:"write_wall_s"`
	WriteLinksPerSecWall    float64 `json:"write_links_per_sec_wall"`
	AddCPUS                 float64 `json:"write_add_cpu_s"`
	FlushCPUS               float64 `json:"write_flush_cpu_s"`
	CompactCPUS             float64 `json:"write_compact_cpu_s"`
	FlushLinksPerSecPerCore float64 `json:"flush_links_per_sec_per_core"`
	StorePuts               int64   `json:"store_puts"`
	StorePutBytes           int64   `json:"store_put_bytes"`

	// Queries.
	Queries        int     `json:"queries"`
	QueryTargets   int     `json:"query_targets"`
	QueryLinksMean float64 `json:"query_target_links_mean"`
	QueryP50us     float64 `json:"query_p50_us"`
	QueryP90us     float64 `json:"query_p90_us"`
	QueryP99us     float64 `json:"query_p99_us"`
	QueryMaxUs     float64 `json:"query_max_us"`
	QueryMeanUs    float64 `json:"query_mean_us"`
	// The process's CPU time (getrusage) per warm query: what a query
	// costs whatever else runs on the machine.
	QueryCPUP50us    float64 `json:"query_cpu_p50_us"`
	QueryCPUP99us    float64 `json:"query_cpu_p99_us"`
	WarmGETs         int64   `json:"warm_query_gets"` // GETs during the timed warm pass (0: all from the frame cache)
	GetsPerQueryMax  int64   `json:"gets_per_query_max"`
	GetsPerQueryMean float64 `json:"gets_per_query_mean"`
	GetsMaxTarget    int     `json:"gets_max_target_links"`
	Round1GETsMax    int     `json:"round1_gets_max"`
	Round2GETsMax    int     `json:"round2_gets_max"`
	RoundTripsMax    int     `json:"round_trips_per_query_max"` // sequential rounds of GETs (round one, then each revocation pass that fetched)
	ColdQueries      int     `json:"cold_queries"`
	ColdQueryP50us   float64 `json:"cold_query_p50_us"`
	ColdQueryP99us   float64 `json:"cold_query_p99_us"`

	// Count of the mega target.
	Count1MMs         float64 `json:"count_1m_ms"`
	Count1MMinMs      float64 `json:"count_1m_min_ms"`
	Count1MCPUMs      float64 `json:"count_1m_cpu_ms"`    // process CPU time of the median count
	CountTargetLinks  int     `json:"count_target_links"` // links written to it
	CountTargetLive   int     `json:"count_target_live"`  // live links (what Count returns)
	CountColdMs       float64 `json:"count_1m_cold_ms"`
	CountColdGets     int64   `json:"count_1m_cold_gets"`
	CountCandidates   int     `json:"count_1m_candidates"`
	MegaPage100Ms     float64 `json:"mega_page_100_ms"` // Backlinks limit 100 of the mega target, warm
	MegaPage100ColdGs int64   `json:"mega_page_100_cold_gets"`

	// Pebble, fed the same links.
	PebbleVersion            string           `json:"pebble_version,omitempty"`
	PebbleBytesPerLink       float64          `json:"pebble_bytes_per_link,omitempty"` // directory after compaction, close, reopen, close / live links
	PebbleDirBytes           int64            `json:"pebble_dir_bytes,omitempty"`
	PebbleDirByKind          map[string]int64 `json:"pebble_dir_bytes_by_kind,omitempty"`
	PebbleDirBytesAfterLoad  int64            `json:"pebble_dir_bytes_after_load,omitempty"` // right after compaction and close: recycled WALs included
	PebbleDirByKindAfterLoad map[string]int64 `json:"pebble_dir_bytes_after_load_by_kind,omitempty"`
	PebbleSSTBytes           uint64           `json:"pebble_sst_bytes,omitempty"` // live sstables only
	PebbleSSTBytesPerLink    float64          `json:"pebble_sst_bytes_per_link,omitempty"`
	PebbleKeyBytesMean       float64          `json:"pebble_key_bytes_mean,omitempty"`
	PebbleQueryP50us         float64          `json:"pebble_query_p50_us,omitempty"`
	PebbleQueryP99us         float64          `json:"pebble_query_p99_us,omitempty"`
	PebbleQueryCPUP50us      float64          `json:"pebble_query_cpu_p50_us,omitempty"`
	PebbleLoadS              float64          `json:"pebble_load_s,omitempty"`
	PebbleCompactS           float64          `json:"pebble_compact_s,omitempty"`
	EddyVsPebbleBytes        float64          `json:"eddy_vs_pebble_bytes,omitempty"`

	// The model check: answers compared with the workload's bookkeeping.
	ModelCheck   string `json:"model_check"`
	ModelTargets int    `json:"model_targets"`

	// Goals (meaningful at --links 2000000).
	Goals map[string]bool `json:"goals"`
}

type bench struct {
	cfg   benchConfig
	log   io.Writer
	start time.Time
	prof  *os.File
	res   *benchResult
	wl    *workload.Workload

	counting *objstore.CountingStore
	db       *lsm.DB
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench %6.1fs: %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

// profile starts (or stops) the CPU profile around a phase.
func (b *bench) profileStart(phase string) error {
	if b.cfg.cpuProfile == "" || b.prof != nil || (b.cfg.profilePhase != "all" && b.cfg.profilePhase != phase) {
		return nil
	}
	f, err := os.Create(b.cfg.cpuProfile)
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
	if b.prof == nil || (b.cfg.profilePhase == "all" && phase != "all") {
		return
	}
	pprof.StopCPUProfile()
	b.prof.Close()
	b.prof = nil
	b.logf("CPU profile of %s written to %s", b.cfg.profilePhase, b.cfg.cpuProfile)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (b *bench) run(ctx context.Context) (*benchResult, error) {
	b.start = time.Now()
	res := &benchResult{
		Go: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(),
		Seed: b.cfg.seed, Goals: map[string]bool{}, LoadAvgStart: loadAvg(),
	}
	b.res = res

	b.logf("generating %d links (seed %d)", b.cfg.links, b.cfg.seed)
	t0 := time.Now()
	wl, err := workload.Generate(workload.Config{Links: b.cfg.links, Seed: b.cfg.seed})
	if err != nil {
		return nil, err
	}
	b.wl = wl
	res.GenerateS = time.Since(t0).Seconds()
	res.Links, res.LinksWritten, res.LinksRevoked = wl.LiveLinks(), len(wl.Links), wl.RevokedLinks()
	res.Revocations, res.Records, res.Accounts, res.Targets = len(wl.Revocations), wl.Records, wl.Accounts, len(wl.Targets)
	b.logf("generated in %.1fs: %d links (%d live), %d revocations, %d targets, %d accounts",
		res.GenerateS, len(wl.Links), wl.LiveLinks(), len(wl.Revocations), len(wl.Targets), wl.Accounts)

	tmp, err := os.MkdirTemp(b.cfg.tmp, "eddy-bench-*")
	if err != nil {
		return nil, err
	}
	if b.cfg.keep {
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
	b.db, err = lsm.Open(ctx, lsm.Options{
		Store: b.counting, Dir: filepath.Join(tmp, "db"), MemtableBytes: b.cfg.memtable, NoGCGrace: true,
	})
	if err != nil {
		return nil, err
	}
	defer b.db.Close()

	if err := b.write(ctx); err != nil {
		return nil, fmt.Errorf("write phase: %w", err)
	}
	if err := b.size(ctx, store); err != nil {
		return nil, fmt.Errorf("size: %w", err)
	}
	if b.cfg.breakdown {
		if err := b.breakdown(ctx, store); err != nil {
			return nil, fmt.Errorf("breakdown: %w", err)
		}
	}
	modelTargets := b.modelTargets()
	res.ModelTargets = len(modelTargets)
	if err := b.check(ctx, modelTargets); err != nil {
		res.ModelCheck = "FAIL: " + err.Error()
		return res, fmt.Errorf("model check: %w", err)
	}
	queries := b.queryTargets()
	if err := b.queries(ctx, queries); err != nil {
		return nil, fmt.Errorf("queries: %w", err)
	}
	if err := b.count(ctx); err != nil {
		return nil, fmt.Errorf("count: %w", err)
	}
	if !b.cfg.noPebble {
		if err := b.pebble(ctx, filepath.Join(tmp, "pebble"), queries, modelTargets); err != nil {
			res.ModelCheck = "FAIL: " + err.Error()
			return res, fmt.Errorf("pebble: %w", err)
		}
	}
	res.ModelCheck = "ok"
	res.ElapsedS = time.Since(b.start).Seconds()
	res.LoadAvgEnd = loadAvg()
	res.Goals["bytes_per_link<=16"] = res.BytesPerLink <= 16
	if !b.cfg.noPebble {
		res.Goals["bytes_per_link<=pebble/3"] = res.BytesPerLink*3 <= res.PebbleBytesPerLink
	}
	res.Goals["write_links_per_sec_per_core>=1e6"] = res.WriteLinksPerSecPerCore >= 1e6
	res.Goals["query_p50_us<=100"] = res.QueryP50us <= 100
	res.Goals["query_p99_us<=1000"] = res.QueryP99us <= 1000
	res.Goals["count_1m_ms<=1000"] = res.Count1MMs <= 1000
	b.logf("done in %.1fs", res.ElapsedS)
	return res, nil
}

// openStore returns the run's store, its name, and a function that
// releases it (and deletes what the run wrote to a URL store).
func (b *bench) openStore(ctx context.Context, tmp string) (objstore.Store, string, func(), error) {
	switch b.cfg.store {
	case "file":
		s, err := local.New(filepath.Join(tmp, "store"))
		if err != nil {
			return nil, "", nil, err
		}
		return s, "file", func() {}, nil
	case "s3":
		dir := filepath.Join(tmp, "minio")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, "", nil, err
		}
		srv, err := miniotest.Start(ctx, dir)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--store s3 runs a local MinIO server: %w", err)
		}
		s, err := s3.New(s3.Config{
			Endpoint: srv.Endpoint(), Region: "us-east-1", Bucket: miniotest.Bucket, Prefix: "bench",
			Insecure: true, PathStyle: true, AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
		})
		if err != nil {
			srv.Stop()
			return nil, "", nil, err
		}
		b.logf("MinIO at %s", srv.Endpoint())
		return s, "s3 (local MinIO)", func() { s.Close(); srv.Stop() }, nil
	default:
		inner, err := objstore.Open(b.cfg.store)
		if err != nil {
			return nil, "", nil, err
		}
		var r [6]byte
		_, _ = rand.Read(r[:])
		prefix := "eddy-bench-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(r[:]) + "/"
		s := &prefixStore{inner: inner, prefix: prefix}
		name := fmt.Sprint(inner)
		b.logf("store %s, prefix %s", name, prefix)
		return s, name, func() {
			if !b.cfg.keep {
				var keys []string
				_ = s.List(context.Background(), "", func(k string, _ int64) error { keys = append(keys, k); return nil })
				for _, k := range keys {
					_ = s.Delete(context.Background(), k)
				}
			}
			if c, ok := inner.(io.Closer); ok {
				c.Close()
			}
		}, nil
	}
}

// prefixStore puts every key of a Store under a prefix.
type prefixStore struct {
	inner  objstore.Store
	prefix string
}

func (p *prefixStore) Put(ctx context.Context, key string, data []byte) error {
	return p.inner.Put(ctx, p.prefix+key, data)
}
func (p *prefixStore) Get(ctx context.Context, key string) ([]byte, error) {
	return p.inner.Get(ctx, p.prefix+key)
}
func (p *prefixStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return p.inner.GetRange(ctx, p.prefix+key, off, n)
}
func (p *prefixStore) Size(ctx context.Context, key string) (int64, error) {
	return p.inner.Size(ctx, p.prefix+key)
}
func (p *prefixStore) Delete(ctx context.Context, key string) error {
	return p.inner.Delete(ctx, p.prefix+key)
}
func (p *prefixStore) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	return p.inner.List(ctx, p.prefix+prefix, func(k string, n int64) error {
		return fn(strings.TrimPrefix(k, p.prefix), n)
	})
}

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
		c0 := cpuTime()
		if err := db.Flush(ctx); err != nil {
			return err
		}
		c1 := cpuTime()
		flushCPU += c1 - c0
		res.Flushes++
		for {
			did, err := db.Compact(ctx)
			if err != nil {
				return err
			}
			if !did {
				break
			}
			res.Compactions++
		}
		compactCPU += cpuTime() - c1
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

// size sums the live tables of the manifest.
func (b *bench) size(ctx context.Context, store objstore.Store) error {
	res := b.res
	m := b.db.View().Manifest
	res.Runs = len(m.Runs)
	var linkBytes, revBytes, linkMeta, revMeta, filterBytes, fenceBytes uint64
	var rawBytes uint64
	for _, r := range m.Runs {
		for _, t := range r.Tables {
			res.Tables++
			res.DataBytes += t.DataBytes
			res.MetaBytes += t.MetaBytes
			switch r.Tree {
			case lsm.TreeLinks:
				res.LinkTables++
				linkBytes += t.DataBytes + t.MetaBytes
				linkMeta += t.MetaBytes
				rawBytes += t.Records * link.BacklinkSize
			case lsm.TreeRevocations:
				res.RevTables++
				revBytes += t.DataBytes + t.MetaBytes
				revMeta += t.MetaBytes
				rawBytes += t.Records * link.RevocationSize
			}
			// Where the meta bytes go: the filter and the fences.
			mb, err := store.Get(ctx, "tables/"+string(r.Tree)+"/"+t.ID+".meta")
			if err != nil {
				return err
			}
			tm, err := lsm.DecodeMeta(mb)
			if err != nil {
				return err
			}
			res.Frames += len(tm.Frames)
			filterBytes += uint64(tm.FilterBytes())
			fenceBytes += uint64(len(tm.Frames) * (17 + tm.Format.Width))
		}
	}
	live := float64(b.wl.LiveLinks())
	res.BytesPerLink = float64(res.DataBytes+res.MetaBytes) / live
	res.MetaBytesPerLink = float64(res.MetaBytes) / live
	res.DataBytesPerLink = float64(res.DataBytes) / live
	res.LinkTreeBytesPerLink = float64(linkBytes) / live
	res.RevTreeBytesPerLink = float64(revBytes) / live
	res.LinkTreeMetaPerLink = float64(linkMeta) / live
	res.RevTreeMetaPerLink = float64(revMeta) / live
	res.FilterBytesPerLink = float64(filterBytes) / live
	res.FenceBytesPerLink = float64(fenceBytes) / live
	res.RawBytesPerLink = float64(rawBytes) / live
	res.CompressionVsRawRatio = float64(rawBytes) / float64(res.DataBytes+res.MetaBytes)
	err := store.List(ctx, "", func(_ string, n int64) error {
		res.StoreObjects++
		res.StoreBytes += n
		return nil
	})
	b.logf("size: %.2f bytes/link (%.2f data, %.2f meta) in %d tables of %d runs", res.BytesPerLink, res.DataBytesPerLink, res.MetaBytesPerLink, res.Tables, res.Runs)
	return err
}

// readTable returns every record of a table.
func readTable(ctx context.Context, store objstore.Store, tree lsm.Tree, id string) ([]byte, error) {
	mb, err := store.Get(ctx, "tables/"+string(tree)+"/"+id+".meta")
	if err != nil {
		return nil, err
	}
	tm, err := lsm.DecodeMeta(mb)
	if err != nil {
		return nil, err
	}
	data, err := store.Get(ctx, "tables/"+string(tree)+"/"+id+".data")
	if err != nil {
		return nil, err
	}
	var recs, frame []byte
	for i := range tm.Frames {
		off, n := tm.ByteRange(i, i)
		if frame, err = tm.DecodeFrame(i, data[off:off+n], frame[:0]); err != nil {
			return nil, err
		}
		recs = append(recs, frame...)
	}
	return recs, nil
}

// breakdown rebuilds each table of the links tree with one backlink field
// blanked at a time, and attributes the bytes saved to the field.
func (b *bench) breakdown(ctx context.Context, store objstore.Store) error {
	fields := []struct {
		name   string
		lo, hi int
	}{
		{"source_rkey", 24, 32}, {"source_collection", 32, 40}, {"source_did", 40, 48},
		{"location", 48, 56}, {"source_rev", 56, 64}, {"target", 24, 64},
	}
	saved := make([]int64, len(fields)) // bytes saved by blanking the field ("target": bytes left)
	var base int64
	const w = link.BacklinkSize
	for _, r := range b.db.View().Manifest.RunsOf(lsm.TreeLinks) {
		for _, t := range r.Tables {
			recs, err := readTable(ctx, store, lsm.TreeLinks, t.ID)
			if err != nil {
				return err
			}
			data, _, err := lsm.BuildTable(lsm.BacklinkFormat, recs, lsm.TableOptions{})
			if err != nil {
				return err
			}
			base += int64(len(data))
			for fi, f := range fields {
				cp := slices.Clone(recs)
				for o := 0; o < len(cp); o += w {
					clear(cp[o+f.lo : o+f.hi])
				}
				if f.name == "target" {
					// Every source field blanked: number the links of a
					// target 0, 1, 2... so records stay distinct.
					var n uint64
					for o := 0; o < len(cp); o += w {
						if o > 0 && !bytes.Equal(cp[o:o+24], cp[o-w:o-w+24]) {
							n = 0
						}
						binary.BigEndian.PutUint64(cp[o+56:o+64], n)
						n++
					}
				}
				lsm.SortRecords(cp, w)
				// Drop the (rare) records that became identical.
				out := cp[:0]
				for o := 0; o < len(cp); o += w {
					if len(out) == 0 || !bytes.Equal(out[len(out)-w:], cp[o:o+w]) {
						out = append(out, cp[o:o+w]...)
					}
				}
				d, _, err := lsm.BuildTable(lsm.BacklinkFormat, out, lsm.TableOptions{})
				if err != nil {
					return err
				}
				if f.name == "target" {
					saved[fi] += int64(len(d)) // what is left
				} else {
					saved[fi] += int64(len(data)) - int64(len(d))
				}
			}
		}
	}
	live := float64(b.wl.LiveLinks())
	b.res.LinkDataBreakdown = map[string]float64{"total": float64(base) / live}
	for i, f := range fields {
		b.res.LinkDataBreakdown[f.name] = float64(saved[i]) / live
	}
	b.logf("breakdown of the links data (bytes per live link): %v", b.res.LinkDataBreakdown)
	return nil
}

// modelTargets picks the targets the answers are checked on: the mega
// target, half uniformly over targets, half weighted by links.
func (b *bench) modelTargets() []int32 {
	wl := b.wl
	r := mrand.New(mrand.NewPCG(b.cfg.seed, 0x6d6f64656c))
	seen := map[int32]bool{wl.Mega: true}
	out := []int32{wl.Mega}
	for len(out) < benchModelTargets+1 {
		var t int32
		if len(out)%2 == 0 {
			t = int32(r.IntN(len(wl.Targets)))
		} else {
			t = wl.LinkTarget[r.IntN(len(wl.LinkTarget))]
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// check compares the DB's counts and first pages with the workload's own
// bookkeeping of live links.
func (b *bench) check(ctx context.Context, targets []int32) error {
	wl := b.wl
	for _, t := range targets {
		id := wl.Targets[t].ID
		n, _, err := b.db.Count(ctx, id, lsm.Filter{})
		if err != nil {
			return err
		}
		if want := wl.LiveCount(t); n != uint64(want) {
			return fmt.Errorf("target %d (%s): Count %d, the workload has %d live links", t, wl.Targets[t].Text, n, want)
		}
		r, err := b.db.Backlinks(ctx, lsm.Query{Target: id, Limit: benchQueryLimit})
		if err != nil {
			return err
		}
		want := wl.Expected(t, benchQueryLimit)
		if !slices.Equal(r.Links, want) {
			return fmt.Errorf("target %d (%s): first page of %d links differs from the workload's %d", t, wl.Targets[t].Text, len(r.Links), len(want))
		}
		if (r.Next != nil) != (wl.LiveCount(t) > benchQueryLimit) {
			return fmt.Errorf("target %d: next cursor %v with %d live links", t, r.Next, wl.LiveCount(t))
		}
	}
	b.logf("model check: %d targets agree", len(targets))
	return nil
}

// queryTargets draws the query set: targets weighted by their links (a
// popular target is asked more), with 1 to 1,000 live links.
func (b *bench) queryTargets() []int32 {
	wl := b.wl
	r := mrand.New(mrand.NewPCG(b.cfg.seed, 0x7175657279))
	out := make([]int32, 0, b.cfg.queries)
	for tries := 0; len(out) < b.cfg.queries && tries < 100*b.cfg.queries; tries++ {
		t := wl.LinkTarget[r.IntN(len(wl.LinkTarget))]
		if n := wl.LiveCount(t); t == wl.Mega || n == 0 || n > benchQueryLinksMax {
			continue
		}
		out = append(out, t)
	}
	return out
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Microsecond)
}

func (b *bench) queries(ctx context.Context, targets []int32) error {
	wl, db, res := b.wl, b.db, b.res
	res.Queries = len(targets)
	distinct := map[int32]bool{}
	var links float64
	for _, t := range targets {
		distinct[t] = true
		links += float64(wl.LiveCount(t))
	}
	res.QueryTargets = len(distinct)
	res.QueryLinksMean = links / float64(len(targets))
	run := func(t int32) (*lsm.Result, error) {
		return db.Backlinks(ctx, lsm.Query{Target: wl.Targets[t].ID, Limit: benchQueryLimit})
	}
	// Warm the cache, then measure.
	for _, t := range targets {
		if _, err := run(t); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, len(targets))
	cpu := make([]time.Duration, len(targets))
	var total time.Duration
	if err := b.profileStart("query"); err != nil {
		return err
	}
	warm0 := b.counting.Snapshot()
	for i, t := range targets {
		c0, t0 := cpuTime(), time.Now()
		r, err := run(t)
		lat[i], cpu[i] = time.Since(t0), cpuTime()-c0
		if err != nil {
			return err
		}
		total += lat[i]
		if len(r.Links) != min(benchQueryLimit, wl.LiveCount(t)) {
			return fmt.Errorf("target %d: %d links, want %d", t, len(r.Links), min(benchQueryLimit, wl.LiveCount(t)))
		}
	}
	b.profileStop("query")
	warm := b.counting.Snapshot().Sub(warm0)
	res.WarmGETs = warm.Get.Requests + warm.GetRange.Requests
	slices.Sort(lat)
	slices.Sort(cpu)
	res.QueryCPUP50us, res.QueryCPUP99us = percentile(cpu, 0.5), percentile(cpu, 0.99)
	res.QueryP50us, res.QueryP90us, res.QueryP99us = percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99)
	res.QueryMaxUs = percentile(lat, 1)
	res.QueryMeanUs = float64(total) / float64(len(lat)) / float64(time.Microsecond)
	b.logf("warm queries: p50 %.0fµs p99 %.0fµs (CPU time: p50 %.0fµs p99 %.0fµs) over %d queries of %d targets (mean %.0f links)",
		res.QueryP50us, res.QueryP99us, res.QueryCPUP50us, res.QueryCPUP99us, len(targets), len(distinct), res.QueryLinksMean)

	// Cold: every distinct target (and the mega target) once, with an
	// empty frame cache (table metas are local, as on a node).
	if err := b.profileStart("cold"); err != nil {
		return err
	}
	defer b.profileStop("cold")
	cold := make([]int32, 0, len(distinct)+1)
	for t := range distinct {
		cold = append(cold, t)
	}
	slices.Sort(cold)
	cold = append(cold, wl.Mega)
	var coldLat []time.Duration
	var gets int64
	for _, t := range cold {
		r := lsm.NewReader(b.counting, lsm.NewFrameCache(0))
		s0 := b.counting.Snapshot()
		t0 := time.Now()
		qr, err := r.Backlinks(ctx, db.View(), lsm.Query{Target: wl.Targets[t].ID, Limit: benchQueryLimit})
		d := time.Since(t0)
		if err != nil {
			return err
		}
		res.Round1GETsMax = max(res.Round1GETsMax, qr.Stats.Round1GETs)
		res.Round2GETsMax = max(res.Round2GETsMax, qr.Stats.Round2GETs)
		trips := 0
		if qr.Stats.Round1GETs > 0 {
			trips++
		}
		if qr.Stats.Round2GETs > 0 {
			trips += qr.Stats.Round2Passes
		}
		res.RoundTripsMax = max(res.RoundTripsMax, trips)
		s := b.counting.Snapshot().Sub(s0)
		g := s.Get.Requests + s.GetRange.Requests
		gets += g
		if g > res.GetsPerQueryMax {
			res.GetsPerQueryMax = g
			res.GetsMaxTarget = wl.LiveCount(t)
		}
		if t == wl.Mega {
			res.MegaPage100ColdGs = g
		} else {
			coldLat = append(coldLat, d)
		}
	}
	slices.Sort(coldLat)
	res.ColdQueries = len(cold)
	res.GetsPerQueryMean = float64(gets) / float64(len(cold))
	res.ColdQueryP50us, res.ColdQueryP99us = percentile(coldLat, 0.5), percentile(coldLat, 0.99)
	b.logf("cold queries: at most %d GETs (mean %.2f), p50 %.0fµs p99 %.0fµs", res.GetsPerQueryMax, res.GetsPerQueryMean, res.ColdQueryP50us, res.ColdQueryP99us)
	return nil
}

// count times Count of the mega target, warm (median of five) and cold.
func (b *bench) count(ctx context.Context) error {
	wl, db, res := b.wl, b.db, b.res
	if err := b.profileStart("count"); err != nil {
		return err
	}
	defer b.profileStop("count")
	id := wl.Targets[wl.Mega].ID
	res.CountTargetLinks, res.CountTargetLive = wl.WrittenCount(wl.Mega), wl.LiveCount(wl.Mega)

	r := lsm.NewReader(b.counting, lsm.NewFrameCache(0))
	s0 := b.counting.Snapshot()
	t0 := time.Now()
	n, st, err := r.Count(ctx, db.View(), id, lsm.Filter{})
	if err != nil {
		return err
	}
	res.CountColdMs = float64(time.Since(t0)) / float64(time.Millisecond)
	s := b.counting.Snapshot().Sub(s0)
	res.CountColdGets = s.Get.Requests + s.GetRange.Requests
	res.CountCandidates = st.Candidates
	if n != uint64(res.CountTargetLive) {
		return fmt.Errorf("cold count %d, want %d", n, res.CountTargetLive)
	}

	if _, _, err := db.Count(ctx, id, lsm.Filter{}); err != nil { // warm
		return err
	}
	var lat, cpu []time.Duration
	for range 5 {
		c0, t0 := cpuTime(), time.Now()
		n, _, err := db.Count(ctx, id, lsm.Filter{})
		lat, cpu = append(lat, time.Since(t0)), append(cpu, cpuTime()-c0)
		if err != nil {
			return err
		}
		if n != uint64(res.CountTargetLive) {
			return fmt.Errorf("count %d, want %d", n, res.CountTargetLive)
		}
	}
	slices.Sort(lat)
	slices.Sort(cpu)
	res.Count1MCPUMs = float64(cpu[len(cpu)/2]) / float64(time.Millisecond)
	res.Count1MMs = float64(lat[len(lat)/2]) / float64(time.Millisecond)
	res.Count1MMinMs = float64(lat[0]) / float64(time.Millisecond)

	t0 = time.Now()
	if _, err := db.Backlinks(ctx, lsm.Query{Target: id, Limit: benchQueryLimit}); err != nil {
		return err
	}
	res.MegaPage100Ms = float64(time.Since(t0)) / float64(time.Millisecond)
	b.logf("count of the mega target (%d links, %d live): %.0f ms warm (%.0f ms CPU), %.0f ms cold (%d GETs)",
		res.CountTargetLinks, res.CountTargetLive, res.Count1MMs, res.Count1MCPUMs, res.CountColdMs, res.CountColdGets)
	return nil
}

// pebble loads the same operations into Pebble (default options): a key
// per link, target|collection|path|did|rkey as rendered strings separated
// by 0x00, empty value; a revocation deletes its record's keys. Then it
// flushes, compacts everything, measures the directory, and runs the same
// queries as prefix scans.
func (b *bench) pebble(ctx context.Context, dir string, queries, modelTargets []int32) error {
	wl, res := b.wl, b.res
	if err := b.profileStart("pebble"); err != nil {
		return err
	}
	defer b.profileStop("pebble")
	res.PebbleVersion = pebbleVersion()
	b.logf("pebble: loading into %s", dir)
	db, err := pebble.Open(dir, pebbleOptions(b))
	if err != nil {
		return err
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	t0 := time.Now()
	batch := db.NewBatch()
	var key []byte
	var keyBytes int64
	commit := func(force bool) error {
		if batch.Count() < 1000 && !force {
			return nil
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			return err
		}
		batch.Close()
		batch = db.NewBatch()
		return nil
	}
	del := func(v *workload.Revocation) error {
		for j := v.First; j < v.First+v.Count; j++ {
			if key, err = wl.Key(key[:0], j); err != nil {
				return err
			}
			if err := batch.Delete(key, nil); err != nil {
				return err
			}
		}
		return commit(false)
	}
	ri := 0
	for i := range wl.Links {
		for ri < len(wl.Revocations) && wl.Revocations[ri].At == i {
			if err := del(&wl.Revocations[ri]); err != nil {
				return err
			}
			ri++
		}
		if key, err = wl.Key(key[:0], i); err != nil {
			return err
		}
		keyBytes += int64(len(key))
		if err := batch.Set(key, nil, nil); err != nil {
			return err
		}
		if err := commit(false); err != nil {
			return err
		}
	}
	for ; ri < len(wl.Revocations); ri++ {
		if err := del(&wl.Revocations[ri]); err != nil {
			return err
		}
	}
	if err := commit(true); err != nil {
		return err
	}
	batch.Close()
	if err := db.Flush(); err != nil {
		return err
	}
	res.PebbleLoadS = time.Since(t0).Seconds()
	res.PebbleKeyBytesMean = float64(keyBytes) / float64(len(wl.Links))
	t0 = time.Now()
	if err := db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return err
	}
	res.PebbleCompactS = time.Since(t0).Seconds()
	// Let Pebble delete the files the compaction made obsolete before
	// measuring the directory.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m := db.Metrics()
		if m.Table.ObsoleteCount == 0 && m.Table.ZombieCount == 0 && m.Compact.InProgressBytes == 0 {
			break
		}
	}
	res.PebbleSSTBytes = db.Metrics().Table.Local.LiveSize
	if err := db.Close(); err != nil {
		db = nil
		return err
	}
	db = nil
	size, byKind, err := dirBytes(dir)
	if err != nil {
		return err
	}
	res.PebbleDirBytesAfterLoad, res.PebbleDirByKindAfterLoad = size, byKind
	b.logf("pebble: loaded in %.1fs, compacted in %.1fs: %d bytes on disk (%d in sstables)", res.PebbleLoadS, res.PebbleCompactS, size, res.PebbleSSTBytes)

	if db, err = pebble.Open(dir, pebbleOptions(b)); err != nil {
		return err
	}
	scan := func(t int32, limit int) (int, error) {
		prefix, err := wl.TargetPrefix(nil, t)
		if err != nil {
			return 0, err
		}
		upper := slices.Clone(prefix)
		upper[len(upper)-1]++
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
		if err != nil {
			return 0, err
		}
		keys := make([][]byte, 0, min(limit, 128))
		for ok := it.First(); ok && (limit <= 0 || len(keys) < limit); ok = it.Next() {
			keys = append(keys, slices.Clone(it.Key()))
		}
		return len(keys), it.Close()
	}
	for _, t := range modelTargets {
		n, err := scan(t, 0)
		if err != nil {
			return err
		}
		if n != wl.LiveCount(t) {
			return fmt.Errorf("pebble has %d keys for target %d, the workload %d live links", n, t, wl.LiveCount(t))
		}
	}
	for _, t := range queries { // warm
		if _, err := scan(t, benchQueryLimit); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, len(queries))
	cpu := make([]time.Duration, len(queries))
	for i, t := range queries {
		c0, t0 := cpuTime(), time.Now()
		n, err := scan(t, benchQueryLimit)
		lat[i], cpu[i] = time.Since(t0), cpuTime()-c0
		if err != nil {
			return err
		}
		if n != min(benchQueryLimit, wl.LiveCount(t)) {
			return fmt.Errorf("pebble: target %d: %d keys", t, n)
		}
	}
	slices.Sort(lat)
	slices.Sort(cpu)
	res.PebbleQueryP50us, res.PebbleQueryP99us = percentile(lat, 0.5), percentile(lat, 0.99)
	res.PebbleQueryCPUP50us = percentile(cpu, 0.5)
	b.logf("pebble queries: p50 %.0fµs p99 %.0fµs", res.PebbleQueryP50us, res.PebbleQueryP99us)

	// The size: the directory after this second open and close, when
	// Pebble has dropped the write-ahead logs it kept for recycling.
	err = db.Close()
	db = nil
	if err != nil {
		return err
	}
	size, byKind, err = dirBytes(dir)
	if err != nil {
		return err
	}
	res.PebbleDirBytes, res.PebbleDirByKind = size, byKind
	res.PebbleBytesPerLink = float64(size) / float64(wl.LiveLinks())
	res.PebbleSSTBytesPerLink = float64(res.PebbleSSTBytes) / float64(wl.LiveLinks())
	res.EddyVsPebbleBytes = res.BytesPerLink / res.PebbleBytesPerLink
	b.logf("pebble: %d bytes on disk after reopening, %.2f bytes/link", size, res.PebbleBytesPerLink)
	return nil
}

// pebbleOptions are Pebble's defaults, with its informational log lines
// (WAL recovery) left out of the bench's output.
func pebbleOptions(b *bench) *pebble.Options {
	return &pebble.Options{Logger: pebbleLogger{b}}
}

type pebbleLogger struct{ b *bench }

func (pebbleLogger) Infof(string, ...any) {}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.b.logf("pebble: "+format, args...)
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.b.logf("pebble: fatal: "+format, args...)
	os.Exit(1)
}

func pebbleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cockroachdb/pebble/v2" {
				return d.Version
			}
		}
	}
	return ""
}

// loadAvg returns the 1-minute load average (0 where unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// dirBytes sums the sizes of the regular files under dir, in all and by
// kind of Pebble file (sst, log, MANIFEST, OPTIONS, other).
func dirBytes(dir string) (int64, map[string]int64, error) {
	var n int64
	byKind := map[string]int64{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
			name := d.Name()
			kind := "other"
			switch {
			case strings.HasSuffix(name, ".sst"):
				kind = "sst"
			case strings.HasSuffix(name, ".log"):
				kind = "log"
			case strings.HasPrefix(name, "MANIFEST"):
				kind = "manifest"
			case strings.HasPrefix(name, "OPTIONS"):
				kind = "options"
			}
			byKind[kind] += fi.Size()
		}
		return nil
	})
	return n, byKind, err
}

func printBenchText(w io.Writer, res *benchResult) {
	b, _ := json.Marshal(res)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	for _, k := range keys {
		v := m[k]
		switch x := v.(type) {
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1e15 {
				fmt.Fprintf(&buf, "%-36s %d\n", k, int64(x))
			} else {
				fmt.Fprintf(&buf, "%-36s %.3f\n", k, x)
			}
		default:
			vb, _ := json.Marshal(v)
			fmt.Fprintf(&buf, "%-36s %s\n", k, vb)
		}
	}
	w.Write(buf.Bytes())
}
