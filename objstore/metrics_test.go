package objstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/objstoretest"
	"github.com/prometheus/client_golang/prometheus"
)

// The wrapper is a Store: the conformance suite passes through it.
func TestMetricsStoreConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		inner, err := local.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return objstore.Instrument(inner, objstore.NewMetrics())
	})
}

// Every kind's requests, bytes, errors and latencies are counted, as
// scraped from a registry.
func TestMetricsStoreCounts(t *testing.T) {
	inner, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := objstore.NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	s := objstore.Instrument(inner, m)
	ctx := context.Background()
	data := []byte("0123456789")
	if err := s.Put(ctx, "a/b", data); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a/b", []byte("other")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("put over: %v", err)
	}
	if _, err := s.Get(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	if b, err := s.GetRange(ctx, "a/b", 2, 3); err != nil || string(b) != "234" {
		t.Fatal(b, err)
	}
	if _, err := s.GetRange(ctx, "a/b", 8, 3); !errors.Is(err, objstore.ErrRange) {
		t.Fatal(err)
	}
	if n, err := s.Size(ctx, "a/b"); err != nil || n != 10 {
		t.Fatal(n, err)
	}
	if err := s.List(ctx, "a/", func(string, int64) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "/bad"); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Get(cctx, "a"); err == nil {
		t.Fatal("canceled get succeeded")
	}

	got := metricstest.Values(t, reg)
	for kind, want := range map[string]float64{"put": 2, "get": 4, "get_range": 2, "head": 1, "list": 1, "delete": 1} {
		if g := got["eddy_objstore_requests_total{kind="+kind+"}"]; g != want {
			t.Errorf("requests{kind=%s} = %v, want %v", kind, g, want)
		}
		if g := got["eddy_objstore_request_seconds_count{kind="+kind+"}"]; g != want {
			t.Errorf("request_seconds{kind=%s} observed %v, want %v", kind, g, want)
		}
	}
	for kind, want := range map[string]float64{"put": 10, "get": 10, "get_range": 3, "head": 0} {
		if g := got["eddy_objstore_bytes_total{kind="+kind+"}"]; g != want {
			t.Errorf("bytes{kind=%s} = %v, want %v", kind, g, want)
		}
	}
	for lv, want := range map[[2]string]float64{
		{"put", "exists"}: 1, {"get", "not_found"}: 1, {"get_range", "range"}: 1, {"get", "invalid_key"}: 1, {"get", "canceled"}: 1,
	} {
		if g := got["eddy_objstore_errors_total{error="+lv[1]+",kind="+lv[0]+"}"]; g != want {
			t.Errorf("errors{kind=%s,error=%s} = %v, want %v", lv[0], lv[1], g, want)
		}
	}
}
