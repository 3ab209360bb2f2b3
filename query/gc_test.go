package query

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/prometheus/client_golang/prometheus"
)

// OldestServed is the current view's generation, or the oldest one a query
// in flight holds; a released hold no longer counts.
func TestViewsOldestServed(t *testing.T) {
	f := newFixture(t)
	f.write(like(0))
	g1 := f.flush()
	v, release := f.views.Acquire()
	if v.Generation() != g1 || f.views.OldestServed() != g1 {
		t.Fatalf("acquired %d, oldest %d, want %d", v.Generation(), f.views.OldestServed(), g1)
	}
	f.write(like(1))
	g2 := f.flush()
	if g2 <= g1 || f.views.Current().Generation() != g2 {
		t.Fatalf("serving %d after flush to %d", f.views.Current().Generation(), g2)
	}
	if got := f.views.OldestServed(); got != g1 {
		t.Fatalf("oldest served %d while a query holds %d", got, g1)
	}
	release()
	release() // a second call is harmless
	if got := f.views.OldestServed(); got != g2 {
		t.Fatalf("oldest served %d after release, want %d", got, g2)
	}
}

// A query that waits for a generation holds the view it then reads, not
// the one current when it came: on a node that had opened no manifest, a
// hold of generation 0 went unreported (a status leaves 0 out), so the
// collector could delete tables the answer was reading.
func TestAcquireAtLeastHoldsTheViewItReads(t *testing.T) {
	f := newFixture(t)
	before := f.views.Current().Generation()
	type got struct {
		v       *lsm.View
		release func()
		err     error
	}
	ch := make(chan got, 1)
	go func() {
		v, release, err := f.views.AcquireAtLeast(context.Background(), before+1)
		ch <- got{v, release, err}
	}()
	f.write(like(0))
	g1 := f.flush()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.v.Generation() != g1 || g1 <= before {
		t.Fatalf("answered from %d, want %d (> %d)", r.v.Generation(), g1, before)
	}
	if got := f.views.OldestServed(); got != g1 {
		t.Fatalf("oldest served %d while the query reads %d", got, g1)
	}
	f.write(like(1))
	g2 := f.flush()
	if got := f.views.OldestServed(); got != g1 || g2 <= g1 {
		t.Fatalf("oldest served %d after a flush to %d, while the query reads %d", got, g2, g1)
	}
	r.release()
	if got := f.views.OldestServed(); got != g2 {
		t.Fatalf("oldest served %d after release, want %d", got, g2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := f.views.AcquireAtLeast(ctx, g2+1); err == nil {
		t.Fatal("acquired a generation never made")
	}
	if got := f.views.OldestServed(); got != g2 {
		t.Fatalf("oldest served %d after a wait that failed, want %d", got, g2)
	}
}

// Through the HTTP API: a query with minGeneration holds, from the moment
// the generation comes, the view it answers from, also while it waits
// for an execution slot, and says which (X-Eddy-Generation).
func TestMinGenerationQueryHoldsTheViewItAnswers(t *testing.T) {
	f := newFixture(t)
	l := NewClientLimiter(ClientLimits{InFlight: 8, Slots: 1})
	f.qs.Clients = l
	f.write(like(0))
	g0 := f.flush()
	l.mu.Lock()
	l.mu.free = 0 // the only slot is taken
	l.mu.Unlock()
	type answer struct {
		code int
		gen  string
		body string
	}
	ch := make(chan answer, 1)
	go func() {
		u := f.srv.URL + "/xrpc/blue.cerulea.backlinks.listBacklinks?" + url.Values{"target": {post}, "minGeneration": {strconv.FormatUint(g0+1, 10)}}.Encode()
		r, err := http.Get(u)
		if err != nil {
			ch <- answer{code: -1, body: err.Error()}
			return
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		ch <- answer{r.StatusCode, r.Header.Get(GenerationHeader), string(b)}
	}()
	// The query has come (the limiter counts it before it reads the
	// parameters) and waits for g0+1, holding nothing from before it.
	for deadline := time.Now().Add(10 * time.Second); l.inFlight("127.0.0.1") < 1; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the query never came")
		}
	}
	time.Sleep(20 * time.Millisecond) // past the parameters, into the wait
	f.write(like(1))
	g1 := f.flush()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		queued := len(l.mu.ring)
		l.mu.Unlock()
		if queued > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the query never waited for a slot")
		}
		time.Sleep(2 * time.Millisecond)
	}
	f.write(like(2))
	g2 := f.flush()
	if got := f.views.OldestServed(); got != g1 || g1 <= g0 || g2 <= g1 {
		t.Fatalf("oldest served %d while the query waits to answer from %d (flushes %d, %d, %d)", got, g1, g0, g1, g2)
	}
	l.mu.Lock()
	l.mu.free = 1
	l.grantLocked()
	l.mu.Unlock()
	a := <-ch
	if a.code != http.StatusOK || a.gen != strconv.FormatUint(g1, 10) {
		t.Fatalf("answer %d from generation %q, want 200 from %d: %s", a.code, a.gen, g1, a.body)
	}
	l1, _ := like(1)
	l2, _ := like(2)
	if !strings.Contains(a.body, l1) || strings.Contains(a.body, l2) {
		t.Fatalf("the answer of generation %d: %s", g1, a.body)
	}
	if got := f.views.OldestServed(); got != g2 {
		t.Fatalf("oldest served %d after the answer, want %d", got, g2)
	}
}

// A query that meets a table object missing from the store (its view is
// older than the garbage collector allowed for) is counted and answered
// 503 TableUnavailable with Retry-After: a retriable error, not a crash
// nor a 500.
func TestMissingTableIsRetriable(t *testing.T) {
	f := newFixture(t)
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	f.qs.MissingTable = m.MissingTable
	f.write(like(0))
	f.flush()
	for _, ref := range f.views.Current().Manifest.Tables(lsm.TreeLinks) {
		data, _ := lsm.TableKeys(lsm.TreeLinks, ref.ID)
		if err := os.Remove(f.storeDir + "/" + data); err != nil {
			t.Fatal(err)
		}
	}
	q := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}
	code, h, body := f.raw("/xrpc/blue.microcosm.links.getBacklinks", q.Encode())
	var e struct{ Error, Message string }
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	// The view is the newest the node has: the bucket lost a live table,
	// and no newer manifest is coming to move to.
	if code != 503 || e.Error != "TableUnavailable" || h.Get("Retry-After") != "1" || !strings.Contains(e.Message, "the newest this node has, is missing from the object store") {
		t.Fatalf("answer %d %s (Retry-After %q)", code, body, h.Get("Retry-After"))
	}
	if n := metricstest.Values(t, reg)["eddy_query_missing_table_total"]; n != 1 {
		t.Fatalf("eddy_query_missing_table_total %v", n)
	}
}

// The first view a process opens removes the local metadata an earlier
// process left of tables that view does not hold (deleted while the node
// was down), and keeps the view's own.
func TestViewsDropStaleMetas(t *testing.T) {
	f := newFixture(t)
	stale := filepath.Join(f.catDir, "tables", "links", lsm.NewID()+".meta")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("left by an earlier process"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.write(like(0))
	f.flush()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale meta still there (%v)", err)
	}
	for _, ref := range f.views.Current().Manifest.Tables(lsm.TreeLinks) {
		if _, err := os.Stat(filepath.Join(f.catDir, "tables", "links", ref.ID+".meta")); err != nil {
			t.Fatalf("the view's own meta: %v", err)
		}
	}
}

// A table missing from the store under a view older than the node's
// newest manifest is garbage collected since: the node moves on, and the
// answer says so; under the newest view it says the store lost it.
func TestMissingTableMessage(t *testing.T) {
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := &scriptedSource{m: &lsm.Manifest{Generation: 9}}
	s := NewServer(NewViews(src, lsm.NewCatalog(t.TempDir(), store), nil), lsm.NewReader(store, nil), &link.Codec{Outlines: link.NewMemOutlines()}, nil)
	r := httptest.NewRequest("GET", "/xrpc/blue.microcosm.links.getBacklinks", nil)
	if e := s.missingTable(r, s.Views.Current(), objstore.ErrNotFound); !strings.Contains(e.message, "moving to a newer manifest") {
		t.Fatalf("behind the newest manifest: %q", e.message)
	}
	src.set(&lsm.Manifest{})
	if e := s.missingTable(r, s.Views.Current(), objstore.ErrNotFound); !strings.Contains(e.message, "the newest this node has, is missing") {
		t.Fatalf("at the newest manifest: %q", e.message)
	}
}
