package ingest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// dropRig is a write path on one node over a local bucket in dir, whose
// merges write tables of a few KiB (so a merged run has many), following
// a simulated network over Jetstream.
type dropRig struct {
	t       *testing.T
	dir     string
	store   objstore.Store
	node    *cluster.Node
	metrics *Metrics
	done    <-chan error
	world   *simnet.World
	js      *Jetstream
	fanIn   int // the write paths' compaction fan-in (4 if 0)
}

func newDropRig(t *testing.T, ctx context.Context) *dropRig {
	world, sim := servedWorld(t, 23)
	dir := t.TempDir()
	store, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	js, err := NewJetstream([]string{sim.JetstreamURL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &dropRig{t: t, dir: dir, store: store, node: oneNode(t), metrics: NewMetrics(), world: world, js: js}
	g.start(ctx)
	for range 10 { // a stream without a cursor starts at the network's head
		world.Step(100)
		time.Sleep(30 * time.Millisecond)
	}
	g.waitStream()
	return g
}

// start runs a write path with a catalog of its own (a new leader's: it
// holds no table's metadata yet).
func (g *dropRig) start(ctx context.Context) {
	r := &Runner{Config: Config{Node: g.node, Store: g.store, Catalog: lsm.NewCatalog(g.t.TempDir(), g.store), FlushInterval: 20 * time.Millisecond,
		MemtableBytes: 1 << 20, GCGrace: time.Nanosecond, Metrics: g.metrics, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{g.t}})},
		Sources: []Source{g.js}, CompactionInterval: 50 * time.Millisecond, CompactionFanIn: cmp.Or(g.fanIn, 4), ShardTargetBytes: 2 << 10}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	g.done = done
}

// compactAll asks for a full compaction and waits until every tree is
// merged.
func (g *dropRig) compactAll(ctx context.Context) {
	g.t.Helper()
	if _, err := RequestFullCompaction(ctx, g.node); err != nil {
		g.t.Fatal(err)
	}
	waitFor(g.t, "the full compaction", 2*time.Minute, func() error {
		if p := FullCompactionPending(g.node.FSM); len(p) > 0 {
			return fmt.Errorf("pending %v", p)
		}
		return nil
	})
}

// answers reads every model target's links, key by key, from the
// manifest as it is now through a fresh catalog (a node that never saw
// the index): by key, each key's links in order.
func (g *dropRig) answers(ctx context.Context) (map[string][]string, error) {
	m := g.node.FSM.Manifest()
	view, err := lsm.OpenView(ctx, lsm.NewCatalog(g.t.TempDir(), g.store), m)
	if err != nil {
		return nil, err
	}
	reader := lsm.NewReader(g.store, nil)
	codec := &link.Codec{Outlines: g.node.FSM, Names: lsm.NewNameMap(reader, lsm.Views(func() *lsm.View { return view }), 0)}
	out := map[string][]string{}
	for target := range g.world.LiveLinks() {
		tg, err := link.ParseTarget(target)
		if err != nil {
			return nil, err
		}
		keys, err := codec.TargetKeys(&tg)
		if err != nil {
			return nil, err
		}
		for i, id := range keys {
			ls, _, err := reader.All(ctx, view, id, lsm.Filter{})
			if err != nil {
				return nil, fmt.Errorf("target %s: %w", target, err)
			}
			var got []string
			for _, l := range ls {
				got = append(got, fmt.Sprint(l.Source, l.Location))
			}
			slices.Sort(got)
			out[fmt.Sprint(target, " ", i)] = got
		}
	}
	return out, nil
}

// waitStream waits until the write path has published the whole network.
func (g *dropRig) waitStream() {
	g.t.Helper()
	waitFor(g.t, "the stream", 60*time.Second, func() error {
		if sc := g.node.FSM.Cursor(g.js.Name()); sc != wantCursor(g.world, g.js) {
			return fmt.Errorf("stream cursor %q", sc)
		}
		return nil
	})
}

// waitDrops waits until no drop request is pending.
func (g *dropRig) waitDrops(what string) {
	g.t.Helper()
	waitFor(g.t, what, time.Minute, func() error {
		if p := DropsPending(g.node.FSM); p != nil {
			return fmt.Errorf("pending %v", p)
		}
		return nil
	})
}

// waitDropped waits until the metrics count tables dropped and the
// records they held, and checks that they stay so for a few more looks.
func (g *dropRig) waitDropped(tables, records float64) {
	g.t.Helper()
	got := func() (float64, float64) {
		return testutil.ToFloat64(g.metrics.TablesDropped.WithLabelValues("links")), testutil.ToFloat64(g.metrics.TablesDroppedLinks.WithLabelValues("links"))
	}
	waitFor(g.t, "the drop counted", time.Minute, func() error {
		if n, r := got(); n != tables || r != records {
			return fmt.Errorf("eddy_tables_dropped_total %v, records %v; want %v and %v", n, r, tables, records)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if n, r := got(); n != tables || r != records {
		g.t.Fatalf("eddy_tables_dropped_total %v, records %v after a few more looks; want %v and %v, once", n, r, tables, records)
	}
}

// stop ends the write path.
func (g *dropRig) stop(cancel func()) {
	g.t.Helper()
	cancel()
	if err := <-g.done; err != nil && !errors.Is(err, context.Canceled) {
		g.t.Fatal(err)
	}
}

// A table whose objects the bucket lost (its metadata gone, its data cut
// short) stops every node that opens the index afresh, and the merges of
// its run; dropped at an operator's request, the run's other tables are
// merged into a new run: every target's answer is then as before or, for
// the targets of the dropped table, empty; the dropped table is counted,
// collected as garbage, and the index merges as usual again.
func TestDropDamagedTable(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newDropRig(t, ctx)
	g.compactAll(ctx)
	before, err := g.answers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	runs := g.node.FSM.Manifest().RunsOf(lsm.TreeLinks)
	if len(runs) != 1 || len(runs[0].Tables) < 4 {
		t.Fatalf("after the full compaction %d links runs, the first of %d tables: want one of several", len(runs), len(runs[0].Tables))
	}
	run := runs[0]
	victim := run.Tables[len(run.Tables)/2]
	g.damage(victim.ID, true)
	data, _ := lsm.TableKeys(lsm.TreeLinks, victim.ID)
	if _, err := g.answers(ctx); err == nil {
		t.Fatal("a node that never saw the index opened it without the lost table's metadata")
	}
	// A new leader, which never held the lost table's metadata.
	g.stop(cancel)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g.start(ctx)

	if _, err := RequestDropTables(ctx, g.node, lsm.TreeLinks, []string{victim.ID, "00112233445566778899aabbccddeeff"}); !errors.Is(err, ErrNotInIndex) {
		t.Fatalf("a request naming a table not in the index: %v, want ErrNotInIndex", err)
	}
	for _, tree := range []lsm.Tree{"nope", lsm.TreeRevocations, lsm.TreeNames} {
		if _, err := RequestDropTables(ctx, g.node, tree, []string{victim.ID}); !errors.Is(err, cluster.ErrBadRequest) {
			t.Fatalf("a request naming tree %q: %v, want ErrBadRequest: only links tables can be dropped", tree, err)
		}
	}
	if p := DropsPending(g.node.FSM); p != nil {
		t.Fatalf("refused requests left %v pending", p)
	}
	tables, err := RequestDropTables(ctx, g.node, lsm.TreeLinks, []string{victim.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0].Table != victim.ID || tables[0].Run != run.ID || tables[0].Records != victim.Records {
		t.Fatalf("request answered %+v, want table %s of run %s, %d records", tables, victim.ID, run.ID, victim.Records)
	}
	g.waitDrops("the drop")
	var merged []lsm.Run // the new write path may have flushed a few links beside them
	for _, r := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		if r.Kind == lsm.RunCompacted {
			merged = append(merged, r)
		}
	}
	if len(merged) != 1 || merged[0].ID == run.ID || merged[0].Records() != run.Records()-victim.Records {
		t.Fatalf("merged links runs after the drop: %d, the first %s of %d records; want one new run of %d", len(merged), merged[0].ID, merged[0].Records(), run.Records()-victim.Records)
	}
	g.waitDropped(1, float64(victim.Records))
	after, err := g.answers(ctx)
	if err != nil {
		t.Fatalf("the index without the dropped table: %v", err)
	}
	kept, gone := 0, 0
	for k, want := range before {
		got := after[k]
		switch {
		case slices.Equal(got, want):
			if len(want) > 0 {
				kept++
			}
		case !slices.ContainsFunc(got, func(l string) bool { return !slices.Contains(want, l) }):
			// The key's links were in the dropped table (a few may be
			// back: the new leader's stream resumed a little before its
			// cursor and wrote them again).
			gone++
		default:
			t.Fatalf("key %s: %d links, %d before the drop, not all of them among those", k, len(got), len(want))
		}
	}
	t.Logf("%d tables in the run, %d records dropped: %d keys answered as before, %d lost their links", len(run.Tables), victim.Records, kept, gone)
	if gone == 0 || kept == 0 {
		t.Fatalf("%d keys kept their links, %d lost them: want some of each", kept, gone)
	}
	waitFor(t, "the dropped table collected", time.Minute, func() error {
		if _, err := os.Stat(filepath.Join(g.dir, filepath.FromSlash(data))); !os.IsNotExist(err) {
			return fmt.Errorf("its data object: %v", err)
		}
		return nil
	})
	// The index goes on: the network moves, and a full compaction (which
	// the damaged table had made fail) is published.
	g.world.Step(300)
	g.waitStream()
	g.compactAll(ctx)
	if _, err := g.answers(ctx); err != nil {
		t.Fatal(err)
	}
	g.stop(cancel)
}

// A drop request may name a run: every table of it goes. A flush's run
// (one table) dropped whole leaves the manifest with no run in its place.
// A request withdrawn before a write path carries it out drops nothing.
func TestDropWholeRunAndWithdraw(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newDropRig(t, ctx)
	g.compactAll(ctx)
	g.world.Step(40)
	g.waitStream()
	// Asked with no write path running, so that no ordinary merge takes
	// the flush first.
	g.stop(cancel)
	before := g.node.FSM.Manifest().RunsOf(lsm.TreeLinks)
	var flush lsm.Run
	for _, run := range before {
		if run.Kind == lsm.RunDelta {
			flush = run
		}
	}
	if flush.ID == "" {
		t.Fatal("no flush after the full compaction")
	}
	tables, err := RequestDropTables(context.Background(), g.node, lsm.TreeLinks, []string{flush.ID})
	if err != nil || len(tables) != 1 || tables[0].Table != flush.Tables[0].ID {
		t.Fatalf("drop of run %s: %+v, %v", flush.ID, tables, err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g.start(ctx)
	g.waitDrops("the drop")
	m := g.node.FSM.Manifest()
	for _, run := range m.RunsOf(lsm.TreeLinks) {
		if run.ID == flush.ID || run.Records() == flush.Records() && run.Kind == lsm.RunCompacted && !slices.ContainsFunc(before, func(r lsm.Run) bool { return r.ID == run.ID }) {
			t.Fatalf("run %s (%d records) after the drop of run %s: want it gone with nothing in its place", run.ID, run.Records(), flush.ID)
		}
	}
	g.waitDropped(1, float64(flush.Records()))
	g.stop(cancel)

	// No write path now: a request stays pending until withdrawn.
	ctx = context.Background()
	victim := g.node.FSM.Manifest().RunsOf(lsm.TreeLinks)[0].Tables[0]
	if _, err := RequestDropTables(ctx, g.node, lsm.TreeLinks, []string{victim.ID}); err != nil {
		t.Fatal(err)
	}
	if p := DropsPending(g.node.FSM); !slices.Equal(p[lsm.TreeLinks], []string{victim.ID}) {
		t.Fatalf("pending %v, want [%s]", p, victim.ID)
	}
	ids, err := CancelDropTables(ctx, g.node, lsm.TreeLinks, nil)
	if err != nil || !slices.Equal(ids, []string{victim.ID}) {
		t.Fatalf("withdrew %v, %v", ids, err)
	}
	if p := DropsPending(g.node.FSM); p != nil {
		t.Fatalf("pending after the withdrawal: %v", p)
	}
}

// damage removes a table's metadata object (with meta) and cuts its data
// object in half.
func (g *dropRig) damage(id string, meta bool) {
	g.t.Helper()
	data, mk := lsm.TableKeys(lsm.TreeLinks, id)
	if meta {
		if err := os.Remove(filepath.Join(g.dir, filepath.FromSlash(mk))); err != nil {
			g.t.Fatal(err)
		}
	}
	p := filepath.Join(g.dir, filepath.FromSlash(data))
	b, err := os.ReadFile(p)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(p, b[:len(b)/2], 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// Two runs each with a table lost whole, both asked at once, carried out
// by a new leader that never fetched either table's metadata: each drop
// merge reads its own run only, so neither stops the other. (Each read
// the whole index but its own dropped tables, so each failed on the
// other's for good.) A run of a single table is dropped whole, asked by
// its run's ID.
func TestDropTwoRunsWithLostTables(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newDropRig(t, ctx)
	g.compactAll(ctx)
	g.world.Step(40)
	g.waitStream()
	g.stop(cancel)
	var r1, r2 lsm.Run // a merged run of several tables, a flush
	for _, run := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		switch {
		case run.Kind == lsm.RunCompacted && len(run.Tables) >= 4 && r1.ID == "":
			r1 = run
		case run.Kind == lsm.RunDelta:
			r2 = run
		}
	}
	if r1.ID == "" || r2.ID == "" {
		t.Fatalf("links runs %+v: want a merged one of several tables and a flush", g.node.FSM.Manifest().RunsOf(lsm.TreeLinks))
	}
	v1, v2 := r1.Tables[len(r1.Tables)/2], r2.Tables[0]
	g.damage(v1.ID, true)
	g.damage(v2.ID, true)
	if _, err := RequestDropTables(context.Background(), g.node, lsm.TreeLinks, []string{v1.ID, r2.ID}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g.start(ctx) // a new leader: a fresh catalog
	g.waitDrops("both drops")
	g.waitDropped(2, float64(v1.Records+v2.Records))
	if _, err := g.answers(ctx); err != nil {
		t.Fatalf("the index without the dropped tables: %v", err)
	}
	g.stop(cancel)
}

// A request that names a whole run is one entry: every table of the run
// is dropped, never part of them. (Proposed a table at a time, a look of
// the compaction loop between two proposals dropped the tables asked so
// far, kept the others in a new run and took the rest of the request as
// done.) A request for a run that another merge took first is deleted as
// merged away, without counting a drop.
func TestDropRequestIsOneEntry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newDropRig(t, ctx)
	g.compactAll(ctx)
	g.stop(cancel)  // the request asked with no write path running: nothing else moves the manifest
	var run lsm.Run // the full compaction's
	for _, r := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		if r.Records() > run.Records() {
			run = r
		}
	}
	gen := g.node.FSM.Manifest().Generation
	if _, err := RequestDropTables(context.Background(), g.node, lsm.TreeLinks, []string{run.ID}); err != nil {
		t.Fatal(err)
	}
	if p := DropsPending(g.node.FSM); len(p[lsm.TreeLinks]) != len(run.Tables) || g.node.FSM.Manifest().Generation != gen {
		t.Fatalf("after one request: pending %v (want the run's %d tables at once)", p, len(run.Tables))
	}
	// One entry: a look of a write path never sees part of the request.
	if n := len(g.node.FSM.SettingsWithPrefix(dropTablesKey)); n != 1 {
		t.Fatalf("the request of a run of %d tables is %d settings, want one", len(run.Tables), n)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g.start(ctx)
	g.waitDrops("the drop")
	for _, r := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		if slices.ContainsFunc(r.Tables, func(x lsm.TableRef) bool { return slices.Contains(run.Tables, x) }) {
			t.Fatalf("run %s holds a table of the run dropped whole", r.ID)
		}
	}
	g.waitDropped(float64(len(run.Tables)), float64(run.Records()))
	g.world.Step(40) // a flush for the second part
	g.waitStream()
	g.stop(cancel)

	// A run merged away by another merge before its drop: the request is
	// deleted, nothing counted.
	before := testutil.ToFloat64(g.metrics.TablesDropped.WithLabelValues("links"))
	runs := g.node.FSM.Manifest().RunsOf(lsm.TreeLinks)
	if len(runs) == 0 {
		t.Fatal("no links run left")
	}
	if _, err := RequestDropTables(context.Background(), g.node, lsm.TreeLinks, []string{runs[0].ID}); err != nil {
		t.Fatal(err)
	}
	// The merge of the whole tree, published by a flush as a compaction
	// that did not carry the drop out.
	m := g.node.FSM.Manifest()
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	if _, err := g.node.Propose(context.Background(), fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: m.Generation, Remove: ids}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g.start(ctx)
	g.waitDrops("the request deleted")
	if n := testutil.ToFloat64(g.metrics.TablesDropped.WithLabelValues("links")); n != before {
		t.Fatalf("eddy_tables_dropped_total %v after a run merged away, want %v", n, before)
	}
	g.stop(cancel)
}

// A request withdrawn by its run's ID withdraws every table of it; by a
// table's ID, that table alone.
func TestCancelDropByRunOrTable(t *testing.T) {
	node := oneNode(t)
	ctx := context.Background()
	run := lsm.Run{ID: "ab01", Tree: lsm.TreeLinks, Kind: lsm.RunCompacted, Tables: []lsm.TableRef{{ID: "cd02", Records: 7, DataBytes: 100, ShardBits: 1}, {ID: "cd03", Records: 7, DataBytes: 100, ShardBits: 1, Shard: 1}}}
	if _, err := node.Propose(ctx, fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: node.FSM.Manifest().Generation, Add: []lsm.Run{run}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := RequestDropTables(ctx, node, lsm.TreeLinks, []string{"ab01"}); err != nil {
		t.Fatal(err)
	}
	ids, err := CancelDropTables(ctx, node, lsm.TreeLinks, []string{"cd03"})
	if err != nil || !slices.Equal(ids, []string{"cd03"}) || !slices.Equal(DropsPending(node.FSM)[lsm.TreeLinks], []string{"cd02"}) {
		t.Fatalf("withdrew %v (%v); pending %v, want cd02", ids, err, DropsPending(node.FSM))
	}
	if _, err := RequestDropTables(ctx, node, lsm.TreeLinks, []string{"cd03"}); err != nil {
		t.Fatal(err)
	}
	ids, err = CancelDropTables(ctx, node, lsm.TreeLinks, []string{"ab01"})
	if err != nil || !slices.Equal(ids, []string{"cd02", "cd03"}) || DropsPending(node.FSM) != nil {
		t.Fatalf("withdrew %v (%v); pending %v, want none", ids, err, DropsPending(node.FSM))
	}
}

// The compaction loop reads the manifest before the requests: a request
// asked on a newer manifest (its run published in between) is not taken
// as done because the loop's manifest lacks its run.
func TestDropRequestNewerThanTheLook(t *testing.T) {
	node := oneNode(t)
	ctx := context.Background()
	add := func(run lsm.Run) {
		if _, err := node.Propose(ctx, fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: node.FSM.Manifest().Generation, Add: []lsm.Run{run}}}); err != nil {
			t.Fatal(err)
		}
	}
	add(lsm.Run{ID: "a1", Tree: lsm.TreeLinks, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "t1", Records: 1, DataBytes: 10}}})
	m := node.FSM.Manifest() // the loop's look
	add(lsm.Run{ID: "a2", Tree: lsm.TreeLinks, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "t2", Records: 1, DataBytes: 10}}})
	if _, err := RequestDropTables(ctx, node, lsm.TreeLinks, []string{"t2"}); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Config: Config{Node: node}}
	w := &Writer{log: hclog.NewNullLogger(), metrics: NewMetrics()}
	var lanes [2]lane
	var merges sync.WaitGroup
	pending := r.startDrop(ctx, w, m, &lanes, func(string) bool { return false }, lsm.TreeLinks, func(string, string) bool { return false }, make(chan mergeResult, 2), &merges)
	merges.Wait()
	if !pending || DropsPending(node.FSM) == nil {
		t.Fatalf("the request for t2 (in the manifest, not dropped) was taken as done (pending %v)", pending)
	}
}

// A drop's mark whose request is gone (withdrawn once the merge was
// handed to the flush, or deleted by a leader lost before it flushed the
// mark's clearing) is counted, logged and cleared by the next write path,
// once: it had stayed in the state for good. Asking again for tables
// already asked changes nothing (a running drop merge would have been
// thrown away), and a request that names no table it can read is deleted
// (it could not be withdrawn, and would rewrite its run for nothing).
func TestDropMarksAndRequestsSettle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newDropRig(t, ctx)
	g.compactAll(ctx)
	g.world.Step(40)
	g.waitStream()
	g.stop(cancel)
	bg := context.Background()
	// The full compaction's run and a flush.
	var gone, kept lsm.Run
	for _, run := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		switch {
		case run.Kind == lsm.RunCompacted && run.Records() > kept.Records():
			kept = run
		case run.Kind == lsm.RunDelta:
			gone = run
		}
	}
	if gone.ID == "" || kept.ID == "" {
		t.Fatalf("links runs %+v: want a merged one and a flush", g.node.FSM.Manifest().RunsOf(lsm.TreeLinks))
	}

	// Asked twice, a flush between: the request is the same.
	if _, err := RequestDropTables(bg, g.node, lsm.TreeLinks, []string{kept.Tables[0].ID}); err != nil {
		t.Fatal(err)
	}
	key := dropKey(dropTablesKey, lsm.TreeLinks, kept.ID)
	asked := g.node.FSM.Setting(key)
	if _, err := g.node.Propose(bg, fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: g.node.FSM.Manifest().Generation}, Cursors: map[string]string{"other": "1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := RequestDropTables(bg, g.node, lsm.TreeLinks, []string{kept.Tables[0].ID}); err != nil {
		t.Fatal(err)
	}
	if again := g.node.FSM.Setting(key); again != asked {
		t.Fatalf("asked again for the same table: %s, was %s", again, asked)
	}
	// Replaced by a request that reads as none.
	if _, err := g.node.Propose(bg, fsm.TypeSetting, 0, &fsm.Setting{Key: key, Value: `{"generation":1,"tables":[]}`}); err != nil {
		t.Fatal(err)
	}
	// The run of the other request published as dropped, with its mark,
	// and the request withdrawn.
	value, err := json.Marshal(dropRequest{Generation: g.node.FSM.Manifest().Generation, Tables: gone.Tables})
	if err != nil {
		t.Fatal(err)
	}
	mark := dropKey(dropDoneKey, lsm.TreeLinks, gone.ID)
	if _, err := g.node.Propose(bg, fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: g.node.FSM.Manifest().Generation, Remove: []string{gone.ID}}, Cursors: map[string]string{mark: string(value)}}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel = context.WithCancel(bg)
	defer cancel()
	g.fanIn = 64 // no ordinary merge: the runs of this small index are all of the lowest tier
	g.start(ctx)
	g.waitDrops("the request of no table deleted")
	waitFor(t, "the mark cleared", time.Minute, func() error {
		if v := g.node.FSM.Cursor(mark); v != "" {
			return fmt.Errorf("mark %s", v)
		}
		return nil
	})
	g.waitDropped(float64(len(gone.Tables)), float64(gone.Records()))
	if !slices.ContainsFunc(g.node.FSM.Manifest().RunsOf(lsm.TreeLinks), func(r lsm.Run) bool { return r.ID == kept.ID }) {
		t.Fatal("the run of the request of no table was rewritten")
	}
	g.stop(cancel)
}

// A new leader whose catalog never held a links table lost from the
// bucket, before any drop is asked: what reads nothing of that table goes
// on. The writer's map lookups (a record key that is not a TID) and the
// merges of other runs each opened a view of the whole manifest, so the
// first stopped the writer and every merge failed (found by review).
func TestLostTableStopsNothingElse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newDropRig(t, ctx)
	g.compactAll(ctx)
	g.stop(cancel)
	var lost lsm.Run
	for _, run := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		if run.Kind == lsm.RunCompacted && len(run.Tables) >= 4 {
			lost = run
		}
	}
	if lost.ID == "" {
		t.Fatalf("links runs %+v: want a merged one of several tables", g.node.FSM.Manifest().RunsOf(lsm.TreeLinks))
	}
	g.damage(lost.Tables[len(lost.Tables)/2].ID, true)
	w, err := NewWriter(context.Background(), Config{Node: g.node, Store: g.store, Catalog: lsm.NewCatalog(t.TempDir(), g.store)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Codec().RKey("self", true); err != nil {
		t.Fatalf("a names lookup on a new leader: %v", err)
	}
	// A new leader's write path goes on ingesting, and merges its flushes.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	g.start(ctx)
	for range 8 {
		g.world.Step(100)
		g.waitStream()
	}
	waitFor(t, "a merge of the new flushes", time.Minute, func() error {
		for _, run := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
			if run.Kind == lsm.RunCompacted && run.ID != lost.ID {
				return nil
			}
		}
		return fmt.Errorf("links runs %d, none merged but the lost table's", len(g.node.FSM.Manifest().RunsOf(lsm.TreeLinks)))
	})
	g.stop(cancel)
}
