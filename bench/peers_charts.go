package bench

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// drawPeersCharts draws the report's charts into dir, named by N:
// bytes per live link of each system, the first-page latency (p50 and
// p99) of each class, and eddy-s3's cold queries against the round trip
// to the bucket with the bound of two round trips and 10 ms.
func drawPeersCharts(dir string, rep *PeersReport) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := humanN(rep.Links)
	var files []string
	names := make([]string, len(rep.Results))
	for i, r := range rep.Results {
		names[i] = r.System
	}
	bars := func(title, unit, file string, series []string, get func(r PeerResult, s int) float64) error { // linear, from zero
		p := plot.New()
		p.Title.Text = title + " (" + n + " links)"
		p.Y.Label.Text = unit
		w := vg.Points(18)
		for s, name := range series {
			vals := make(plotter.Values, len(rep.Results))
			for i, r := range rep.Results {
				vals[i] = get(r, s)
			}
			b, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return err
			}
			b.Color = plotutil.Color(s)
			b.Offset = vg.Length(s-len(series)/2) * w
			if len(series)%2 == 0 {
				b.Offset += w / 2
			}
			p.Add(b)
			if len(series) > 1 {
				p.Legend.Add(name, b)
			}
		}
		p.Legend.Top = true
		p.NominalX(names...)
		path := filepath.Join(dir, file)
		if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	if err := bars("bytes per live link", "bytes", fmt.Sprintf("bytes_per_link-%s.png", n), []string{"bytes"},
		func(r PeerResult, _ int) float64 { return r.BytesPerLink }); err != nil {
		return nil, err
	}
	// Latencies span three decades (Eddy and Pebble in µs, PostgreSQL in
	// ms): points on a log scale, p50 and p99 of each system.
	for _, cl := range peerClasses {
		c := cl.name
		p := plot.New()
		p.Title.Text = "first page (limit 100), " + c + " targets (" + n + " links)"
		p.Y.Label.Text = "µs (log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		for si, name := range []string{"p50", "p99"} {
			var xys plotter.XYs
			for i, r := range rep.Results {
				for _, x := range r.Classes {
					v := x.FirstPageP50us
					if si == 1 {
						v = x.FirstPageP99us
					}
					if x.Class == c && v > 0 {
						xys = append(xys, plotter.XY{X: float64(i), Y: v})
					}
				}
			}
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, err
			}
			sc.Color = plotutil.Color(si)
			sc.Shape = plotutil.Shape(si)
			sc.Radius = vg.Points(4)
			p.Add(sc)
			p.Legend.Add(name, sc)
		}
		p.Legend.Top = true
		p.NominalX(names...)
		path := filepath.Join(dir, fmt.Sprintf("first_page_%s-%s.png", c, n))
		if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	for _, r := range rep.Results {
		if len(r.Cold) == 0 {
			continue
		}
		p := plot.New()
		p.Title.Text = r.System + ": cold queries, bucket far away (" + n + " links)"
		p.X.Label.Text = "round trip to the bucket (ms)"
		p.Y.Label.Text = "ms"
		var p50, p99, bound plotter.XYs
		for _, c := range r.Cold {
			p50 = append(p50, plotter.XY{X: c.RTTms, Y: c.P50us / 1e3})
			p99 = append(p99, plotter.XY{X: c.RTTms, Y: c.P99us / 1e3})
			bound = append(bound, plotter.XY{X: c.RTTms, Y: c.Bound2RTTus / 1e3})
		}
		if err := plotutil.AddLinePoints(p, "p50", p50, "p99", p99, "bound: 2 RTT + 10 ms", bound); err != nil {
			return nil, err
		}
		p.Legend.Top, p.Legend.Left = true, true
		path := filepath.Join(dir, fmt.Sprintf("cold_far-%s.png", n))
		if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}
