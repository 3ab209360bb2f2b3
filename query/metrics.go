package query

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/prometheus/client_golang/prometheus"
)

// endpointsMax bounds the endpoint label's values; requests to further
// routes count under "other".
const endpointsMax = 32

// Metrics are the query API's Prometheus metrics: a latency histogram by
// endpoint and status class, and the requests in flight.
type Metrics struct {
	Seconds  *prometheus.HistogramVec // eddy_query_request_seconds{endpoint,code}
	InFlight prometheus.Gauge         // eddy_query_in_flight
	// Corrupt counts corrupt tables met (a frame or meta failing its
	// checks), by tree: set it as Server.Corrupt and Views.Corrupt.
	Corrupt *prometheus.CounterVec // eddy_corrupt_total{tree}
	// MissingTable counts queries that met a table object missing from the
	// store (set it as Server.MissingTable).
	MissingTable prometheus.Counter // eddy_query_missing_table_total
	// StoreUnavailable counts queries answered 503 StoreUnavailable: the
	// object store did not answer (set it as Server.StoreUnavailable).
	StoreUnavailable prometheus.Counter // eddy_query_store_unavailable_total
	// Busy counts queries answered 503 Busy: a read of a large target
	// whose time ran out waiting for its share (set it as Server.Busy).
	Busy prometheus.Counter // eddy_query_busy_total

	mu        sync.Mutex
	endpoints map[string]bool
}

// NewMetrics makes unregistered metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		Seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "eddy_query_request_seconds",
			Help:    "Query API request latency, by endpoint (the route's path; other for none) and status class (2xx, 4xx, 5xx...).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"endpoint", "code"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_query_in_flight", Help: "Query API requests being answered."}),
		Corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_corrupt_total",
			Help: "Corrupt tables met (a frame or metadata failing its checksum, fence or order checks), by tree; each is logged with the table.",
		}, []string{"tree"}),
		MissingTable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eddy_query_missing_table_total",
			Help: "Queries that met a table of their view missing from the store (deleted as garbage under an old view); answered 503 TableUnavailable, to be retried.",
		}),
		StoreUnavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eddy_query_store_unavailable_total",
			Help: "Queries that needed the object store while it did not answer (or answered a server error); answered 503 StoreUnavailable, to be retried.",
		}),
		Busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eddy_query_busy_total",
			Help: "Queries answered 503 Busy: a read of a large target whose time ran out waiting for its share of --large-read-memory.",
		}),
		endpoints: map[string]bool{},
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Seconds, m.InFlight, m.Corrupt, m.MissingTable, m.StoreUnavailable, m.Busy} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	// At 0 from the start, so that an alert on its increase fires at the
	// first corrupt table, not the second.
	for _, t := range lsm.Trees {
		m.Corrupt.WithLabelValues(string(t))
	}
	return nil
}

// Wrap returns h measured: each request's latency is observed under the
// endpoint its ServeMux route names (the pattern's path, "GET " dropped),
// so a request for a path no route serves, or redirected, is "other" and
// the label's values stay bounded.
func (m *Metrics) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.InFlight.Inc()
		defer m.InFlight.Dec()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		m.Seconds.WithLabelValues(m.endpoint(r.Pattern, sw.code), strconv.Itoa(sw.code/100)+"xx").Observe(time.Since(start).Seconds())
	})
}

func (m *Metrics) endpoint(pattern string, code int) string {
	if pattern == "" || (code >= 300 && code < 400) {
		return "other"
	}
	if _, p, ok := strings.Cut(pattern, " "); ok {
		pattern = p
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:] // a host-qualified pattern: the path
	}
	switch pattern {
	case "/", "/xrpc/":
		return "other" // the fallbacks: 404 NotFound, 501 MethodNotImplemented
	case "/{$}":
		pattern = "/"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.endpoints[pattern] {
		if len(m.endpoints) >= endpointsMax {
			return "other"
		}
		m.endpoints[pattern] = true
	}
	return pattern
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes a flush on when the underlying writer supports it.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
