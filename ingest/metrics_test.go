package ingest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// registeredMetrics is a write path's metrics, registered in a registry of
// their own.
func registeredMetrics(t testing.TB) (*Metrics, *prometheus.Registry) {
	t.Helper()
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// watchCommitted watches s with *committed as its committed cursor; a
// cursor asked of another source is an error.
func watchCommitted(t *testing.T, m *Metrics, s Source, committed *string) {
	m.Watch(s, func(name string) string {
		if name != s.Name() {
			t.Errorf("cursor of %q asked", name)
		}
		return *committed
	})
}

// A replay's undecodable lines count as skipped by reason, and its events
// behind follow the committed cursor: every line, then the rest, then 0.
func TestMetricsReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	if err := os.WriteFile(path, []byte("{bad\n\n{also bad\nnot json at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, reg := registeredMetrics(t)
	r := &Replay{Path: path}
	committed := ""
	watchCommitted(t, m, r, &committed)
	key := "eddy_ingest_lag_events{source=" + r.Name() + "}"
	deadline := time.Now().Add(5 * time.Second)
	for metricstest.Values(t, reg)[key] != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("events behind before reading: %v", metricstest.Values(t, reg))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var last string
	if err := r.Run(context.Background(), "", func(op *event.Op, c string) error { last = c; return nil }); err != nil {
		t.Fatal(err)
	}
	got := metricstest.Values(t, reg)
	if got["eddy_ingest_skipped_total{reason=bad_event,source="+r.Name()+"}"] != 3 {
		t.Fatalf("skipped: %v", got)
	}
	committed = "1"
	if v := metricstest.Values(t, reg)[key]; v != 3 {
		t.Fatalf("events behind at cursor 1: %v", v)
	}
	committed = last
	if v := metricstest.Values(t, reg)[key]; v != 0 || !Done(last) {
		t.Fatalf("events behind at %q: %v", last, v)
	}
}

// A live stream's lag: seconds from the last event's time, and events
// estimated from its rate in event time; worked out when read, so a stream
// that stops sending falls behind; only while this node runs the write
// path; before the term's first event, from the term's start.
func TestMetricsLiveLag(t *testing.T) {
	m, reg := registeredMetrics(t)
	j, err := NewJetstream([]string{"ws://127.0.0.1:1/subscribe"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(j, func(string) string { return "" })
	if j.OnLag == nil || j.OnSkip == nil {
		t.Fatal("Watch did not wire the Jetstream source")
	}
	const secs, events = "eddy_ingest_lag_seconds{source=jetstream}", "eddy_ingest_lag_events{source=jetstream}"
	if _, ok := metricstest.Values(t, reg)[secs]; ok {
		t.Fatal("a lag before this node runs the write path")
	}
	m.termStarted(time.Now().Add(-7 * time.Second))
	if s := metricstest.Values(t, reg)[secs]; s < 6.9 || s > 8 {
		t.Fatalf("lag seconds before the term's first event %v, want ~7 (since the term began)", s)
	}
	// 101 events 10 ms apart in event time (100 per second), the last one
	// 5 s ago: about 500 events behind.
	base := time.Now().Add(-6 * time.Second)
	for i := 0; i <= 100; i++ {
		m.observeLag(j.Name(), base.Add(time.Duration(i)*10*time.Millisecond))
	}
	j.OnSkip("bad_event")
	got := metricstest.Values(t, reg)
	if s := got[secs]; s < 4.9 || s > 6 {
		t.Fatalf("lag seconds %v", s)
	}
	if e := got[events]; e < 490 || e > 600 {
		t.Fatalf("lag events %v", e)
	}
	if got["eddy_ingest_skipped_total{reason=bad_event,source=jetstream}"] != 1 {
		t.Fatalf("skipped %v", got)
	}
	// No event for a while: the lag grows.
	time.Sleep(1100 * time.Millisecond)
	if s := metricstest.Values(t, reg)[secs]; s < 6 {
		t.Fatalf("lag seconds %v a second later with no event, want >= 6", s)
	}
	// Caught up: no lag.
	m.observeLag(j.Name(), time.Now())
	if e := metricstest.Values(t, reg)[events]; e >= 1 {
		t.Fatalf("lag events when caught up: %v", e)
	}
	// The term ends (leadership lost): no lag here.
	m.termEnded()
	if v, ok := metricstest.Values(t, reg)[secs]; ok {
		t.Fatalf("lag seconds %v after the term ended", v)
	}
	// Under a leadership (the supervisor), a write path's run that ends
	// (a bucket outage, waited out before the next run) keeps the lag,
	// growing from the last event read; the leadership's end drops it.
	m.leadStarted(time.Now())
	m.termStarted(time.Now())
	m.observeLag(j.Name(), time.Now().Add(-3*time.Second))
	m.termEnded()
	if s, ok := metricstest.Values(t, reg)[secs]; !ok || s < 2.9 {
		t.Fatalf("lag seconds %v (present %v) between two runs of one leadership, want >= 3", s, ok)
	}
	m.leadEnded()
	if v, ok := metricstest.Values(t, reg)[secs]; ok {
		t.Fatalf("lag seconds %v after the leadership ended", v)
	}
}

// The compaction backlog counts the runs of every merge due, as the
// compactor takes them, fan-in at a time.
func TestCompactionBacklog(t *testing.T) {
	run := func(id string, tree lsm.Tree, bytes uint64) lsm.Run {
		return lsm.Run{ID: id, Tree: tree, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "t" + id, Records: 1, DataBytes: bytes}}}
	}
	m := &lsm.Manifest{}
	for i := 0; i < 5; i++ {
		m.Runs = append(m.Runs, run(fmt.Sprint("a", i), lsm.TreeLinks, 100))
	}
	if n := CompactionBacklog(m, lsm.TreeLinks, 4); n != 4 {
		t.Fatalf("5 small runs, fan-in 4: backlog %d, want 4", n)
	}
	for i := 0; i < 4; i++ {
		m.Runs = append(m.Runs, run(fmt.Sprint("b", i), lsm.TreeLinks, 100))
	}
	if n := CompactionBacklog(m, lsm.TreeLinks, 4); n != 8 {
		t.Fatalf("9 small runs, fan-in 4: backlog %d, want 8", n)
	}
	if n := CompactionBacklog(m, lsm.TreeRevocations, 4); n != 0 {
		t.Fatalf("no revocation runs: backlog %d", n)
	}
	if n := CompactionBacklog(m, lsm.TreeLinks, 10); n != 0 {
		t.Fatalf("9 runs, fan-in 10: backlog %d", n)
	}
	if n := CompactionBacklog(nil, lsm.TreeLinks, 4); n != 0 {
		t.Fatalf("nil manifest: %d", n)
	}
}

// The counters suggested alerts take the increase of are there at 0 from
// the start: the first failure is an increase.
func TestAlertCountersStartAtZero(t *testing.T) {
	m, _ := registeredMetrics(t)
	for _, c := range []struct {
		v      *prometheus.CounterVec
		labels []string
	}{{m.StateBackups, []string{"failed"}}, {m.Compactions, []string{"links", "failed"}}, {m.GCDeleted, []string{"orphan"}}} {
		if n := testutil.CollectAndCount(c.v); n < 2 {
			t.Errorf("%d series before any event", n)
		}
		if v := testutil.ToFloat64(c.v.WithLabelValues(c.labels...)); v != 0 {
			t.Errorf("%v: %v", c.labels, v)
		}
	}
}

// A backfill source's crawl is 0 until its committed cursor reaches the
// listing's end, then 1, on any node (the cursor is replicated).
func TestMetricsBackfillDone(t *testing.T) {
	m, reg := registeredMetrics(t)
	b := &Backfill{Relay: "https://relay.example"}
	committed := ""
	watchCommitted(t, m, b, &committed)
	key := "eddy_backfill_done{source=" + b.Name() + "}"
	for _, c := range []struct {
		cursor string
		want   float64
	}{{"", 0}, {"page-7", 0}, {EOFCursor("page-9"), 1}} {
		committed = c.cursor
		if got, ok := metricstest.Values(t, reg)[key]; !ok || got != c.want {
			t.Fatalf("at cursor %q: %s = %v (present %v), want %v", c.cursor, key, got, ok, c.want)
		}
	}
}

// A crawl counts each repository it writes (or revokes) in
// eddy_backfill_crawled_total, from 0; a resync of one is not counted:
// resyncs go on while a crawl stalls, and would hide it.
func TestMetricsBackfillCrawled(t *testing.T) {
	world, dids := carWorld(t)
	var repos []string
	for _, did := range dids {
		repos = append(repos, fmt.Sprintf(`{"did":%q,"head":"x","rev":"x","active":true}`, did))
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"repos":[%s]}`, strings.Join(repos, ","))
	}))
	defer relay.Close()
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveCAR(w, r, world) }))
	defer pds.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	m, reg := registeredMetrics(t)
	b := &Backfill{Relay: relay.URL, PLC: faultPLC(t, pds.URL), NoCompaction: true}
	m.Watch(b, func(string) string { return "" })
	key := "eddy_backfill_crawled_total{source=" + b.Name() + "}"
	if v, ok := metricstest.Values(t, reg)[key]; !ok || v != 0 {
		t.Fatalf("before the crawl: %v (present %v), want 0", v, ok)
	}
	ctx := context.Background()
	if err := b.Ingest(ctx, w, ""); err != nil {
		t.Fatal(err)
	}
	if v := metricstest.Values(t, reg)[key]; v != float64(len(dids)) {
		t.Fatalf("after the crawl of %d repositories: %v", len(dids), v)
	}
	if err := b.Resync(ctx, w, dids[0]); err != nil {
		t.Fatal(err)
	}
	if v := metricstest.Values(t, reg)[key]; v != float64(len(dids)) {
		t.Fatalf("a resync counted: %v", v)
	}
}
