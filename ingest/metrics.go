package ingest

import (
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the write path's Prometheus metrics.
type Metrics struct {
	Events       *prometheus.CounterVec // by source, kind
	Links        *prometheus.CounterVec // by source
	Skipped      *prometheus.CounterVec // by source, reason
	FlushSeconds prometheus.Histogram
	Generation   prometheus.Gauge
	Lag          *prometheus.GaugeVec // seconds behind the stream head, by source
}

// NewMetrics makes unregistered metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		Events:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_ingest_events_total", Help: "Operations consumed, by source and kind."}, []string{"source", "kind"}),
		Links:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_ingest_links_total", Help: "Links extracted, by source."}, []string{"source"}),
		Skipped:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_ingest_skipped_total", Help: "Inputs or links skipped as bad, by source and reason."}, []string{"source", "reason"}),
		FlushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eddy_ingest_flush_seconds", Help: "Time to write a flush's tables and commit it.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
		Generation:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_ingest_published_generation", Help: "Manifest generation of the last publication by this node."}),
		Lag:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "eddy_ingest_lag_seconds", Help: "Seconds between an ingested event's time and now, by source."}, []string{"source"}),
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Events, m.Links, m.Skipped, m.FlushSeconds, m.Generation, m.Lag} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) countDrops(source string, st extract.Stats) {
	for reason, n := range map[string]int{
		"link_too_deep": st.TooDeep, "too_many_links": st.TooManyLinks, "path_too_long": st.PathTooLong,
		"target_too_long": st.TargetTooLong, "invalid_link": st.Invalid,
	} {
		if n > 0 {
			m.Skipped.WithLabelValues(source, reason).Add(float64(n))
		}
	}
}
