package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gatedStore holds back every Get of the data of the tables it is told
// to, until it is opened; while fail is set, it refuses them instead.
type gatedStore struct {
	objstore.Store
	mu      sync.Mutex
	held    map[string]bool // table IDs
	fail    error
	waiting chan struct{} // closed at the first Get held back
	open    chan struct{}
}

func (s *gatedStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	hold := false
	for id := range s.held {
		if strings.HasSuffix(key, id+".data") {
			hold = true
		}
	}
	if hold {
		select {
		case <-s.waiting:
		default:
			close(s.waiting)
		}
	}
	fail := s.fail
	s.mu.Unlock()
	if hold && fail != nil {
		return nil, fail
	}
	if hold {
		select {
		case <-s.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Get(ctx, key)
}

// gatedRig is a write path on one node whose store is a gatedStore,
// stopped after a backfill and a live tail that left the links tree at
// least two runs.
type gatedRig struct {
	world   *simnet.World
	node    *cluster.Node
	store   *gatedStore
	js      Source
	r       *Runner
	metrics *Metrics
}

func newGatedRig(t *testing.T) *gatedRig {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	world, sim := servedWorld(t, 11)
	node := oneNode(t)
	disk, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &gatedStore{Store: disk, held: map[string]bool{}, waiting: make(chan struct{}), open: make(chan struct{})}
	bf := &Backfill{Relay: sim.RelayURL(), PLC: sim.PLCURL(), DIDWeb: sim.PLCURL(), NoCompaction: true}
	js, err := NewJetstream([]string{sim.JetstreamURL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics()
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), FlushInterval: 50 * time.Millisecond,
		MemtableBytes: 1 << 20, GCGrace: time.Nanosecond, Metrics: metrics, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})},
		Sources: []Source{bf, js}, CompactionInterval: 50 * time.Millisecond, CompactionFanIn: 2}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for range 5 {
		world.Step(200)
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, "the backfill", 60*time.Second, func() error {
		if bc, sc := node.FSM.Cursor(bf.Name()), node.FSM.Cursor(js.Name()); !Done(bc) || sc != wantCursor(world, js) {
			return fmt.Errorf("backfill cursor %q, stream cursor %q", bc, sc)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// A tree of one merged run has nothing to compact (the request is done
	// without a read): a loaded host's many flushes can merge the backfill
	// down to one run. Then the network goes on until a flush adds another.
	for try := 0; len(node.FSM.Manifest().RunsOf(lsm.TreeLinks)) < 2; try++ {
		if try == 10 {
			t.Fatal("the links tree never kept two runs across ten flushes")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // also if waitFor fails
		go func() { done <- r.Run(ctx) }()
		world.Step(50)
		waitFor(t, "a flush beside the lone run", 30*time.Second, func() error {
			if got := len(node.FSM.Manifest().RunsOf(lsm.TreeLinks)); got < 2 {
				return fmt.Errorf("%d links runs", got)
			}
			return nil
		})
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	return &gatedRig{world: world, node: node, store: store, js: js, r: r, metrics: metrics}
}

// holdLinks holds back (or, with fail, refuses) the data reads of every
// links table there is, and returns the links runs.
func (g *gatedRig) holdLinks(fail error) map[string]bool {
	runs := map[string]bool{}
	g.store.mu.Lock()
	defer g.store.mu.Unlock()
	g.store.fail = fail
	for _, run := range g.node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
		runs[run.ID] = true
		for _, tb := range run.Tables {
			g.store.held[tb.ID] = true
		}
	}
	return runs
}

// While a merge of the big lane cannot finish (a full compaction whose
// input reads are held back, as a merge of hours would be), the runs
// flushed meanwhile are still merged by the small lane, which catches up
// with them while the full compaction is still held; once the reads go
// on, the full compaction is published and the index equals the model.
func TestSmallMergesGoOnBesideABigOne(t *testing.T) {
	g := newGatedRig(t)
	world, node, store, js, r := g.world, g.node, g.store, g.js, g.r
	// Hold back the reads of every links table there is, and ask for a
	// full compaction: the big lane takes the tree and waits. Both while
	// no write path runs (as across a leader change), so that no merge of
	// the small lane has started on a held table before the request.
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := g.holdLinks(nil)
	if len(before) == 0 {
		t.Fatal("no links run after the backfill")
	}
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	go func() { done <- r.Run(ctx) }()
	select {
	case <-store.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the full compaction never read its inputs")
	}
	// The network goes on: every flush adds a links run.
	newerRuns := func() (newer int, merged bool) {
		for _, run := range node.FSM.Manifest().RunsOf(lsm.TreeLinks) {
			if !before[run.ID] {
				newer++
				merged = merged || run.Kind == lsm.RunCompacted
			}
		}
		return newer, merged
	}
	most := 0
	for range 40 {
		world.Step(50)
		time.Sleep(60 * time.Millisecond)
		newer, _ := newerRuns()
		most = max(most, newer)
	}
	// Fan-in 2 keeps about one run a tier; 40 flushes of 50 steps make a
	// few tiers. The flushes come every 50 ms whatever the load, the merges
	// as fast as the host allows (a loaded host under -race saw 20 runs at
	// once), so the small lane gets time to catch up, with the full
	// compaction still held: a small lane that waited for it would not.
	waitFor(t, "the small lane", 60*time.Second, func() error {
		if newer, merged := newerRuns(); !merged || newer > 12 {
			return fmt.Errorf("%d runs flushed during the full compaction, merged %v (at most %d at once)", newer, merged, most)
		}
		return nil
	})
	if !stillAll(node.FSM.Manifest(), before) {
		t.Fatal("a run whose reads are held back left the manifest")
	}
	close(store.open)
	waitFor(t, "the full compaction", 60*time.Second, func() error {
		if p := FullCompactionPending(node.FSM); len(p) != 0 {
			return fmt.Errorf("trees %v pending", p)
		}
		if stillAll(node.FSM.Manifest(), before) {
			return errors.New("the held runs are still there")
		}
		if sc := node.FSM.Cursor(js.Name()); sc != wantCursor(world, js) {
			return fmt.Errorf("stream cursor %q", sc)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("runs flushed beside the full compaction: at most %d at once", most)
	compareModel(t, node, store, world)
	if done := testutil.ToFloat64(g.metrics.Compactions.WithLabelValues(string(lsm.TreeLinks), "done")); done < 2 {
		t.Errorf("eddy_compactions_total{tree=links,result=done} %v, want the full compaction and a small merge at least", done)
	}
}

// A full compaction whose inputs cannot be read fails, is counted and
// logged, and is tried again at the next look until the store heals:
// then it is published, and the index equals the model.
func TestFailedFullCompactionIsTriedAgain(t *testing.T) {
	g := newGatedRig(t)
	close(g.store.open)
	before := g.holdLinks(errors.New("injected: the store refuses the table"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := RequestFullCompaction(ctx, g.node); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.r.Run(ctx) }()
	failed := func() float64 {
		return testutil.ToFloat64(g.metrics.Compactions.WithLabelValues(string(lsm.TreeLinks), "failed"))
	}
	waitFor(t, "failed merges", 30*time.Second, func() error {
		if f := failed(); f < 3 {
			return fmt.Errorf("%v failed", f)
		}
		return nil
	})
	if !stillAll(g.node.FSM.Manifest(), before) || len(FullCompactionPending(g.node.FSM)) == 0 {
		t.Fatal("a failed full compaction changed the manifest or ended its request")
	}
	g.store.mu.Lock()
	g.store.fail = nil
	g.store.mu.Unlock()
	waitFor(t, "the full compaction", 60*time.Second, func() error {
		if p := FullCompactionPending(g.node.FSM); len(p) != 0 {
			return fmt.Errorf("trees %v pending", p)
		}
		if stillAll(g.node.FSM.Manifest(), before) {
			return errors.New("the runs are still there")
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	compareModel(t, g.node, g.store, g.world)
}

// stillAll reports whether every run of ids is still in m.
func stillAll(m *lsm.Manifest, ids map[string]bool) bool {
	n := 0
	for _, run := range m.Runs {
		if ids[run.ID] {
			n++
		}
	}
	return n == len(ids)
}

// TestPickLane: a merge goes to the lane of its size; while the small
// lane is busy, the idle big lane takes the smallest merge due of at
// least bigMergeBytes, so larger runs do not wait behind small merges;
// a busy lane gets nothing.
func TestPickLane(t *testing.T) {
	m := &lsm.Manifest{}
	add := func(sizes ...uint64) {
		for _, b := range sizes {
			id := fmt.Sprint(len(m.Runs))
			m.Runs = append(m.Runs, lsm.Run{ID: id, Tree: lsm.TreeLinks, Seq: uint64(len(m.Runs)), Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: id, DataBytes: b}}})
		}
	}
	add(8<<20, 8<<20)                                    // 0, 1: a small merge
	add(bigMergeBytes/2, bigMergeBytes/2, bigMergeBytes) // 2-4: a big one
	name := func(rs []lsm.Run, lane int) string {
		if rs == nil {
			return "none"
		}
		s := fmt.Sprint(lane, ":")
		for _, r := range rs {
			s += " " + r.ID
		}
		return s
	}
	for _, c := range []struct {
		smallBusy, bigBusy bool
		want               string
	}{
		{false, false, fmt.Sprint(laneSmall, ": 0 1")},
		{true, false, fmt.Sprint(laneBig, ": 2 3")},
		{false, true, fmt.Sprint(laneSmall, ": 0 1")},
		{true, true, "none"},
	} {
		if got := name(pickLane(m, lsm.TreeLinks, 2, c.smallBusy, c.bigBusy)); got != c.want {
			t.Errorf("small lane busy %v, big lane busy %v: %q, want %q", c.smallBusy, c.bigBusy, got, c.want)
		}
	}
	// Only small merges due: nothing for the big lane.
	m.Runs = m.Runs[:2]
	if got := name(pickLane(m, lsm.TreeLinks, 2, true, false)); got != "none" {
		t.Errorf("only a small merge due, small lane busy: %q, want none", got)
	}
	// Only a big merge due and the big lane busy: the small lane does
	// not take it.
	m.Runs = nil
	add(bigMergeBytes, bigMergeBytes)
	if got := name(pickLane(m, lsm.TreeLinks, 2, false, true)); got != "none" {
		t.Errorf("a big merge due, big lane busy: %q, want none", got)
	}
}

// Under steady ingest, every tree's runs are merged as they come, the
// names tree's too: a lane takes its next merge as soon as it hands one
// over, and the trees take turns. (A lane waiting for the flush that
// publishes its merge, and the trees in a fixed order, gave the last tree,
// names, one merge in forty minutes of a soak while its runs grew by the
// hundred.) Here a look comes once a second and a flush every 20 ms.
func TestEveryTreeCompactedUnderSteadyIngest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	world, node, metrics, done := steadyIngest(t, ctx, 13, t.TempDir(), time.Nanosecond, time.Second, 2)
	most := map[lsm.Tree]int{}
	for range 150 { // ~6 s
		world.Step(20)
		time.Sleep(40 * time.Millisecond)
		for _, tree := range []lsm.Tree{lsm.TreeLinks, lsm.TreeRevocations, lsm.TreeNames} {
			most[tree] = max(most[tree], len(node.FSM.Manifest().RunsOf(tree)))
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	for _, tree := range []lsm.Tree{lsm.TreeLinks, lsm.TreeRevocations, lsm.TreeNames} {
		merged := testutil.ToFloat64(metrics.Compactions.WithLabelValues(string(tree), "done"))
		t.Logf("%s: at most %d runs, %v merges", tree, most[tree], merged)
		if merged < 3 || most[tree] > 40 {
			t.Errorf("%s: at most %d runs, %v merges: not merged as its runs came", tree, most[tree], merged)
		}
	}
}

// A full compaction that fails every time (a damaged table in the bucket)
// is held back after each failure, and the tree merges as usual
// meanwhile: tried again at once, it took every run of the tree at each
// look, so no other merge of the tree ever started and its runs grew by
// hundreds a minute.
func TestFailingFullCompactionLetsTheTreeMerge(t *testing.T) {
	prevMin := fullRetryMin
	fullRetryMin = time.Hour
	t.Cleanup(func() { fullRetryMin = prevMin })
	// The revocations tree merges its newest runs into an older one by
	// size, so its largest run is left alone by the usual merges for a
	// while (a links tree this small is one tier, its oldest runs merged
	// first).
	const tree = lsm.TreeRevocations
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	world, node, metrics, done := steadyIngest(t, ctx, 17, dir, time.Hour, 100*time.Millisecond, 4)
	for range 30 {
		world.Step(100)
		time.Sleep(40 * time.Millisecond)
	}
	// settle waits until the write path is idle: no generation published
	// for a second (all of the network read, every merge due done).
	settle := func() {
		t.Helper()
		last, since := node.FSM.Manifest().Generation, time.Now()
		for deadline := time.Now().Add(2 * time.Minute); time.Since(since) < time.Second; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the write path never went idle")
			}
			if g := node.FSM.Manifest().Generation; g != last {
				last, since = g, time.Now()
			}
		}
	}
	// One big run of the tree (a full compaction that succeeds), then a
	// few small ones: the usual merges take the big run only once the
	// newer runs hold half its bytes, which the trickle below never
	// gives, however fast the host reads.
	settle()
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first full compaction", 2*time.Minute, func() error {
		if p := FullCompactionPending(node.FSM); len(p) > 0 {
			return fmt.Errorf("pending %v", p)
		}
		return nil
	})
	settle()
	for len(node.FSM.Manifest().RunsOf(tree)) < 2 { // a full compaction has two runs to merge
		world.Step(1)
		time.Sleep(40 * time.Millisecond)
	}
	// Damage a table of the tree's largest run (its data cut short), then
	// ask for a full compaction again: it reads that table, and fails.
	runs := node.FSM.Manifest().RunsOf(tree)
	largest := runs[0]
	for _, run := range runs {
		if run.Bytes() > largest.Bytes() {
			largest = run
		}
	}
	t.Logf("%s: %d runs; the largest of %d records", tree, len(runs), largest.Records())
	data, _ := lsm.TableKeys(tree, largest.Tables[0].ID)
	path := filepath.Join(dir, filepath.FromSlash(data))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	failed := func() float64 { return testutil.ToFloat64(metrics.Compactions.WithLabelValues(string(tree), "failed")) }
	mergedBefore := testutil.ToFloat64(metrics.Compactions.WithLabelValues(string(tree), "done"))
	most := 0
	for i := 0; i < 100 || failed() == 0; i++ { // ~4 s after the failure
		if i > 500 {
			t.Fatal("the full compaction never failed")
		}
		// A trickle: the runs it flushes never add up to half the damaged
		// run, so no usual merge takes it.
		world.Step(1)
		time.Sleep(40 * time.Millisecond)
		most = max(most, len(node.FSM.Manifest().RunsOf(tree)))
	}
	merged := testutil.ToFloat64(metrics.Compactions.WithLabelValues(string(tree), "done")) - mergedBefore
	tries := failed()
	t.Logf("%s: %v full compactions failed, %v merges since the request, at most %d runs", tree, tries, merged, most)
	if tries != 1 || merged < 3 || most > 40 {
		t.Fatalf("%s: %v failed tries (want 1: held back after it), %v merges, at most %d runs: the tree did not merge as usual", tree, tries, merged, most)
	}
	// A new request (an operator asking again) is not held back by the
	// failure of the one before.
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new request tried", 10*time.Second, func() error {
		if failed() < 2 {
			return fmt.Errorf("%v failed tries", failed())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// steadyIngest runs a write path on one node and a local store in dir,
// following a simulated network of seed over Jetstream, flushing every
// 20 ms and looking for merges every interval (of fanIn runs); it returns
// the network to step, the node, the metrics and Run's result.
func steadyIngest(t *testing.T, ctx context.Context, seed int64, dir string, gcGrace, interval time.Duration, fanIn int) (*simnet.World, *cluster.Node, *Metrics, <-chan error) {
	t.Helper()
	world, sim := servedWorld(t, seed)
	node := oneNode(t)
	store, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	js, err := NewJetstream([]string{sim.JetstreamURL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics()
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), FlushInterval: 20 * time.Millisecond,
		MemtableBytes: 1 << 20, GCGrace: gcGrace, Metrics: metrics, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})},
		Sources: []Source{js}, CompactionInterval: interval, CompactionFanIn: fanIn}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return world, node, metrics, done
}

// An ordinary merge that fails is tried again at the next look, then, for
// each failure in a row of its runs, after fullRetryMin doubling up to
// fullRetryMax: a merge whose input is damaged or lost failed at every
// look (reading the other inputs again each time, a log line each) until
// an operator restored or dropped it. Once the store heals, the merge is
// published.
func TestFailingMergeWaits(t *testing.T) {
	prevMin, prevMax := fullRetryMin, fullRetryMax
	fullRetryMin, fullRetryMax = 400*time.Millisecond, 2*time.Second
	t.Cleanup(func() { fullRetryMin, fullRetryMax = prevMin, prevMax })
	g := newGatedRig(t)
	close(g.store.open)
	before := g.holdLinks(fmt.Errorf("injected: the bucket lost the table: %w", objstore.ErrNotFound))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.r.Run(ctx) }()
	failed := func() float64 {
		return testutil.ToFloat64(g.metrics.Compactions.WithLabelValues(string(lsm.TreeLinks), "failed"))
	}
	// Looks every 50 ms for 3 s: about 60 tries of a merge without the
	// waits; with them each run's tries come at 0, 50 ms, then 400, 800,
	// 1,600 ms apart: five at most. Each failure holds the run holding the
	// table it names (its other input is free to merge with another run,
	// whose lost table fails that merge in turn), so five a run at most.
	time.Sleep(3 * time.Second)
	if f, most := failed(), 5*len(before); f < 2 || f > float64(most) {
		t.Fatalf("%v merges of the links tree (%d runs) failed in 3 s, want 2-%d: tried again at every look", f, len(before), most)
	}
	if !stillAll(g.node.FSM.Manifest(), before) {
		t.Fatal("a failed merge changed the manifest")
	}
	g.store.mu.Lock()
	g.store.fail = nil
	g.store.mu.Unlock()
	waitFor(t, "the merge", 30*time.Second, func() error {
		if stillAll(g.node.FSM.Manifest(), before) {
			return errors.New("the runs are still there")
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	compareModel(t, g.node, g.store, g.world)
}

func TestHoldRuns(t *testing.T) {
	prevMin, prevMax := fullRetryMin, fullRetryMax
	fullRetryMin, fullRetryMax = time.Second, 10*time.Second
	t.Cleanup(func() { fullRetryMin, fullRetryMax = prevMin, prevMax })
	now := time.Unix(1000, 0)
	holds := map[string]runHold{}
	for i, want := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		if got := holdRuns(holds, []string{"a", "b"}, now); got != want {
			t.Fatalf("failure %d in a row: wait %v, want %v", i+1, got, want)
		}
	}
	for range 100 { // no overflow of the doubling
		holdRuns(holds, []string{"a"}, now)
	}
	if got := holds["a"].until.Sub(now); got != 10*time.Second {
		t.Fatalf("after 107 failures: wait %v", got)
	}
	// Only a damaged or lost input holds: a bucket slow or away does not.
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("fetch meta: %w", objstore.ErrNotFound), true},
		{fmt.Errorf("compaction: %w", &lsm.CorruptError{Tree: lsm.TreeLinks, Table: "ab", Err: lsm.ErrCorrupt}), true},
		{fmt.Errorf("get: %w", objstore.ErrUnavailable), false},
		{context.DeadlineExceeded, false},
	} {
		if damaged(c.err) != c.want {
			t.Errorf("damaged(%v) = %v", c.err, !c.want)
		}
	}
	// A corrupt or missing table holds its own run alone; an object not
	// found that names no table, or a table of no input, every input.
	m := &lsm.Manifest{Runs: []lsm.Run{
		{ID: "r1", Tree: lsm.TreeLinks, Tables: []lsm.TableRef{{ID: "t1"}}},
		{ID: "r2", Tree: lsm.TreeLinks, Tables: []lsm.TableRef{{ID: "t2"}, {ID: "t3"}}},
	}}
	corruptT3 := fmt.Errorf("compaction: %w", &lsm.CorruptError{Tree: lsm.TreeLinks, Table: "t3", Err: lsm.ErrCorrupt})
	for _, c := range []struct {
		err  error
		want []string
	}{
		{corruptT3, []string{"r2"}},
		{&lsm.CorruptError{Tree: lsm.TreeLinks, Table: "t9", Err: lsm.ErrCorrupt}, []string{"r1", "r2"}},
		{fmt.Errorf("read table t3: %w", objstore.ErrNotFound), []string{"r1", "r2"}},
		{fmt.Errorf("read table t3: %w", &lsm.MissingError{Tree: lsm.TreeLinks, Table: "t3", Err: objstore.ErrNotFound}), []string{"r2"}},
		{&lsm.MissingError{Tree: lsm.TreeLinks, Table: "t1", Err: objstore.ErrNotFound}, []string{"r1"}},
	} {
		if got := damagedRuns(m, []string{"r1", "r2"}, c.err); !slices.Equal(got, c.want) {
			t.Errorf("damagedRuns(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// A run that failed for the first time beside one failing again: the
	// merge waits as long as the longest.
	if got := holdRuns(holds, []string{"b", "c"}, now); got != 10*time.Second || holds["c"].until != now {
		t.Fatalf("wait %v, c until %v", got, holds["c"].until)
	}
}
