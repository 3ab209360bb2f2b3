package ingest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/hashicorp/go-hclog"
)

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// oneNode starts a single-node cluster (real Raft, real TLS).
func oneNode(t testing.TB) *cluster.Node {
	dir := t.TempDir()
	if err := cluster.MakeCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MakeNodeCert(dir, "n1", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	n, err := cluster.Open(cluster.Config{ID: "n1", Dir: filepath.Join(dir, "raft"), RaftBind: freeAddr(t), Certs: cluster.Files(dir, "n1"), Bootstrap: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// servedWorld makes a simulated network of 150 accounts with 1500 steps
// of history, served until the test ends.
func servedWorld(t *testing.T, seed int64) (*simnet.World, *simnet.Net) {
	world := simnet.NewWorld(simnet.Config{Seed: seed, Accounts: 150})
	world.Step(1500)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	return world, sim
}

// ingestSim runs the write path against a simulated network: history
// before the sources connect (reached by the backfill), live steps while
// they run (reached by the stream), then compares every target of the
// model with what the index answers. bfMemory is the backfill's Memory
// (0: the default).
func ingestSim(t *testing.T, live func(n *simnet.Net) Source, seed, bfMemory int64) map[string][]string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	world, sim := servedWorld(t, seed)
	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := lsm.NewCatalog(t.TempDir(), store)
	bf := &Backfill{Relay: sim.RelayURL(), PLC: sim.PLCURL(), DIDWeb: sim.PLCURL(), Memory: bfMemory}
	src := live(sim)
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: cat, FlushInterval: 100 * time.Millisecond, MemtableBytes: 1 << 20, GCGrace: time.Nanosecond,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})}, Sources: []Source{bf, src}, CompactionInterval: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// The world goes on while the index backfills and tails it.
	for i := 0; i < 10; i++ {
		world.Step(200)
		time.Sleep(50 * time.Millisecond)
	}
	// Wait for the backfill to finish and the stream to reach the end.
	deadline := time.Now().Add(60 * time.Second)
	for {
		bc := node.FSM.Cursor(bf.Name())
		sc := node.FSM.Cursor(src.Name())
		if Done(bc) && sc == wantCursor(world, src) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backfill cursor %q, stream cursor %q (want %q), backfill %v", bc, sc, wantCursor(world, src), bf.Stats().Snapshot())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // resyncs queued by the last account events
	// The backfill's end asked for a full compaction, once.
	if node.FSM.Setting(backfillCompactedKey+bf.Name()) == "" {
		t.Fatal("the backfill reached its end without asking for a full compaction")
	}
	// What an operator does after a backfill: a full compaction, each
	// tree merged into one run, which the model check below then reads.
	// It is asked while no write path runs, as across a leader change:
	// the request is replicated state, and the write path that starts
	// next carries it out.
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	pending, err := RequestFullCompaction(context.Background(), node)
	if err != nil || len(pending) != len(lsm.Trees) {
		t.Fatalf("a full compaction request waits for %v (%v), want every tree", pending, err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- r.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		m := node.FSM.Manifest()
		if len(FullCompactionPending(node.FSM)) == 0 && len(m.RunsOf(lsm.TreeLinks)) == 1 && len(m.RunsOf(lsm.TreeRevocations)) <= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("full compaction: trees %v pending, %d runs of links, %d of revocations", FullCompactionPending(node.FSM), len(m.RunsOf(lsm.TreeLinks)), len(m.RunsOf(lsm.TreeRevocations)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	t.Logf("backfill %v; generation %d; outlines %v", bf.Stats().Snapshot(), node.FSM.Manifest().Generation, node.FSM.Summary().Outlines)
	// Record keys that are not TIDs (profiles' "self") and did:web are
	// named in the bucket, never outlined in the Raft state.
	if n := node.FSM.Summary().Outlines["rkey"]; n != 0 || len(node.FSM.Manifest().RunsOf(lsm.TreeNames)) == 0 {
		t.Fatalf("%d rkey outlines, %d runs of names: want none and some", n, len(node.FSM.Manifest().RunsOf(lsm.TreeNames)))
	}
	webs := 0
	for _, a := range world.Accounts() {
		if strings.HasPrefix(a.DID, "did:web:") {
			webs++
			if _, ok := node.FSM.Lookup(link.OutlineDID, a.DID); ok {
				t.Fatalf("%s is outlined", a.DID)
			}
		}
	}
	if webs == 0 {
		t.Fatal("the world has no did:web account to check")
	}

	return compareModel(t, node, store, world)
}

// compareModel demands that the index published by node answer, for every
// target of the world's model, exactly the model's live links; it returns
// them per target.
func compareModel(t *testing.T, node *cluster.Node, store objstore.Store, world *simnet.World) map[string][]string {
	t.Helper()
	view, err := lsm.OpenView(context.Background(), lsm.NewCatalog(t.TempDir(), store), node.FSM.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	reader := lsm.NewReader(store, nil)
	codec := &link.Codec{Outlines: node.FSM, Names: lsm.NewNameMap(reader, lsm.Views(func() *lsm.View { return view }), 0)}
	model := world.LiveLinks()
	got := map[string][]string{}
	links, twinsTotal := 0, 0
	for target, refs := range model {
		var want []string
		for _, l := range refs {
			want = append(want, l.Source+" "+l.Path)
		}
		slices.Sort(want)
		tg, err := link.ParseTarget(target)
		if err != nil {
			t.Fatalf("model target %q: %v", target, err)
		}
		keys, err := codec.TargetKeys(&tg)
		if err != nil {
			t.Fatal(err)
		}
		// A link may be under both keys of its target (a twin: written
		// under the hash while a part of the target was unknown, and again
		// under the encoding when a backfill replays a record the stream
		// wrote), which the query API answers once (query's dropTwins);
		// under one key it must be once.
		var have []string
		var twins int
		for i, id := range keys {
			ls, _, err := reader.All(context.Background(), view, id, lsm.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, l := range ls {
				s, err1 := codec.RenderRecord(l.Source)
				p, err2 := codec.RenderLocation(l.Location, link.StyleConstellation)
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				k := s + " " + p
				if seen[k] {
					t.Fatalf("target %s: %s twice under key %d", target, k, i)
				}
				seen[k] = true
				if i > 0 && slices.Contains(have, k) {
					twins++
					continue
				}
				have = append(have, k)
			}
		}
		twinsTotal += twins
		slices.Sort(have)
		if !slices.Equal(have, want) {
			var missing, extra []string
			for _, w := range want {
				if !slices.Contains(have, w) {
					missing = append(missing, w)
				}
			}
			for _, h := range have {
				if !slices.Contains(want, h) {
					extra = append(extra, h)
				}
			}
			t.Fatalf("target %s: %d links, model %d\nmissing %v\nextra %v", target, len(have), len(want), missing, extra)
		}
		got[target] = have
		links += len(have)
	}
	t.Logf("%d targets, %d live links: every one equal to the model (%d under both keys of their target)", len(model), links, twinsTotal)
	return got
}

func wantCursor(w *simnet.World, s Source) string {
	switch s := s.(type) {
	case *Jetstream:
		return fmt.Sprint(w.LastTimeUS())
	case *Firehose:
		return firehoseCursor(w.LastSeq(), urlHost(s.URL))
	default:
		return fmt.Sprint(w.LastSeq())
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Backfill plus live tail, through Jetstream and through the firehose:
// both indexes equal the model, so they equal each other. The firehose's
// backfill shares 16 KiB among its repositories in flight (every CAR of
// more than ~5 KB waits for the others, the larger ones run alone), and
// its index is no different.
func TestIngestSimulatedNetwork(t *testing.T) {
	js := ingestSim(t, func(n *simnet.Net) Source {
		s, err := NewJetstream([]string{n.JetstreamURL()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, 7, 0)
	fh := ingestSim(t, func(n *simnet.Net) Source {
		s, err := NewFirehose(n.FirehoseURL(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, 7, 16<<10)
	if len(js) != len(fh) {
		t.Fatalf("jetstream index has %d targets, firehose %d", len(js), len(fh))
	}
	for k, v := range js {
		if !slices.Equal(v, fh[k]) {
			t.Fatalf("target %s differs between jetstream and firehose", k)
		}
	}
}

// The end of a backfill asks for a full compaction of every tree once:
// the same backfill reaching its end again asks nothing.
func TestCompactAfterBackfillOnce(t *testing.T) {
	ctx := context.Background()
	node := oneNode(t)
	if err := compactAfterBackfill(ctx, node, "backfill:relay", ""); err != nil {
		t.Fatal(err)
	}
	if p := FullCompactionPending(node.FSM); len(p) != len(lsm.Trees) {
		t.Fatalf("pending %v after the backfill's end, want every tree", p)
	}
	if err := CancelFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := compactAfterBackfill(ctx, node, "backfill:relay", ""); err != nil {
		t.Fatal(err)
	}
	if p := FullCompactionPending(node.FSM); len(p) != 0 {
		t.Fatalf("asked again for %v by the same backfill's end", p)
	}
	if err := compactAfterBackfill(ctx, node, "backfill:other", ""); err != nil {
		t.Fatal(err)
	}
	if p := FullCompactionPending(node.FSM); len(p) != len(lsm.Trees) {
		t.Fatalf("another backfill's end asked for %v, want every tree", p)
	}
	// The end of a crawl a restart began asks once more, once a restart.
	for _, c := range []struct {
		restart string
		asks    bool
	}{{"r1", true}, {"r1", false}, {"r2", true}, {"", false}} {
		if err := CancelFullCompaction(ctx, node); err != nil {
			t.Fatal(err)
		}
		if err := compactAfterBackfill(ctx, node, "backfill:relay", c.restart); err != nil {
			t.Fatal(err)
		}
		if p := FullCompactionPending(node.FSM); (len(p) == len(lsm.Trees)) != c.asks {
			t.Fatalf("the end of the crawl restart %q began asked for %v, want asked %v", c.restart, p, c.asks)
		}
	}
}

// A leader whose backfill starts at the end of the listing (a restart, an
// upgrade long after the backfill ended) asks for no full compaction:
// only the pass that reaches the end does.
func TestBackfillStartingAtItsEndAsksNoCompaction(t *testing.T) {
	w, node, _, _ := forwardWriter(t)
	bf := &Backfill{Relay: "http://127.0.0.1:1"} // never asked: the listing is done
	if err := bf.Ingest(context.Background(), w, EOFCursor("done")); err != nil {
		t.Fatal(err)
	}
	if p := FullCompactionPending(node.FSM); len(p) != 0 || node.FSM.Setting(backfillCompactedKey+bf.Name()) != "" {
		t.Fatalf("a backfill that started at its end asked for a full compaction of %v", p)
	}
}

// A full compaction's request is deleted once its merge is published,
// unless it was asked again meanwhile (for the runs flushed since) or
// withdrawn; cancelling withdraws every tree's.
func TestFullCompactionRequests(t *testing.T) {
	ctx := context.Background()
	w, node, _, _ := forwardWriter(t)
	r := &Runner{Config: w.cfg}
	log := hclog.NewNullLogger()
	key := fullCompactionKey + string(lsm.TreeLinks)
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	first := node.FSM.Setting(key)
	// Asked again while the first request's merge ran: the generation
	// moved (a flush), so the request is another one.
	if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: key, Value: first + "1"}); err != nil {
		t.Fatal(err)
	}
	if !r.fullDone(ctx, w, fullMerge{lsm.TreeLinks, first}, log) {
		t.Fatal("fullDone failed on the leader")
	}
	if got := node.FSM.Setting(key); got != first+"1" {
		t.Fatalf("the later request %q was deleted (setting %q)", first+"1", got)
	}
	if !r.fullDone(ctx, w, fullMerge{lsm.TreeLinks, first + "1"}, log) || node.FSM.Setting(key) != "" {
		t.Fatalf("the request carried out stays: %q", node.FSM.Setting(key))
	}
	if p := FullCompactionPending(node.FSM); len(p) != len(lsm.Trees)-1 || slices.Contains(p, lsm.TreeLinks) {
		t.Fatalf("pending %v, want every tree but links", p)
	}
	if err := CancelFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	if p := FullCompactionPending(node.FSM); len(p) != 0 {
		t.Fatalf("pending %v after cancelling", p)
	}
	// A tree of fewer than two runs is done at once.
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	if runs, _ := r.fullInputs(ctx, w, node.FSM.Manifest(), lsm.TreeLinks, log, NewMetrics()); runs != nil || node.FSM.Setting(key) != "" {
		t.Fatalf("an empty tree: runs %v, request %q", runs, node.FSM.Setting(key))
	}
}

// A leader lost between publishing a full compaction's merge and deleting
// its request leaves the next one the mark published with the merge: the
// next one deletes the request (and then the mark) instead of merging
// the whole tree once more, the merged run and the flushes since. A
// request asked again after the merge is carried out as any other.
func TestFullCompactionDoneSurvivesLeaderLoss(t *testing.T) {
	ctx := context.Background()
	w, node, store, _ := forwardWriter(t)
	r := &Runner{Config: w.cfg}
	log := hclog.NewNullLogger()
	key, mark := fullCompactionKey+string(lsm.TreeLinks), fullDoneKey+string(lsm.TreeLinks)
	flushRepo := func(i int) {
		t.Helper()
		did, stamp, ops := repoOfLikes(t, w, i, 10)
		if err := w.ApplyRepo(ctx, "backfill", did, stamp, ops); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	flushRepo(0)
	flushRepo(1)
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		t.Fatal(err)
	}
	asked := node.FSM.Setting(key)
	// The merge, as the big lane makes it, offered and published with a
	// newer flush.
	m := node.FSM.Manifest()
	inputs := m.RunsOf(lsm.TreeLinks)
	runs, _ := r.fullInputs(ctx, w, m, lsm.TreeLinks, log, NewMetrics())
	if len(inputs) != 2 || len(runs) != 2 {
		t.Fatalf("%d runs, %d to merge", len(inputs), len(runs))
	}
	v, err := lsm.OpenView(ctx, w.cfg.Catalog, m)
	if err != nil {
		t.Fatal(err)
	}
	opt := lsm.CompactOptions{}
	opt.ForMerge(inputs, true, r.FanIn())
	out, err := lsm.CompactRuns(ctx, store, w.cfg.Catalog, v, inputs, opt)
	if err != nil {
		t.Fatal(err)
	}
	w.OfferCompaction(out, []string{inputs[0].ID, inputs[1].ID}, &fullMerge{lsm.TreeLinks, asked}, nil)
	flushRepo(2)
	if got := len(node.FSM.Manifest().RunsOf(lsm.TreeLinks)); got != 2 || node.FSM.Cursor(mark) != asked || node.FSM.Setting(key) != asked {
		t.Fatalf("published: %d runs, mark %q, request %q (asked %q)", got, node.FSM.Cursor(mark), node.FSM.Setting(key), asked)
	}
	// The leader is lost here; the next one looks.
	next := &Runner{Config: w.cfg}
	if runs, _ := next.fullInputs(ctx, w, node.FSM.Manifest(), lsm.TreeLinks, log, NewMetrics()); runs != nil || node.FSM.Setting(key) != "" {
		t.Fatalf("the next leader merges %d runs again (request %q)", len(runs), node.FSM.Setting(key))
	}
	// Asked again before the mark is gone: a request of its own.
	if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: key, Value: asked + "7"}); err != nil {
		t.Fatal(err)
	}
	if runs, _ := next.fullInputs(ctx, w, node.FSM.Manifest(), lsm.TreeLinks, log, NewMetrics()); len(runs) != 2 {
		t.Fatalf("a request asked after the merge: %d runs to merge, want 2", len(runs))
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if c := node.FSM.Cursor(mark); c != "" {
		t.Fatalf("the mark stays: %q", c)
	}
}
