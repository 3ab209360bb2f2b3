package query

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type emptySource struct{}

func (emptySource) Manifest() *lsm.Manifest { return &lsm.Manifest{} }
func (emptySource) Watch() <-chan struct{}  { return make(chan struct{}) }

// The middleware observes each request of the real query server under its
// route and status class; unknown paths count as "other".
func TestQueryMetrics(t *testing.T) {
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	views := NewViews(emptySource{}, lsm.NewCatalog(t.TempDir(), store), nil)
	qs := NewServer(views, lsm.NewReader(store, nil), &link.Codec{Outlines: link.NewMemOutlines()}, nil)
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Wrap(qs.Handler()))
	defer srv.Close()
	get := func(path string, want int) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	get("/xrpc/blue.cerulea.backlinks.listBacklinks?target=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", 200)
	get("/xrpc/blue.cerulea.backlinks.listBacklinks?target=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa&limit=2", 200)
	get("/xrpc/blue.cerulea.backlinks.listBacklinks?limit=-1", 400)
	get("/xrpc/blue.microcosm.links.getBacklinksCount?subject=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa&source=app.bsky.graph.follow:subject", 200)
	get("/xrpc/no.such.method", 501)

	counts := map[[2]string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "eddy_query_request_seconds" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			var k [2]string
			for _, l := range mm.GetLabel() {
				switch l.GetName() {
				case "endpoint":
					k[0] = l.GetValue()
				case "code":
					k[1] = l.GetValue()
				}
			}
			counts[k] = mm.GetHistogram().GetSampleCount()
		}
	}
	want := map[[2]string]uint64{
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", "2xx"}:   2,
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", "4xx"}:   1,
		{"/xrpc/blue.microcosm.links.getBacklinksCount", "2xx"}: 1,
		{"other", "5xx"}: 1, // 501 MethodNotImplemented
	}
	if len(counts) != len(want) {
		t.Fatalf("series %v, want %v", counts, want)
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%v: %d requests, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
}

// The endpoint label is bounded: past endpointsMax routes, "other".
func TestQueryMetricsEndpointBound(t *testing.T) {
	m := NewMetrics()
	for i := 0; i < endpointsMax; i++ {
		if e := m.endpoint("GET /r"+string(rune('a'+i)), 200); e == "other" {
			t.Fatalf("route %d counted as other", i)
		}
	}
	if e := m.endpoint("GET /one-more", 200); e != "other" {
		t.Fatalf("route past the bound: %q", e)
	}
	if e := m.endpoint("GET /ra", 200); e != "/ra" {
		t.Fatalf("a known route: %q", e)
	}
	if e := m.endpoint("/xrpc/", 301); e != "other" {
		t.Fatalf("a redirect: %q", e)
	}
}

// eddy_corrupt_total has a series at 0 for every tree from the start: the
// first corrupt table is an increase an alert sees.
func TestCorruptCounterStartsAtZero(t *testing.T) {
	m := NewMetrics()
	if err := m.Register(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.Corrupt); n != len(lsm.Trees) {
		t.Fatalf("%d series of eddy_corrupt_total before any corrupt table, want one a tree (%d)", n, len(lsm.Trees))
	}
}
