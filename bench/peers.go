package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// `eddy-bench peers`: one streaming workload (the backfill shape, then
// its live tail, the same deletes), written into Eddy and into what its
// users would pick instead, each configured as an expert would, then the
// same queries against each:
//
//   - eddy: the engine (lsm.DB) on a local directory as its store,
//     compacted whole at the end as Pebble is;
//   - eddy-s3: the same on a MinIO bucket, and its cold queries with the
//     bucket far away (toxiproxy);
//   - eddy-http: eddy's index served by the node's query server on a
//     loopback port and asked over HTTP (peers_http.go);
//   - pebble-strings: Pebble with Constellation-style string keys
//     (target|collection|path|did|rkey), default options;
//   - pebble-expert: Pebble keyed by Eddy's own 64-byte records, zstd on
//     every level, 64 KiB blocks, bloom filters on the 24-byte target
//     prefix (queries seek by prefix), fully compacted;
//   - pg-seed: PostgreSQL 15 with seed 002's table (text columns: url,
//     source_uri, author_did, created_at, Ecto's id and timestamps; a
//     path column added so that queries can say where a link sits), a
//     b-tree on the target, COPY in batches;
//   - pg-expert: PostgreSQL with bytea and bigint columns, one b-tree on
//     (target, source, path) as the primary key, fillfactor 100, VACUUM
//     after the deletes.
//
// Each system runs in its own child process (its peak RSS is its own)
// that regenerates the stream from the seed. The parent starts and stops
// the PostgreSQL server (initdb in the temporary directory) and prints one
// report.

// peerSystems in report order.
var peerSystems = []string{"eddy", "eddy-s3", "eddy-http", "pebble-strings", "pebble-expert", "pg-seed", "pg-expert"}

// Query classes: the targets of the sample whose live links are nearest
// each size, and the mega target sized to the large class.
var peerClasses = []struct {
	name string
	want int
}{{"small", 10}, {"medium", 1000}, {"large", 100_000}}

// peerColdTargets bounds the targets of eddy-s3's cold queries, each
// asked once at each round-trip delay.
const peerColdTargets = 100

// PeerClass is what one system measured for one class of targets.
type PeerClass struct {
	Class          string  `json:"class"`
	Targets        int     `json:"targets"`
	LinksMean      float64 `json:"links_mean"`
	FirstPageP50us float64 `json:"first_page_p50_us"`
	FirstPageP99us float64 `json:"first_page_p99_us"`
	AllPagesP50ms  float64 `json:"all_pages_p50_ms"` // every page of limit 100, following the cursor
	CountP50ms     float64 `json:"count_p50_ms"`
}

// PeerResult is one system's run.
type PeerResult struct {
	System         string      `json:"system"`
	Config         string      `json:"config"`
	LinksWritten   int         `json:"links_written"`
	LiveLinks      int         `json:"live_links"`
	Revocations    int         `json:"revocations"`
	Bytes          int64       `json:"bytes"`
	BytesWhat      string      `json:"bytes_what"`
	BytesPerLink   float64     `json:"bytes_per_live_link"`
	IngestWallS    float64     `json:"ingest_wall_s"`   // writing, then flush/compact/vacuum (generator left out)
	IngestCPUS     float64     `json:"ingest_cpu_s"`    // the client's CPU minus the generator's, plus the server's
	FinishS        float64     `json:"finish_s"`        // of which the final flush, compaction or VACUUM
	LinksPerCPUS   float64     `json:"links_per_cpu_s"` // links written / IngestCPUS
	LinksPerWallS  float64     `json:"links_per_wall_s"`
	Classes        []PeerClass `json:"classes"`
	CheckedTargets int         `json:"checked_targets"`            // sample targets whose count matched the workload
	PeakRSSBytes   int64       `json:"peak_rss_bytes"`             // the child process (for PostgreSQL: the client)
	ServerRSSBytes int64       `json:"server_rss_bytes,omitempty"` // PostgreSQL: the server's processes' PSS after the queries
	Cold           []PeerCold  `json:"cold,omitempty"`             // eddy-s3: cold queries with the bucket far away
}

// PeersReport is the whole run.
type PeersReport struct {
	Links     int          `json:"links"`
	Seed      uint64       `json:"seed"`
	Shape     string       `json:"shape"`
	MegaLinks int          `json:"mega_links"`
	Machine   string       `json:"machine"`
	Started   string       `json:"started"`
	Results   []PeerResult `json:"results"`
}

// peerStore is one system under test.
type peerStore interface {
	config() string
	apply(op *workload.Op) error
	finish(ctx context.Context) error // flush, compact, vacuum: what a reader would want first
	size(ctx context.Context) (int64, string, error)
	// page returns up to limit links of target after cursor (nil: from
	// the first) and the cursor of the next page (nil: no more).
	page(ctx context.Context, target link.RecordID, after []byte, limit int) (n int, next []byte, err error)
	count(ctx context.Context, target link.RecordID) (int, error)
	serverCPU() time.Duration // CPU spent by a server process (PostgreSQL), 0 if none
	serverRSS() int64
	close() error
}

type peersConfig struct {
	links, mega, reps int
	seed              uint64
	dir, system, dsn  string
	profile, charts   string
	from              string
	systems           []string
	pgBin             string
}

func peersMain(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name+" peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c peersConfig
	fs.IntVar(&c.links, "links", 1_000_000, "links written (backfill shape, a live tail of links/20)")
	fs.IntVar(&c.mega, "mega-links", 100_000, "links of the mega target (the large query class)")
	fs.IntVar(&c.reps, "reps", 200, "timed first-page queries per class (all-pages walks and counts: reps/20, at least 3)")
	fs.Uint64Var(&c.seed, "seed", 1, "workload seed")
	fs.StringVar(&c.dir, "tmp", "", "directory for the systems' files (default: a new one under the system's temporary directory, removed at the end)")
	systems := fs.String("systems", strings.Join(peerSystems, ","), "systems to run, in order")
	fs.StringVar(&c.system, "system", "", "run one system in this process (the parent's children)")
	fs.StringVar(&c.dsn, "pg-dsn", "", "PostgreSQL connection string (children; the parent starts a server)")
	fs.StringVar(&c.charts, "charts", "", "draw the report's charts (PNG) into this directory")
	fs.StringVar(&c.from, "from", "", "print (and with --charts draw) the report of these peers JSON files (comma-separated runs of one workload, merged) instead of running")
	fs.StringVar(&c.profile, "cpuprofile", "", "write a CPU profile of each system's queries to this file, suffixed with the system's name")
	fs.StringVar(&c.pgBin, "pg-bin", "", "directory of initdb, pg_ctl and postgres (default: PATH, then /usr/lib/postgresql/15/bin)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.links < 20_000 {
		return fmt.Errorf("%w: --links of at least 20000", ErrUsage)
	}
	c.systems = strings.Split(*systems, ",")
	for _, s := range c.systems {
		if !slices.Contains(peerSystems, s) {
			return fmt.Errorf("%w: unknown system %q (have %s)", ErrUsage, s, strings.Join(peerSystems, ", "))
		}
	}
	if c.system != "" {
		res, err := peerChild(ctx, &c, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", c.system, err)
		}
		return json.NewEncoder(stdout).Encode(res)
	}
	var rep *PeersReport
	var err error
	if c.from != "" {
		rep, err = mergePeersReports(strings.Split(c.from, ","))
	} else {
		rep, err = peersParent(ctx, &c, stderr)
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	fmt.Fprint(stderr, peersTable(rep))
	if c.charts != "" {
		files, err := drawPeersCharts(c.charts, rep)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "charts: %s\n", strings.Join(files, ", "))
	}
	return nil
}

// mergePeersReports reads reports of one workload (runs of some systems
// each) and merges them into one.
func mergePeersReports(files []string) (*PeersReport, error) {
	var rep *PeersReport
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r PeersReport
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if rep == nil {
			rep = &r
			continue
		}
		if r.Links != rep.Links || r.Seed != rep.Seed || r.MegaLinks != rep.MegaLinks {
			return nil, fmt.Errorf("%s: another workload (%d links, seed %d) than %d links, seed %d", f, r.Links, r.Seed, rep.Links, rep.Seed)
		}
		rep.Results = append(rep.Results, r.Results...)
	}
	return rep, nil
}

// peersParent runs each system in a child process.
func peersParent(ctx context.Context, c *peersConfig, log io.Writer) (*PeersReport, error) {
	dir := c.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "eddy-peers-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}

	rep := &PeersReport{Links: c.links, Seed: c.seed, Shape: "backfill", MegaLinks: c.mega, Machine: machine(), Started: time.Now().UTC().Format(time.RFC3339)}
	var pg *pgServer
	defer func() {
		if pg != nil {
			pg.stop()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for _, sys := range c.systems {
		args := []string{"peers", "--system", sys, "--links", fmt.Sprint(c.links), "--mega-links", fmt.Sprint(c.mega),
			"--reps", fmt.Sprint(c.reps), "--seed", fmt.Sprint(c.seed), "--tmp", filepath.Join(dir, sys)}
		if c.profile != "" {
			args = append(args, "--cpuprofile", c.profile+"."+sys)
		}
		if strings.HasPrefix(sys, "pg-") {
			if pg == nil {
				if pg, err = startPG(ctx, filepath.Join(dir, "pg"), c.pgBin, log); err != nil {
					return nil, fmt.Errorf("start PostgreSQL: %w", err)
				}
			}
			args = append(args, "--pg-dsn", pg.dsn)
		}
		if err := os.MkdirAll(filepath.Join(dir, sys), 0o755); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "peers: %s: %d links\n", sys, c.links)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, self, args...)
		cmd.Stdout, cmd.Stderr = &out, log
		for _, e := range os.Environ() { // not eddy-ctl's shim's: the child reports on stdout
			if !strings.HasPrefix(e, "EDDY_BENCH_") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s: %w", sys, err)
		}
		var r PeerResult
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: its result: %w", sys, err)
		}
		rep.Results = append(rep.Results, r)
		if err := os.RemoveAll(filepath.Join(dir, sys)); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func machine() string {
	return fmt.Sprintf("%d cores, %s %s/%s", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// peerChild runs one system: write the stream, finish, measure.
func peerChild(ctx context.Context, c *peersConfig, log io.Writer) (*PeerResult, error) {
	st, err := workload.NewStream(workload.StreamConfig{Links: c.links, Seed: c.seed, Shape: workload.ShapeBackfill, MegaLinks: c.mega})
	if err != nil {
		return nil, err
	}
	var ps peerStore
	switch c.system {
	case "eddy", "eddy-s3":
		ps, err = openEddyPeer(ctx, c.dir, c.system == "eddy-s3")
	case "eddy-http":
		ps, err = openHTTPPeer(ctx, c.dir, st)
	case "pebble-strings":
		ps, err = openPebblePeer(c.dir, false, newPeerNames(st))
	case "pebble-expert":
		ps, err = openPebblePeer(c.dir, true, nil)
	case "pg-seed":
		ps, err = openPGPeer(ctx, c.dsn, false, newPeerNames(st))
	case "pg-expert":
		ps, err = openPGPeer(ctx, c.dsn, true, nil)
	}
	if err != nil {
		return nil, err
	}
	defer ps.close()
	res := &PeerResult{System: c.system, Config: ps.config()}

	// Write, in batches, the generator's CPU left out.
	batch := make([]workload.Op, 0, streamBatch)
	var genCPU time.Duration
	wall0, cpu0, srv0 := time.Now(), cpuTime(), ps.serverCPU()
	mark := cpu0
	var genWall time.Duration
	genMark := time.Now()
	write := func() error {
		genCPU += cpuTime() - mark
		genWall += time.Since(genMark)
		for i := range batch {
			if err := ps.apply(&batch[i]); err != nil {
				return err
			}
		}
		batch = batch[:0]
		mark, genMark = cpuTime(), time.Now()
		return ctx.Err()
	}
	if err := st.Run(func(op *workload.Op) error {
		o := *op
		o.Revoked = slices.Clone(op.Revoked)
		batch = append(batch, o)
		if len(batch) == cap(batch) {
			return write()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := write(); err != nil {
		return nil, err
	}
	f0 := time.Now()
	if err := ps.finish(ctx); err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}
	res.FinishS = time.Since(f0).Seconds()
	res.IngestWallS = (time.Since(wall0) - genWall).Seconds()
	res.IngestCPUS = (cpuTime() - cpu0 - genCPU + ps.serverCPU() - srv0).Seconds()
	res.LinksWritten, res.LiveLinks, res.Revocations = st.Written, st.LiveLinks(), st.Revocations
	res.LinksPerCPUS = float64(st.Written) / res.IngestCPUS
	res.LinksPerWallS = float64(st.Written) / res.IngestWallS
	if res.Bytes, res.BytesWhat, err = ps.size(ctx); err != nil {
		return nil, fmt.Errorf("size: %w", err)
	}
	res.BytesPerLink = float64(res.Bytes) / float64(st.LiveLinks())
	fmt.Fprintf(log, "peers: %s: wrote %d links in %.1fs (%.0f links/CPU-s, %.1fs to finish), %.2f B/live link\n",
		c.system, st.Written, res.IngestWallS, res.LinksPerCPUS, res.FinishS, res.BytesPerLink)

	if c.profile != "" {
		stop, err := startCPUProfile(c.profile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	// Every sample target's count must be the workload's.
	for _, t := range st.Sample {
		n, err := ps.count(ctx, t.ID)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", t.Desc, err)
		}
		if n != t.LiveCount() {
			return nil, fmt.Errorf("%s target %s: count %d, the workload has %d live links", t.Kind, t.Desc, n, t.LiveCount())
		}
		res.CheckedTargets++
	}
	for _, cl := range peerClasses {
		pc, err := peerQueries(ctx, ps, st, cl.name, cl.want, c.reps)
		if err != nil {
			return nil, fmt.Errorf("%s queries: %w", cl.name, err)
		}
		res.Classes = append(res.Classes, *pc)
		fmt.Fprintf(log, "peers: %s: %s (%d targets, %.0f links): first page p50 %.0fµs p99 %.0fµs, all pages %.1fms, count %.2fms\n",
			c.system, cl.name, pc.Targets, pc.LinksMean, pc.FirstPageP50us, pc.FirstPageP99us, pc.AllPagesP50ms, pc.CountP50ms)
	}
	res.PeakRSSBytes, res.ServerRSSBytes = peakRSSBytes(), ps.serverRSS()
	if ep, ok := ps.(*eddyPeer); ok {
		// Sample targets of ~150 links (75-300; docs/scale.md's cold
		// queries take 100-250), at most peerColdTargets of them.
		ts := classTargets(st, 150)
		ts = ts[:min(len(ts), peerColdTargets)]
		if res.Cold, err = ep.cold(ctx, ts); err != nil {
			return nil, fmt.Errorf("cold queries far away: %w", err)
		}
		for _, c := range res.Cold {
			fmt.Fprintf(log, "peers: eddy-s3: cold queries with the bucket %.0f ms away (%d targets, %.0f links): p50 %.1f ms p99 %.1f ms (bound 2 RTT + 10 ms: %.0f ms), GETs %.1f mean %d max, round trips %d max\n",
				c.RTTms, c.Queries, c.LinksMean, c.P50us/1e3, c.P99us/1e3, c.Bound2RTTus/1e3, c.GETsMean, c.GETsMax, c.RoundTripsMax)
		}
	}
	return res, nil
}

// classTargets picks the sample targets of a class: those whose live
// links are within a factor of two of want, or else the nearest one.
func classTargets(st *workload.Stream, want int) []qtarget {
	var in []qtarget
	best, bestD := -1, math.Inf(1)
	for i, t := range st.Sample {
		n := t.LiveCount()
		if n == 0 {
			continue
		}
		d := math.Abs(math.Log(float64(n) / float64(want)))
		if d < bestD {
			best, bestD = i, d
		}
		if n >= want/2 && n <= want*2 {
			in = append(in, qtarget{t.ID, n})
		}
	}
	if len(in) == 0 && best >= 0 {
		in = append(in, qtarget{st.Sample[best].ID, st.Sample[best].LiveCount()})
	}
	return in
}

// peerQueries times one class: first pages (warm: one untimed pass
// first), every page following the cursor, and counts.
func peerQueries(ctx context.Context, ps peerStore, st *workload.Stream, class string, want, reps int) (*PeerClass, error) {
	ts := classTargets(st, want)
	if len(ts) == 0 {
		return nil, fmt.Errorf("no target")
	}
	pc := &PeerClass{Class: class, Targets: len(ts)}
	for _, t := range ts {
		pc.LinksMean += float64(t.live) / float64(len(ts))
	}
	first := func(t qtarget) error {
		n, _, err := ps.page(ctx, t.id, nil, queryLimit)
		if err == nil && n != min(queryLimit, t.live) {
			err = fmt.Errorf("target %v: a first page of %d links, want %d", t.id, n, min(queryLimit, t.live))
		}
		return err
	}
	for _, t := range ts {
		if err := first(t); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, 0, reps)
	for i := range reps {
		t := ts[i%len(ts)]
		t0 := time.Now()
		if err := first(t); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	pc.FirstPageP50us, pc.FirstPageP99us = percentile(lat, 0.5), percentile(lat, 0.99)
	// Walks and counts: reps/20 of them, but at least 3 and, past 3, not
	// beyond 20 s (seed 002's schema sorts a big target's rows for every
	// page).
	walks := max(3, reps/20)
	var all, cnt []time.Duration
	w0 := time.Now()
	for i := range walks {
		if i >= 3 && time.Since(w0) > 20*time.Second {
			break
		}
		t := ts[i%len(ts)]
		t0 := time.Now()
		var after []byte
		total := 0
		for {
			n, next, err := ps.page(ctx, t.id, after, queryLimit)
			if err != nil {
				return nil, err
			}
			total += n
			if next == nil {
				break
			}
			after = next
		}
		all = append(all, time.Since(t0))
		if total != t.live {
			return nil, fmt.Errorf("target %v: %d links over every page, want %d", t.id, total, t.live)
		}
		t1 := time.Now()
		n, err := ps.count(ctx, t.id)
		if err != nil {
			return nil, err
		}
		cnt = append(cnt, time.Since(t1))
		if n != t.live {
			return nil, fmt.Errorf("target %v: count %d, want %d", t.id, n, t.live)
		}
	}
	slices.Sort(all)
	slices.Sort(cnt)
	pc.AllPagesP50ms, pc.CountP50ms = percentile(all, 0.5)/1000, percentile(cnt, 0.5)/1000
	return pc, nil
}

// peerMetric is one figure of the comparison.
type peerMetric struct {
	name   string
	lower  bool // lower is better
	unit   string
	get    func(r *PeerResult) float64
	format string
}

func classMetric(class, what string, get func(c *PeerClass) float64, unit, format string) peerMetric {
	return peerMetric{name: class + " targets, " + what, lower: true, unit: unit, format: format, get: func(r *PeerResult) float64 {
		for i := range r.Classes {
			if r.Classes[i].Class == class {
				return get(&r.Classes[i])
			}
		}
		return 0
	}}
}

func peerMetrics() []peerMetric {
	ms := []peerMetric{
		{name: "bytes per live link", lower: true, format: "%.2f", get: func(r *PeerResult) float64 { return r.BytesPerLink }},
		{name: "links written per CPU-second", format: "%.0f", get: func(r *PeerResult) float64 { return r.LinksPerCPUS }},
	}
	for _, cl := range peerClasses {
		ms = append(ms,
			classMetric(cl.name, "first page p50", func(c *PeerClass) float64 { return c.FirstPageP50us }, "µs", "%.0f"),
			classMetric(cl.name, "first page p99", func(c *PeerClass) float64 { return c.FirstPageP99us }, "µs", "%.0f"))
	}
	ms = append(ms,
		classMetric("large", "every page", func(c *PeerClass) float64 { return c.AllPagesP50ms }, "ms", "%.1f"),
		classMetric("large", "count", func(c *PeerClass) float64 { return c.CountP50ms }, "ms", "%.2f"))
	return ms
}

// peersVerdict is the report's first screen: Eddy (the engine on local
// disk) against each peer, and every figure where it loses, by how much.
func peersVerdict(rep *PeersReport) string {
	var eddy *PeerResult
	for i := range rep.Results {
		if rep.Results[i].System == "eddy" {
			eddy = &rep.Results[i]
		}
	}
	if eddy == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nEddy against its peers at %d links: bytes per live link %.2f", rep.Links, eddy.BytesPerLink)
	for _, r := range rep.Results {
		if strings.HasPrefix(r.System, "eddy") {
			continue
		}
		fmt.Fprintf(&b, "; %.2fx %s's (%.2f)", eddy.BytesPerLink/r.BytesPerLink, r.System, r.BytesPerLink)
	}
	b.WriteString("\n")
	losses := 0
	for _, r := range rep.Results {
		if strings.HasPrefix(r.System, "eddy") {
			continue
		}
		for _, m := range peerMetrics() {
			e, p := m.get(eddy), m.get(&r)
			if e <= 0 || p <= 0 {
				continue
			}
			worse := (m.lower && e > p) || (!m.lower && e < p)
			if !worse {
				continue
			}
			losses++
			by := e/p - 1
			if !m.lower {
				by = p/e - 1
			}
			fmt.Fprintf(&b, "- Eddy LOSES to %s on %s: "+m.format+" against "+m.format+" %s (%.0f%% worse)\n", r.System, m.name, e, p, m.unit, 100*by)
		}
	}
	if losses == 0 {
		b.WriteString("- Eddy loses on no figure of the table.\n")
	}
	return b.String()
}

// peersTable renders the report as Markdown: the verdict first (where
// Eddy loses, by how much), then each system's figures.
func peersTable(rep *PeersReport) string {
	var b strings.Builder
	b.WriteString(peersVerdict(rep))
	fmt.Fprintf(&b, "\n%d links written (backfill shape, seed %d, mega target %d links), %s\n\n", rep.Links, rep.Seed, rep.MegaLinks, rep.Machine)
	b.WriteString("| system | B/live link | links/CPU-s | ingest wall s | small p50/p99 µs | medium p50/p99 µs | large p50/p99 µs | medium all pages ms | large all pages ms | large count ms | peak RSS MB |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		cl := map[string]PeerClass{}
		for _, c := range r.Classes {
			cl[c.Class] = c
		}
		rss := float64(r.PeakRSSBytes) / 1e6
		rssS := fmt.Sprintf("%.0f", rss)
		if r.ServerRSSBytes > 0 {
			rssS = fmt.Sprintf("%.0f + server %.0f", rss, float64(r.ServerRSSBytes)/1e6)
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.0f | %.1f | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.1f | %.0f | %.1f | %s |\n",
			r.System, r.BytesPerLink, r.LinksPerCPUS, r.IngestWallS,
			cl["small"].FirstPageP50us, cl["small"].FirstPageP99us, cl["medium"].FirstPageP50us, cl["medium"].FirstPageP99us,
			cl["large"].FirstPageP50us, cl["large"].FirstPageP99us, cl["medium"].AllPagesP50ms, cl["large"].AllPagesP50ms, cl["large"].CountP50ms, rssS)
	}
	for _, r := range rep.Results {
		if len(r.Cold) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s, cold queries (empty frame cache, metadata local) with the bucket far away:\n\n| round trip to the bucket | targets (mean links) | p50 ms | p99 ms | bound 2 RTT + 10 ms | GETs mean / max | round trips max |\n|---|---|---|---|---|---|---|\n", r.System)
		for _, c := range r.Cold {
			fmt.Fprintf(&b, "| %.0f ms | %d (%.0f) | %.2f | %.2f | %.0f | %.1f / %d | %d |\n", c.RTTms, c.Queries, c.LinksMean, c.P50us/1e3, c.P99us/1e3, c.Bound2RTTus/1e3, c.GETsMean, c.GETsMax, c.RoundTripsMax)
		}
	}
	return b.String()
}

// stderrLogf writes a line of a library's log (Pebble's errors) to a
// peers child's stderr.
func stderrLogf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
