package objstore

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// Metrics are Prometheus metrics of object-store requests, by Kind; one
// set is shared by every MetricsStore made from it.
type Metrics struct {
	Requests *prometheus.CounterVec   // eddy_objstore_requests_total{kind}
	Errors   *prometheus.CounterVec   // eddy_objstore_errors_total{kind,error}
	Bytes    *prometheus.CounterVec   // eddy_objstore_bytes_total{kind}
	Seconds  *prometheus.HistogramVec // eddy_objstore_request_seconds{kind}
	// Attempts counts the HTTP requests an S3 store sent, its client's
	// retries and hedged reads among them (OpenCounted).
	Attempts *prometheus.CounterVec // eddy_objstore_http_attempts_total{method,result}
}

// attemptMethods are the HTTP methods the S3 client sends.
var attemptMethods = []string{"GET", "PUT", "HEAD", "DELETE", "POST"}

// NewMetrics makes unregistered metrics; Register adds them to a registry.
// Every kind's series exist from the start (at zero).
func NewMetrics() *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_objstore_requests_total", Help: "Object-store requests, by kind (get, get_range, put, list, delete, head), whether they succeeded or not."}, []string{"kind"}),
		Errors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_objstore_errors_total", Help: "Object-store requests that failed, by kind and error class (not_found, exists, range, invalid_key, canceled, other)."}, []string{"kind", "error"}),
		Bytes:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_objstore_bytes_total", Help: "Object bytes moved by successful requests, by kind: read by get and get_range, written by put."}, []string{"kind"}),
		Seconds:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eddy_objstore_request_seconds", Help: "Object-store request latency, by kind.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"kind"}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_objstore_http_attempts_total", Help: "HTTP requests sent to an S3 bucket, by method and result (ok, client_error, slow_down, server_error, error: no answer, canceled): each retry of the S3 client and each hedged read is one, so a bucket that fails requests the client retries shows here while eddy_objstore_errors_total stays flat."}, []string{"method", "result"}),
	}
	for _, method := range attemptMethods {
		for _, result := range s3.AttemptResults() {
			m.Attempts.WithLabelValues(method, result)
		}
	}
	for _, k := range Kinds() {
		for _, class := range []string{"not_found", "exists", "range", "invalid_key", "canceled", "other"} {
			m.Errors.WithLabelValues(k.String(), class)
		}
		m.Requests.WithLabelValues(k.String())
		m.Bytes.WithLabelValues(k.String())
		m.Seconds.WithLabelValues(k.String())
	}
	return m
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Requests, m.Errors, m.Bytes, m.Seconds, m.Attempts} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ErrorClass names an error for the error label: "not_found", "exists",
// "range", "invalid_key", "canceled" or "other".
func ErrorClass(err error) string {
	switch {
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrExists):
		return "exists"
	case errors.Is(err, ErrRange):
		return "range"
	case errors.Is(err, ErrInvalidKey):
		return "invalid_key"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "other"
}

// MetricsStore is a Store that records every call made through it in
// Metrics and passes it on to another Store. Make one with Instrument.
type MetricsStore struct {
	inner Store
	m     *Metrics
}

var _ Store = (*MetricsStore)(nil)

// Instrument returns a Store that forwards every call to s and records it
// in m: one request of its Kind per call (Size is "head"), its latency,
// the bytes of a successful Get, GetRange or Put, and its error class.
func Instrument(s Store, m *Metrics) *MetricsStore { return &MetricsStore{inner: s, m: m} }

// Unwrap returns the wrapped Store.
func (s *MetricsStore) Unwrap() Store { return s.inner }

// Close closes the wrapped Store if it is an io.Closer.
func (s *MetricsStore) Close() error {
	if c, ok := s.inner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (s *MetricsStore) done(k Kind, start time.Time, bytes int, err error) {
	kind := k.String()
	s.m.Requests.WithLabelValues(kind).Inc()
	s.m.Seconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.Errors.WithLabelValues(kind, ErrorClass(err)).Inc()
		return
	}
	if bytes > 0 {
		s.m.Bytes.WithLabelValues(kind).Add(float64(bytes))
	}
}

// Put implements Store.
func (s *MetricsStore) Put(ctx context.Context, key string, data []byte) error {
	start := time.Now()
	err := s.inner.Put(ctx, key, data)
	s.done(KindPut, start, len(data), err)
	return err
}

// Get implements Store.
func (s *MetricsStore) Get(ctx context.Context, key string) ([]byte, error) {
	start := time.Now()
	b, err := s.inner.Get(ctx, key)
	s.done(KindGet, start, len(b), err)
	return b, err
}

// GetRange implements Store.
func (s *MetricsStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	start := time.Now()
	b, err := s.inner.GetRange(ctx, key, off, n)
	s.done(KindGetRange, start, len(b), err)
	return b, err
}

// Size implements Store.
func (s *MetricsStore) Size(ctx context.Context, key string) (int64, error) {
	start := time.Now()
	n, err := s.inner.Size(ctx, key)
	s.done(KindHead, start, 0, err)
	return n, err
}

// List implements Store.
func (s *MetricsStore) List(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	start := time.Now()
	err := s.inner.List(ctx, prefix, fn)
	s.done(KindList, start, 0, err)
	return err
}

// Delete implements Store.
func (s *MetricsStore) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := s.inner.Delete(ctx, key)
	s.done(KindDelete, start, 0, err)
	return err
}
