package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/prometheus/client_golang/prometheus"
)

// gcFixture is a one-node cluster (real Raft) whose admin reports a served
// generation the test sets, a local store and a writer with a short grace.
type gcFixture struct {
	t      *testing.T
	node   *cluster.Node
	store  objstore.Store
	w      *Writer
	served atomic.Uint64
	reg    *prometheus.Registry
}

const testGrace = 300 * time.Millisecond

func newGCFixture(t *testing.T) *gcFixture {
	f := &gcFixture{t: t, node: oneNode(t), reg: prometheus.NewRegistry()}
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	admin, err := cluster.NewAdmin(f.node, "0123456789abcdef0123")
	if err != nil {
		t.Fatal(err)
	}
	admin.Served = f.served.Load
	m := NewMetrics()
	if err := m.Register(f.reg); err != nil {
		t.Fatal(err)
	}
	f.w, err = NewWriter(context.Background(), Config{Node: f.node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store),
		GCGrace: testGrace, Members: admin.MembersServed, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// table puts a table's two objects and returns a delta run of it.
func (f *gcFixture) table(runID string) lsm.Run {
	f.t.Helper()
	id := lsm.NewID()
	data, meta := lsm.TableKeys(lsm.TreeLinks, id)
	for _, k := range []string{data, meta} {
		if err := f.store.Put(context.Background(), k, []byte("x")); err != nil {
			f.t.Fatal(err)
		}
	}
	return lsm.Run{ID: runID, Tree: lsm.TreeLinks, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: id, Records: 1, DataBytes: 1, MetaBytes: 1}}}
}

// publish commits an edit on the current generation, as a flush does.
func (f *gcFixture) publish(add []lsm.Run, remove []string) uint64 {
	f.t.Helper()
	e := lsm.Edit{Base: f.node.FSM.Manifest().Generation, Add: add, Remove: remove}
	res, err := f.node.Propose(context.Background(), fsm.TypeFlush, 0, fsm.Flush{Edit: e, Time: time.Now().UnixNano()})
	if err != nil {
		f.t.Fatal(err)
	}
	return res.(fsm.FlushResult).Generation
}

// exists reports whether a table's data object is in the store.
func (f *gcFixture) exists(r lsm.Run) bool {
	data, _ := lsm.TableKeys(r.Tree, r.Tables[0].ID)
	_, err := f.store.Size(context.Background(), data)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		f.t.Fatal(err)
	}
	return err == nil
}

// A replaced table is deleted only once the grace has passed and every
// member serves the generation that removed it; the deletion is recorded
// in the replicated list, and a member's lag holds it back meanwhile.
func TestCollectReplacedTables(t *testing.T) {
	f := newGCFixture(t)
	r1, r2 := f.table("r1"), f.table("r2")
	f.served.Store(f.publish([]lsm.Run{r1, r2}, nil))
	c1 := f.table("c1")
	gen := f.publish([]lsm.Run{c1}, []string{"r1", "r2"})
	if g := f.node.FSM.Garbage(); len(g) != 2 || g[0].Generation != gen || g[0].Since == 0 {
		t.Fatalf("garbage %+v", g)
	}
	c := newCollector(f.w)
	ctx := context.Background()
	c.collect(ctx) // within the grace: nothing
	time.Sleep(testGrace)
	c.collect(ctx) // past the grace, but this node still serves gen-1
	if !f.exists(r1) || !f.exists(r2) || len(f.node.FSM.Garbage()) != 2 || c.blocked.IsZero() {
		t.Fatalf("deleted while a member serves an older generation (blocked %v)", c.blocked)
	}
	f.served.Store(gen)
	c.collect(ctx)
	if f.exists(r1) || f.exists(r2) || !f.exists(c1) {
		t.Fatalf("after collect: r1 %v r2 %v c1 %v", f.exists(r1), f.exists(r2), f.exists(c1))
	}
	if g := f.node.FSM.Garbage(); len(g) != 0 || !c.blocked.IsZero() {
		t.Fatalf("garbage %+v after deletion, blocked %v", g, c.blocked)
	}
	m := metricstest.Values(t, f.reg)
	if m["eddy_gc_deleted_total{reason=replaced}"] != 2 || m["eddy_gc_deleted_bytes_total{reason=replaced}"] != 4 || m["eddy_gc_blocked_seconds"] != 0 {
		t.Fatalf("metrics %v", m)
	}
}

// The sweep deletes a table object no manifest or garbage entry names once
// it was seen unreferenced for the grace, never one that may be an upload
// in flight on this leader, never a referenced table, never a key that is
// not a table object.
func TestSweepOrphans(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	live := f.table("live")
	f.served.Store(f.publish([]lsm.Run{live}, nil))
	orphan := f.table("orphan") // uploaded, never published: a deposed leader's
	stranger := "tables/links/notes.txt"
	if err := f.store.Put(ctx, stranger, []byte("not a table")); err != nil {
		t.Fatal(err)
	}
	c := newCollector(f.w)
	if err := c.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	end := f.w.uploads.begin() // an upload starts: what appears now may be it
	inflight := f.table("inflight")
	if err := c.sweep(ctx); err != nil || !f.exists(orphan) {
		t.Fatalf("orphan deleted within the grace (%v)", err)
	}
	time.Sleep(testGrace)
	if err := c.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if f.exists(orphan) || !f.exists(live) || !f.exists(inflight) {
		t.Fatalf("after the grace: orphan %v live %v inflight %v", f.exists(orphan), f.exists(live), f.exists(inflight))
	}
	if _, err := f.store.Size(ctx, stranger); err != nil {
		t.Fatalf("a key that is not a table: %v", err)
	}
	end()
	time.Sleep(testGrace)
	if err := c.sweep(ctx); err != nil || f.exists(inflight) {
		t.Fatalf("the finished upload's never-published table stays (%v)", err)
	}
	m := metricstest.Values(t, f.reg)
	if m["eddy_gc_deleted_total{reason=orphan}"] != 2 || m["eddy_gc_orphan_tables"] != 0 {
		t.Fatalf("metrics %v", m)
	}
}

// An upload published while a sweep judges its listing is never deleted:
// the sweep reads the uploads in flight before the manifest. Read in the
// other order, a merge's
// table first seen during its upload, published and ended between the
// sweep's two reads, looked neither in flight nor referenced.
func TestSweepKeepsAnUploadPublishedMeanwhile(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	f.served.Store(f.publish([]lsm.Run{f.table("live")}, nil))
	c := newCollector(f.w)
	end := f.w.uploads.begin() // a long merge starts uploading
	out := f.table("merged")
	if err := c.sweep(ctx); err != nil { // first seen, in flight
		t.Fatal(err)
	}
	time.Sleep(testGrace)
	published := false
	c.afterManifest = func() {
		if published {
			return
		}
		published = true
		f.served.Store(f.publish([]lsm.Run{out}, nil)) // the merge publishes...
		end()                                          // ...and its upload ends
	}
	if err := c.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !published || !f.exists(out) {
		t.Fatalf("the published merge's table was deleted (published %v)", published)
	}
	c.afterManifest = nil
	time.Sleep(testGrace)
	if err := c.sweep(ctx); err != nil || !f.exists(out) || len(c.orphans) != 0 {
		t.Fatalf("a referenced table: exists %v, orphans %d (%v)", f.exists(out), len(c.orphans), err)
	}
}

// The grace runs on the deleting leader's clock, from when its collector
// first saw the entry: an entry stamped by a proposer whose clock was an
// hour behind still waits a whole grace, and one whose clock was an hour
// ahead waits no longer than a grace.
func TestCollectGraceOnOwnClock(t *testing.T) {
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		f := newGCFixture(t)
		r1 := f.table("r1")
		f.publish([]lsm.Run{r1}, nil)
		e := lsm.Edit{Base: f.node.FSM.Manifest().Generation, Add: []lsm.Run{f.table("c1")}, Remove: []string{"r1"}}
		res, err := f.node.Propose(context.Background(), fsm.TypeFlush, 0, fsm.Flush{Edit: e, Time: time.Now().Add(skew).UnixNano()})
		if err != nil {
			t.Fatal(err)
		}
		f.served.Store(res.(fsm.FlushResult).Generation)
		c := newCollector(f.w)
		ctx := context.Background()
		c.collect(ctx)
		if !f.exists(r1) {
			t.Fatalf("proposer's clock %v: deleted at first sight", skew)
		}
		time.Sleep(testGrace)
		c.collect(ctx)
		if f.exists(r1) {
			t.Fatalf("proposer's clock %v: still there a grace after this collector first saw it", skew)
		}
	}
}

// A write path that ends (its leadership lost, or stopped) removes the
// local meta of the tables it uploaded and never published, and keeps
// those of the manifest and of the garbage list: nothing else removed
// them while the process ran (found by review).
func TestWritePathForgetsItsUnpublishedTables(t *testing.T) {
	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cat := lsm.NewCatalog(dir, store)
	ctx := context.Background()
	run := func(name string) lsm.Run {
		r, err := lsm.WriteRun(ctx, store, cat, lsm.TreeNames, lsm.RunDelta, 0, lsm.NameRecords(nil, link.NameRKey, 1, name))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	publish := func(add []lsm.Run, remove []string) {
		e := lsm.Edit{Base: node.FSM.Manifest().Generation, Add: add, Remove: remove}
		if _, err := node.Propose(ctx, fsm.TypeFlush, 0, fsm.Flush{Edit: e, Time: time.Now().UnixNano()}); err != nil {
			t.Fatal(err)
		}
	}
	replaced, live, unpublished := run("replaced"), run("live"), run("unpublished")
	publish([]lsm.Run{replaced}, nil)
	publish([]lsm.Run{live}, []string{replaced.ID}) // replaced waits in the garbage list
	local := func(r lsm.Run) bool {
		_, err := os.Stat(filepath.Join(dir, "tables", string(r.Tree), r.Tables[0].ID+".meta"))
		return err == nil
	}
	if !local(replaced) || !local(live) || !local(unpublished) {
		t.Fatal("the uploads' local meta is missing before the write path runs")
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: cat, FlushInterval: 20 * time.Millisecond}}
	go func() { done <- r.Run(wctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if local(unpublished) {
		t.Error("the local meta of a table never published is still there")
	}
	if !local(live) || !local(replaced) {
		t.Errorf("a published table's local meta went: live %v, replaced (garbage) %v", local(live), local(replaced))
	}
	// A table forgotten that a view needs after all is fetched again.
	if _, err := cat.Load(ctx, lsm.TreeNames, unpublished.Tables[0]); err != nil {
		t.Fatalf("load a forgotten table: %v", err)
	}
}
