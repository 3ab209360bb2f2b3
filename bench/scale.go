package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// `bench scale`: the scale table and charts of bench lsm runs at several
// N (make bench-scale): it reads their JSON results (one Result a file),
// prints a markdown table of the figures against N and draws one PNG a
// figure into --out.

const scaleUsage = `Usage: %s scale [--out DIR] RESULT.json...

Reads bench lsm --json results (one a file, any N) and prints the scale
table (markdown) of their figures against N, and draws one PNG chart a
figure into --out (make bench-scale).

Flags:
`

// scaleFigure is one row of the table (and, with a chart name, a line of
// a chart).
type scaleFigure struct {
	name  string // the row
	chart string // the chart's file (without .png) and title, "" for table only
	title string
	unit  string
	goal  float64 // a goal line on the chart, 0 for none
	get   func(*Result) float64
	fmt   string
}

var scaleFigures = []scaleFigure{
	{"links written", "", "", "", 0, func(r *Result) float64 { return float64(r.LinksWritten) }, "%.0f"},
	{"live links", "", "", "", 0, func(r *Result) float64 { return float64(r.Links) }, "%.0f"},
	{"accounts", "", "", "", 0, func(r *Result) float64 { return float64(r.Accounts) }, "%.0f"},
	{"bytes per live link (tables: data + meta)", "bytes_per_link", "Bytes per live link", "bytes", 8, func(r *Result) float64 { return r.BytesPerLink }, "%.2f"},
	{"bucket bytes per live link (every object)", "bytes_per_link", "", "", 0, func(r *Result) float64 { return r.BucketBytesPerLink }, "%.2f"},
	{"local meta bytes per live link (the bucket's meta objects)", "meta_bytes_per_link", "Local meta bytes per live link", "bytes", 0.25, func(r *Result) float64 { return r.MetaBytesPerLink }, "%.3f"},
	{"local directory bytes per live link (metas as stored locally, manifest)", "", "", "", 0, func(r *Result) float64 { return float64(r.LocalDirBytes) / float64(max(r.Links, 1)) }, "%.3f"},
	{"bench peak RSS (GB)", "rss", "Bench process peak RSS", "GB", 4, func(r *Result) float64 { return float64(r.PeakRSSBytes) / 1e9 }, "%.2f"},
	{"table metadata on the heap at the end (MB: decoded metas, or the mapped ones' headers)", "", "", "", 0, func(r *Result) float64 { return float64(r.MetaCacheBytes) / 1e6 }, "%.1f"},
	{"meta cache misses (decoded again from local disk)", "", "", "", 0, func(r *Result) float64 { return float64(r.MetaCacheMisses) }, "%.0f"},
	{"write links/s/core (with compaction)", "write", "Write links/s/core, compaction included", "links/s", 1e6, func(r *Result) float64 { return r.WriteLinksPerSecPerCore }, "%.0f"},
	{"write wall links/s (generator included)", "", "", "", 0, func(r *Result) float64 { return r.WriteLinksPerSecWall }, "%.0f"},
	{"compaction CPU share of the write phase", "", "", "", 0, func(r *Result) float64 {
		if r.WriteCPUS == 0 {
			return 0
		}
		return r.CompactCPUS / r.WriteCPUS
	}, "%.2f"},
	{"write amplification (bytes PUT / live bytes)", "write_amplification", "Write amplification (bytes PUT / live table bytes)", "ratio", 0, func(r *Result) float64 { return r.WriteAmplification }, "%.2f"},
	{"flushes", "", "", "", 0, func(r *Result) float64 { return float64(r.Flushes) }, "%.0f"},
	{"compactions", "", "", "", 0, func(r *Result) float64 { return float64(r.Compactions) }, "%.0f"},
	{"tables in the manifest", "tables_runs", "Tables and runs in the manifest", "count", 0, func(r *Result) float64 { return float64(r.Tables) }, "%.0f"},
	{"runs in the manifest", "tables_runs", "", "", 0, func(r *Result) float64 { return float64(r.Runs) }, "%.0f"},
	{"manifest bytes", "manifest_bytes", "Manifest bytes", "bytes", 0, func(r *Result) float64 { return float64(r.ManifestBytes) }, "%.0f"},
	{"query targets' mean live links", "", "", "", 0, func(r *Result) float64 { return r.QueryLinksMean }, "%.0f"},
	{"warm query p50 (µs)", "warm_query", "Warm query latency (limit 100, ~150-link targets)", "µs", 100, func(r *Result) float64 { return r.QueryP50us }, "%.0f"},
	{"warm query p99 (µs)", "warm_query", "", "", 1000, func(r *Result) float64 { return r.QueryP99us }, "%.0f"},
	{"warm query CPU p50 (µs)", "", "", "", 0, func(r *Result) float64 { return r.QueryCPUP50us }, "%.0f"},
	{"cold query p50 (µs)", "cold_query", "Cold query latency (fresh frame cache, local store)", "µs", 0, func(r *Result) float64 { return r.ColdQueryP50us }, "%.0f"},
	{"cold query p99 (µs)", "cold_query", "", "", 0, func(r *Result) float64 { return r.ColdQueryP99us }, "%.0f"},
	{"GETs per cold query (mean)", "cold_gets", "GETs per cold query", "GETs", 0, func(r *Result) float64 { return r.GetsPerQueryMean }, "%.2f"},
	{"GETs per cold query (max)", "cold_gets", "", "", 0, func(r *Result) float64 { return float64(r.GetsPerQueryMax) }, "%.0f"},
	{"round trips per cold query (max)", "", "", "", 0, func(r *Result) float64 { return float64(r.RoundTripsMax) }, "%.0f"},
	{"largest target's live links", "", "", "", 0, func(r *Result) float64 { return float64(r.CountTargetLive) }, "%.0f"},
	{"count of the largest target, warm (ms)", "count", "Count of the largest target", "ms", 1000, func(r *Result) float64 { return r.Count1MMs }, "%.0f"},
	{"count of the largest target, cold (ms)", "count", "", "", 0, func(r *Result) float64 { return r.CountColdMs }, "%.0f"},
	{"elapsed (s)", "", "", "", 0, func(r *Result) float64 { return r.ElapsedS }, "%.0f"},
	{"load average at start", "", "", "", 0, func(r *Result) float64 { return r.LoadAvgStart }, "%.1f"},
}

// scaleMain runs `name scale [flags] FILE...`.
func scaleMain(name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory for the PNG charts (none if empty)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, scaleUsage, name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: no result files", ErrUsage)
	}
	var runs []*Result
	for _, f := range fs.Args() {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		runs = append(runs, &r)
	}
	slices.SortFunc(runs, func(a, b *Result) int { return a.LinksWritten - b.LinksWritten })
	printScaleTable(stdout, runs)
	if *out != "" {
		files, err := drawScaleCharts(*out, runs)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\ncharts: %s\n", strings.Join(files, ", "))
	}
	return nil
}

func humanN(n int) string {
	switch {
	case n >= 1e9 && n%1e9 == 0:
		return fmt.Sprintf("%dB", n/1e9)
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	}
	return fmt.Sprint(n)
}

func printScaleTable(w io.Writer, runs []*Result) {
	fmt.Fprint(w, "| figure |")
	for _, r := range runs {
		fmt.Fprintf(w, " %s (%s) |", humanN(r.LinksWritten), r.Shape)
	}
	fmt.Fprint(w, "\n|---|")
	for range runs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, f := range scaleFigures {
		fmt.Fprintf(w, "| %s |", f.name)
		for _, r := range runs {
			fmt.Fprintf(w, " "+f.fmt+" |", f.get(r))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| model check |")
	for _, r := range runs {
		fmt.Fprintf(w, " %s (%d targets) |", r.ModelCheck, r.ModelTargets)
	}
	fmt.Fprintln(w)
}

// drawScaleCharts draws each charted figure against N (log scale).
func drawScaleCharts(dir string, runs []*Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var order []string
	byChart := map[string][]scaleFigure{}
	for _, f := range scaleFigures {
		if f.chart == "" {
			continue
		}
		if _, ok := byChart[f.chart]; !ok {
			order = append(order, f.chart)
		}
		byChart[f.chart] = append(byChart[f.chart], f)
	}
	var files []string
	for _, name := range order {
		figs := byChart[name]
		p := plot.New()
		p.Title.Text = figs[0].title
		p.X.Label.Text = "links written (N)"
		p.Y.Label.Text = figs[0].unit
		if len(runs) > 1 {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		var lines []any
		top := 0.0
		for _, f := range figs {
			xys := make(plotter.XYs, len(runs))
			for i, r := range runs {
				xys[i].X, xys[i].Y = float64(r.LinksWritten), f.get(r)
				top = max(top, xys[i].Y)
			}
			top = max(top, f.goal)
			lines = append(lines, f.name, xys)
			if f.goal > 0 {
				g := plotter.XYs{{X: xys[0].X, Y: f.goal}, {X: xys[len(xys)-1].X, Y: f.goal}}
				lines = append(lines, "goal: "+strings.TrimSuffix(fmt.Sprintf("%g", f.goal), ".0")+" ("+f.name+")", g)
			}
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return nil, err
		}
		// Room above the data for the legend.
		p.Y.Min, p.Y.Max = 0, max(top, 1)*(1.15+0.12*float64(len(lines)/2))
		p.Legend.Top = true
		file := filepath.Join(dir, name+".png")
		if err := p.Save(7*vg.Inch, 4*vg.Inch, file); err != nil {
			return nil, err
		}
		files = append(files, file)
	}
	return files, nil
}
