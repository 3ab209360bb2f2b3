// Package metricstest reads Prometheus collectors in tests: every sample
// of a gatherer as a map from "name{label=value,...}" to its value.
package metricstest

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Values gathers g into "name{k=v,...}" -> value, labels sorted by name
// and the braces left out when there are none; a histogram gives its
// sample count under name_count.
func Values(t testing.TB, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			lab := ""
			if len(ls) > 0 {
				lab = "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()+lab] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[mf.GetName()+lab] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"+lab] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}
