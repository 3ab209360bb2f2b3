package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eddy-backlinks/eddy/cluster"
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
		Sources: []Source{g.js}, CompactionInterval: 50 * time.Millisecond, CompactionFanIn: 4, ShardTargetBytes: 2 << 10}
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
	data, meta := lsm.TableKeys(lsm.TreeLinks, victim.ID)
	if err := os.Remove(filepath.Join(g.dir, filepath.FromSlash(meta))); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(g.dir, filepath.FromSlash(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.dir, filepath.FromSlash(data)), b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
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
	if _, err := RequestDropTables(ctx, g.node, "nope", []string{victim.ID}); !errors.Is(err, ErrNotInIndex) {
		t.Fatalf("a request naming an unknown tree: %v, want ErrNotInIndex", err)
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
	waitFor(t, "the drop", time.Minute, func() error {
		if p := DropsPending(g.node.FSM); p != nil {
			return fmt.Errorf("pending %v", p)
		}
		return nil
	})
	var merged []lsm.Run // the new write path may have flushed a few links beside them
	for _, r := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		if r.Kind == lsm.RunCompacted {
			merged = append(merged, r)
		}
	}
	if len(merged) != 1 || merged[0].ID == run.ID || merged[0].Records() != run.Records()-victim.Records {
		t.Fatalf("merged links runs after the drop: %d, the first %s of %d records; want one new run of %d", len(merged), merged[0].ID, merged[0].Records(), run.Records()-victim.Records)
	}
	if n, r := testutil.ToFloat64(g.metrics.TablesDropped.WithLabelValues("links")), testutil.ToFloat64(g.metrics.TablesDroppedLinks.WithLabelValues("links")); n != 1 || r != float64(victim.Records) {
		t.Fatalf("eddy_tables_dropped_total %v, records %v; want 1 and %d", n, r, victim.Records)
	}
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
	merged := g.node.FSM.Manifest().RunsOf(lsm.TreeLinks)
	g.world.Step(40)
	g.waitStream()
	var flush lsm.Run
	for _, run := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		if run.Kind == lsm.RunDelta {
			flush = run
		}
	}
	if flush.ID == "" {
		t.Fatal("no flush after the full compaction")
	}
	tables, err := RequestDropTables(ctx, g.node, lsm.TreeLinks, []string{flush.ID})
	if err != nil || len(tables) != 1 || tables[0].Table != flush.Tables[0].ID {
		t.Fatalf("drop of run %s: %+v, %v", flush.ID, tables, err)
	}
	waitFor(t, "the drop", time.Minute, func() error {
		if p := DropsPending(g.node.FSM); p != nil {
			return fmt.Errorf("pending %v", p)
		}
		return nil
	})
	m := g.node.FSM.Manifest()
	for _, run := range m.RunsOf(lsm.TreeLinks) {
		if run.ID == flush.ID || run.Records() == flush.Records() && run.Kind == lsm.RunCompacted && !slices.ContainsFunc(merged, func(r lsm.Run) bool { return r.ID == run.ID }) {
			t.Fatalf("run %s (%d records) after the drop of run %s: want it gone with nothing in its place", run.ID, run.Records(), flush.ID)
		}
	}
	if n, r := testutil.ToFloat64(g.metrics.TablesDropped.WithLabelValues("links")), testutil.ToFloat64(g.metrics.TablesDroppedLinks.WithLabelValues("links")); n != 1 || r != float64(flush.Records()) {
		t.Fatalf("eddy_tables_dropped_total %v, records %v; want 1 and %d", n, r, flush.Records())
	}
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
