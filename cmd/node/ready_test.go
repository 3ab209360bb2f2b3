package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/query"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// One readiness decides both /readyz and the query gate. On a one-node
// cluster (real Raft over mutual TLS on loopback): before the node knows
// a leader both say so; once it leads and serves what it applied both
// open, and run opens the gate by itself, for good.
func TestReadinessOneNode(t *testing.T) {
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	node, r, readyz := readinessOneNode(t, store, 5*time.Second)
	if id, _ := node.Leader(); id == "" {
		if err := r.caughtUp(); err == nil || !strings.Contains(err.Error(), "no leader known") {
			t.Errorf("query gate before any leader: %v", err)
		}
		if code, body := readyz(); code != 503 || !strings.Contains(body, "no leader known") {
			t.Errorf("/readyz before any leader: %d %q", code, body)
		}
	}
	runReadiness(t, r)
	waitReady(t, r, readyz)
	if err := r.caughtUp(); err != nil {
		t.Fatalf("query gate after catching up: %v", err)
	}
}

// Once open, the query gate closes again while the served view is stale:
// a generation the node applied (or the leader had) unserved for longer
// than the bound, as when a full disk keeps the node from opening new
// tables; it opens again as soon as the view is current.
func TestQueryGateClosesWhenStale(t *testing.T) {
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, r, readyz := readinessOneNode(t, store, time.Second)
	// The views run; the readiness polls only when the test says, so that
	// no poll undoes the state set below.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.views.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r.poll(ctx)
		if code, _ := readyz(); code == 200 && r.caughtUp() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", r.caughtUp())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What poll records when the view trails the applied generation.
	r.mu.Lock()
	r.mu.behindSince = time.Now().Add(-2 * time.Second)
	r.mu.Unlock()
	if err := r.caughtUp(); err == nil || !strings.Contains(err.Error(), ", applied ") {
		t.Fatalf("query gate with a view stale for 2 s (bound 1 s): %v", err)
	}
	r.mu.Lock()
	r.mu.seen = append(r.mu.seen[:0], seenGen{gen: r.views.Current().Generation() + 1, at: time.Now().Add(-3 * time.Second)})
	r.mu.behindSince = time.Time{}
	r.mu.Unlock()
	if err := r.caughtUp(); err == nil || !strings.Contains(err.Error(), "the leader had generation") {
		t.Fatalf("query gate with a leader generation unserved for 3 s: %v", err)
	}
	// Between two polls the view may serve the oldest generation seen but
	// not a later one: still stale, from that later one's first sight.
	r.mu.Lock()
	g := r.views.Current().Generation()
	r.mu.seen = append(r.mu.seen[:0], seenGen{gen: g, at: time.Now().Add(-4 * time.Second)}, seenGen{gen: g + 1, at: time.Now().Add(-3 * time.Second)})
	r.mu.Unlock()
	if err := r.caughtUp(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the leader had generation %d 3", g+1)) {
		t.Fatalf("query gate with the oldest generation seen served, a later one unserved for 3 s: %v", err)
	}
	// A generation the leader had at the first ask after a gap (a start, a
	// cut): it may have had it all along, so the gate closes at once,
	// until the view serves it (it stayed open, answering from the old
	// view while the node caught up).
	r.mu.Lock()
	r.mu.seen = append(r.mu.seen[:0], seenGen{gen: g + 1})
	r.mu.Unlock()
	if err := r.caughtUp(); err == nil || !strings.Contains(err.Error(), "catching up after a start or a gap") {
		t.Fatalf("query gate with a generation the leader had at the first ask after a gap: %v", err)
	}
	r.mu.Lock()
	r.mu.seen = append(r.mu.seen[:0], seenGen{gen: g, at: time.Now().Add(-4 * time.Second)})
	r.mu.Unlock()
	if err := r.caughtUp(); err != nil {
		t.Fatalf("query gate with every generation seen served: %v", err)
	}
	r.mu.Lock()
	r.mu.seen = r.mu.seen[:0]
	r.mu.Unlock()
	if err := r.caughtUp(); err != nil {
		t.Fatalf("query gate with a current view: %v", err)
	}
}

// A node whose object store stops answering (a real MinIO behind a TCP
// proxy that is cut) turns unready within a few probes, saying why, and
// eddy_store_up says 0; ready again once the store answers.
func TestReadinessStoreDown(t *testing.T) {
	r, readyz, _, fw := readinessOnMinIO(t, "readiness", 2*time.Second)

	fw.Cut()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := readyz()
		if code == 503 && strings.Contains(body, "the object store has not answered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store cut 20 s ago: /readyz %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if up := storeUp(t, r); up != 0 {
		t.Fatalf("eddy_store_up %v with the store down", up)
	}
	fw.Restore()
	waitReady(t, r, readyz)
	if up := storeUp(t, r); up != 1 {
		t.Fatalf("eddy_store_up %v with the store back", up)
	}
}

// storeUp reads the eddy_store_up gauge of r's collectors.
func storeUp(t *testing.T, r *readiness) float64 {
	t.Helper()
	for _, c := range r.collectors() {
		ch := make(chan *prometheus.Desc, 8)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			if strings.Contains(d.String(), `"eddy_store_up"`) {
				return testutil.ToFloat64(c)
			}
		}
	}
	t.Fatal("no eddy_store_up")
	return 0
}

// readinessOneNode opens a one-node cluster (real Raft over mutual TLS on
// loopback) and a readiness of bound over views of store; readyz asks its
// handler.
func readinessOneNode(t *testing.T, store objstore.Store, bound time.Duration) (*cluster.Node, *readiness, func() (int, string)) {
	dir := t.TempDir()
	if err := cluster.MakeCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MakeNodeCert(dir, "n1", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	node, err := cluster.Open(cluster.Config{ID: "n1", Dir: filepath.Join(dir, "raft"), RaftBind: addr, Certs: cluster.Files(dir, "n1"), Bootstrap: true,
		Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(context.Background()) })
	views := query.NewViews(node.FSM, lsm.NewCatalog(t.TempDir(), store), hclog.NewNullLogger())
	r := newReadiness(node, views, bound, "token", "")
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		r.handler(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	return node, r, readyz
}

// runReadiness runs r and its views until the test ends.
func runReadiness(t *testing.T, r *readiness) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.views.Run(ctx); close(done) }()
	runDone := make(chan struct{})
	go func() { r.run(ctx); close(runDone) }()
	t.Cleanup(func() { cancel(); <-done; <-runDone })
}

// waitReady waits until /readyz answers 200 and the query gate is open.
func waitReady(t *testing.T, r *readiness, readyz func() (int, string)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := readyz()
		if code == 200 && r.caught.Load() {
			if !strings.HasPrefix(body, "ready: generation ") {
				t.Fatalf("/readyz: %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: /readyz %d %q, gate open %v", code, body, r.caught.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A follower that has never asked the leader successfully says why: the
// ask's error (a refused admin token, an admin port it cannot reach), not
// that the generation is merely not known yet.
func TestReadinessSaysWhyTheLeaderCannotBeAsked(t *testing.T) {
	r := &readiness{bound: time.Second}
	now := time.Now()
	if why := r.askedLocked(now, "n1"); why != "the leader's generation is not known yet" {
		t.Fatalf("before any ask: %q", why)
	}
	r.mu.pollErr = fmt.Errorf("Unauthorized (401): a valid admin token is required")
	if why := r.askedLocked(now, "n1"); !strings.Contains(why, "cannot ask the leader n1") || !strings.Contains(why, "401") {
		t.Fatalf("after a refused ask: %q", why)
	}
	r.mu.lastPoll, r.mu.pollErr = now, nil
	if why := r.askedLocked(now.Add(500*time.Millisecond), "n1"); why != "" {
		t.Fatalf("asked within the bound: %q", why)
	}
	r.mu.pollErr = fmt.Errorf("connection refused")
	if why := r.askedLocked(now.Add(2*time.Second), "n1"); !strings.Contains(why, "for 2s: connection refused") {
		t.Fatalf("no ask for longer than the bound: %q", why)
	}
}

// A node that hears from no leader for longer than the bound (a leader
// that stopped leading, here its Raft shut down: as cut off from the
// others) goes on answering from its view, rather than leave clients
// nothing (every node may be cut off: two voters of three down), and every
// answer says it cannot vouch for its age (X-Eddy-Stale); /readyz says
// not ready. It answered with no sign of it; then, a generation seen
// before the cut and never applied closed its gate.
func TestCutOffNodeAnswersSayingSo(t *testing.T) {
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const bound = 300 * time.Millisecond
	node, r, readyz := readinessOneNode(t, store, bound)
	runReadiness(t, r)
	waitReady(t, r, readyz)
	qs := query.NewServer(r.views, lsm.NewReader(store, nil), &link.Codec{Outlines: node.FSM}, hclog.NewNullLogger())
	qs.Ready, qs.Unsure = r.caughtUp, r.unsure
	ask := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		qs.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/xrpc/blue.microcosm.links.getBacklinksCount?subject=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa&source=app.bsky.graph.follow:subject", nil))
		return rec
	}
	if rec := ask(); rec.Code != 200 || rec.Header().Get(query.StaleHeader) != "" {
		t.Fatalf("leading: %d %q, stale %q", rec.Code, rec.Body, rec.Header().Get(query.StaleHeader))
	}
	if err := node.Raft().Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	// A generation the leader had, seen just before the cut: it cannot be
	// applied without a leader, and must not close the gate (it did, past
	// the bound, with 503 where the node should answer saying so).
	r.mu.Lock()
	r.mu.seen = append(r.mu.seen[:0], seenGen{gen: r.views.Current().Generation() + 1, at: time.Now()})
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := ask()
		if rec.Code != 200 {
			t.Fatalf("cut off: %d %s", rec.Code, rec.Body)
		}
		if strings.Contains(rec.Header().Get(query.StaleHeader), "no contact with a leader for") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an answer of a node that has led no one and heard from no leader for 10s says %q", rec.Header().Get(query.StaleHeader))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := readyz(); code != 503 {
		t.Fatalf("/readyz of a node cut off: %d %s", code, body)
	}
}

// The node's own public paths answer a method other than GET or HEAD as
// the query API does (405 with Allow), not with the query mux's 404, and
// GET as before.
func TestPublicPathsRefuseOtherMethods(t *testing.T) {
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	node, r, readyz := readinessOneNode(t, store, time.Second)
	runReadiness(t, r)
	waitReady(t, r, readyz)
	qs := query.NewServer(r.views, lsm.NewReader(store, nil), &link.Codec{Outlines: node.FSM}, hclog.NewNullLogger())
	h := publicHandler(qs, query.NewMetrics(), prometheus.NewRegistry(), r)
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", path, nil))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" || !strings.Contains(rec.Body.String(), `"InvalidRequest"`) {
			t.Errorf("POST %s: %d, Allow %q, %s; want 405 InvalidRequest with Allow: GET, HEAD", path, rec.Code, rec.Header().Get("Allow"), rec.Body)
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
}

// A bucket that answers in 3 s is slow, not down: the node stays ready and
// its store up (a probe allowed 2 s called it down, refused every cold
// query and stopped the write path).
func TestReadinessSlowStoreIsUp(t *testing.T) {
	_, readyz, guard, fw := readinessOnMinIO(t, "readiness-slow", 30*time.Second)
	fw.SetDelay(3 * time.Second)
	defer fw.SetDelay(0)
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if down, _, err := guard.Down(); down {
			t.Fatalf("a bucket answering in 3 s called down: %v", err)
		}
		if code, body := readyz(); code != 200 {
			t.Fatalf("/readyz %d %q with a bucket answering in 3 s", code, body)
		}
	}
}

// readinessOnMinIO is a ready one-node readiness whose store is a real
// MinIO reached through a forwarder, guarded and probed as a node's is.
func readinessOnMinIO(t *testing.T, prefix string, bound time.Duration) (*readiness, func() (int, string), *objstore.Guard, *miniotest.Forwarder) {
	t.Helper()
	bucket, fw := miniotest.StoreBehindForwarder(t, prefix, 1)
	guard := objstore.NewGuard(bucket)
	_, r, readyz := readinessOneNode(t, guard, bound)
	r.store = guard
	runReadiness(t, r)
	waitReady(t, r, readyz)
	return r, readyz, guard, fw
}
