package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/internal/backoff"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
	"github.com/hashicorp/go-hclog"
)

// logLines is a logger's output, kept to count its lines.
type logLines struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *logLines) logger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: l})
}

// brokenStore is a local object store that refuses every table while its
// tables/ is a file (as the e2e test of the write path breaks one); heal
// makes it a directory again (the store remembers that it made tables/,
// so it would not make it again).
func brokenStore(t *testing.T) (*local.Store, func()) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "tables")
	if err := os.WriteFile(broken, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return store, func() {
		if err := os.Remove(broken); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(broken, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// startNode opens a cluster node (real Raft over mutual TLS on loopback)
// of the CA in certs without waiting for it to lead.
func startNode(t *testing.T, certs, id string, bootstrap bool) *cluster.Node {
	t.Helper()
	if err := cluster.MakeNodeCert(certs, id, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	n, err := cluster.Open(cluster.Config{ID: id, Dir: filepath.Join(t.TempDir(), "raft"), RaftBind: freeAddr(t), Certs: cluster.Files(certs, id), Bootstrap: bootstrap,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testWriter{t}}),
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

func newCA(t *testing.T) string {
	dir := t.TempDir()
	if err := cluster.MakeCA(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitFor polls cond every 20 ms until it holds, failing after timeout
// with what it last said.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// capture is the bundled Jetstream capture, as a replay source.
func capture(t *testing.T) *Replay {
	path, err := filepath.Abs("../testdata/jetstream/corpus/expected_v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return &Replay{Path: path}
}

// supervised is a supervisor of node's write path over store, replaying
// src, with short restart waits.
func supervised(t *testing.T, node *cluster.Node, store objstore.Store, src Source, log *logLines) *Supervisor {
	return &Supervisor{
		Node: node,
		Runner: Runner{Config: Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), FlushInterval: 50 * time.Millisecond,
			Logger: log.logger(node.ID())}, Sources: []Source{src}},
		Logger:          log.logger(node.ID()),
		RestartBackoff:  backoff.Policy{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond},
		TransferTimeout: 2 * time.Second,
	}
}

// On one node: the supervisor starts the write path when the node comes
// to lead; a write path that fails (the store refusing every table)
// starts again from the committed state, and past FailuresMax in a row
// the node tries to hand leadership over (there is no one to take it);
// once the store heals the capture is published. A second "leading" call
// (a later term) stops the running write path and starts a new one; Stop
// stops it, and nothing starts after.
func TestSupervisorOneNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, heal := brokenStore(t)
	log := &logLines{t: t}
	node := startNode(t, newCA(t), "n1", true)
	src := capture(t)
	s := supervised(t, node, store, src, log)
	s.Start(ctx) // before the node leads: its first leadership starts the write path
	defer s.Stop()

	waitFor(t, "three failures in a row and a handover tried", 30*time.Second, func() error {
		restarts, handovers := log.count("write path ended while leading"), log.count("handing leadership over")
		if restarts < 3 || handovers < 1 || log.count("leadership transfer") < 1 {
			return fmt.Errorf("%d restarts, %d handovers", restarts, handovers)
		}
		return nil
	})
	if !node.IsLeader() {
		t.Fatal("a lone node no longer leads")
	}
	if c := node.FSM.Cursor(src.Name()); c != "" {
		t.Fatalf("cursor %q committed while the store refused every table", c)
	}
	heal()
	waitFor(t, "the capture published once the store healed", 30*time.Second, func() error {
		if c := node.FSM.Cursor(src.Name()); !Done(c) || node.FSM.Manifest().Generation == 0 {
			return fmt.Errorf("cursor %q, generation %d", c, node.FSM.Manifest().Generation)
		}
		return nil
	})
	restarts := log.count("write path ended while leading")

	// Leading again (cluster.Node calls back true in a later term): the
	// running write path stops, and a new one starts.
	started, stopped := log.count("write path started"), log.count("write path stopped")
	s.leadership(true)
	waitFor(t, "a new write path for the new leadership", 10*time.Second, func() error {
		if log.count("write path stopped") != stopped+1 || log.count("write path started") != started+1 {
			return fmt.Errorf("started %d (was %d), stopped %d (was %d)", log.count("write path started"), started, log.count("write path stopped"), stopped)
		}
		return nil
	})
	if n := log.count("write path ended while leading"); n != restarts {
		t.Fatalf("a stop for a new leadership counted as a failure: %d restarts, was %d", n, restarts)
	}

	s.Stop()
	if n := log.count("write path stopped"); n != stopped+2 {
		t.Fatalf("Stop: %d write paths stopped, want %d", n, stopped+2)
	}
	started = log.count("write path started")
	s.leadership(true)
	time.Sleep(200 * time.Millisecond)
	if n := log.count("write path started"); n != started {
		t.Fatalf("a write path started after Stop")
	}
}

// A store that does not answer (an S3 client to a port nothing listens
// on: the bucket down) fails the write path again and again, and the
// leader keeps leading: every node shares the store, so a handover would
// only add elections to the outage. Nothing is committed meanwhile.
func TestSupervisorKeepsLeadershipWhenStoreIsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := s3.New(s3.Config{Endpoint: freeAddr(t), Region: "us-east-1", Bucket: "eddy", Insecure: true, PathStyle: true,
		AccessKey: "key", SecretKey: "secret", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	log := &logLines{t: t}
	node := startNode(t, newCA(t), "n1", true)
	src := capture(t)
	s := supervised(t, node, store, src, log)
	s.Start(ctx)
	defer s.Stop()
	waitFor(t, "failures past FailuresMax, leadership kept", 60*time.Second, func() error {
		if n := log.count("keeping leadership"); n < 2 {
			return fmt.Errorf("%d restarts, %d times leadership kept", log.count("write path ended while leading"), n)
		}
		return nil
	})
	if n := log.count("handing leadership over"); n != 0 {
		t.Fatalf("leadership handed over %d times for a store no node can reach", n)
	}
	if !node.IsLeader() {
		t.Fatal("n1 no longer leads")
	}
	if c := node.FSM.Cursor(src.Name()); c != "" {
		t.Fatalf("cursor %q committed while the store was down", c)
	}
}

// On three nodes: the leader whose write path keeps failing hands
// leadership over, and the new leader's supervisor runs the write path
// (the old one's stops); once the store heals, the capture is published;
// a leadership transfer moves the write path with it.
func TestSupervisorHandsLeadershipOver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, heal := brokenStore(t)
	certs := newCA(t)
	src := capture(t)
	nodes, logs := supervisedThree(t, ctx, certs, src, func(int) objstore.Store { return store }, nil)
	leader := func() *cluster.Node {
		for _, n := range nodes {
			if n.IsLeader() {
				return n
			}
		}
		return nil
	}
	idOf := func(n *cluster.Node) string {
		if n == nil {
			return "none"
		}
		return n.ID()
	}

	waitFor(t, "n1 hands leadership over", 60*time.Second, func() error {
		if logs["n1"].count("handing leadership over") < 1 {
			return fmt.Errorf("n1: %d restarts", logs["n1"].count("write path ended while leading"))
		}
		if l := leader(); l == nil || l == nodes[0] {
			return fmt.Errorf("leader %s", idOf(l))
		}
		return nil
	})
	next := leader()
	waitFor(t, "the new leader runs the write path", 10*time.Second, func() error {
		if logs[next.ID()].count("write path started") < 1 {
			return fmt.Errorf("%s started no write path", next.ID())
		}
		return nil
	})

	heal()
	waitFor(t, "the capture published on every node", 60*time.Second, func() error {
		for _, n := range nodes {
			if c := n.FSM.Cursor(src.Name()); !Done(c) {
				return fmt.Errorf("%s: cursor %q", n.ID(), c)
			}
		}
		return nil
	})

	// A transfer moves the write path: the old leader's stops, the new
	// leader's starts.
	from := leader()
	if from == nil {
		t.Fatal("no leader")
	}
	fromStopped := logs[from.ID()].count("write path stopped")
	startedBefore := map[string]int{}
	for id, l := range logs {
		startedBefore[id] = l.count("write path started")
	}
	if err := from.TransferLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	to := leader()
	waitFor(t, "the write path moved with the leadership", 10*time.Second, func() error {
		if to = leader(); to == nil || to == from {
			return fmt.Errorf("leader %s", idOf(to))
		}
		if logs[from.ID()].count("write path stopped") <= fromStopped {
			return fmt.Errorf("%s's write path did not stop", from.ID())
		}
		if logs[to.ID()].count("write path started") <= startedBefore[to.ID()] {
			return fmt.Errorf("%s started no write path", to.ID())
		}
		return nil
	})
}

// HandOver stops the write path before the leadership goes: its last
// flush publishes what it buffered while the node still leads (the
// capture's cursor is committed when the transfer is asked), and a
// transfer that fails leaves the node leading with a write path started
// again.
func TestHandOverStopsTheWritePathFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := &logLines{t: t}
	node := startNode(t, newCA(t), "n1", true)
	src := capture(t)
	s := supervised(t, node, store, src, log)
	s.Runner.Config.FlushInterval = time.Hour // buffered until the write path stops
	s.Start(ctx)
	defer s.Stop()
	waitFor(t, "the write path", 10*time.Second, func() error {
		if log.count("write path started") == 0 {
			return errors.New("not started")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // the capture read into the memtables
	if c := node.FSM.Cursor(src.Name()); c != "" {
		t.Fatalf("cursor %q published before any flush", c)
	}
	started := log.count("write path started")
	var atTransfer string
	err = s.HandOver(ctx, func(context.Context) error {
		atTransfer = node.FSM.Cursor(src.Name())
		return errors.New("no voter to take it")
	})
	if err == nil || !Done(atTransfer) {
		t.Fatalf("at the transfer the cursor was %q (want the capture's end published); HandOver: %v", atTransfer, err)
	}
	if n := log.count("final flush"); n != 0 {
		t.Fatalf("%d final flushes failed", n)
	}
	waitFor(t, "the write path started again", 10*time.Second, func() error {
		if log.count("write path started") != started+1 {
			return fmt.Errorf("started %d times, was %d", log.count("write path started"), started)
		}
		return nil
	})
}

// unanswering is a store that answers nothing while down is set, as a
// bucket that does not answer (objstore.ErrUnavailable).
type unanswering struct {
	objstore.Store
	down atomic.Bool
}

func (u *unanswering) fail(op, key string) error {
	if u.down.Load() {
		return fmt.Errorf("%s %q: %w", op, key, objstore.ErrUnavailable)
	}
	return nil
}

func (u *unanswering) Put(ctx context.Context, key string, data []byte) error {
	if err := u.fail("put", key); err != nil {
		return err
	}
	return u.Store.Put(ctx, key, data)
}

func (u *unanswering) Get(ctx context.Context, key string) ([]byte, error) {
	if err := u.fail("get", key); err != nil {
		return nil, err
	}
	return u.Store.Get(ctx, key)
}

func (u *unanswering) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := u.fail("get range", key); err != nil {
		return nil, err
	}
	return u.Store.GetRange(ctx, key, off, n)
}

func (u *unanswering) Size(ctx context.Context, key string) (int64, error) {
	if err := u.fail("size", key); err != nil {
		return 0, err
	}
	return u.Store.Size(ctx, key)
}

func (u *unanswering) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := u.fail("list", prefix); err != nil {
		return err
	}
	return u.Store.List(ctx, prefix, fn)
}

func (u *unanswering) Delete(ctx context.Context, key string) error {
	if err := u.fail("delete", key); err != nil {
		return err
	}
	return u.Store.Delete(ctx, key)
}

// A write path that failed on a bucket that did not answer starts again
// at the first probe that finds it answering (StoreUp), not at the end of
// its backoff (it stalled up to 30 s more after an outage).
func TestSupervisorStartsAgainWhenStoreIsBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bucket := &unanswering{Store: base}
	bucket.down.Store(true)
	guard := objstore.NewGuard(bucket)
	for range objstore.GuardFailures {
		guard.Probe(ctx, time.Second)
	}
	if down, _, _ := guard.Down(); !down {
		t.Fatal("the guard does not call the store down")
	}
	log := &logLines{t: t}
	node := startNode(t, newCA(t), "n1", true)
	src := capture(t)
	s := supervised(t, node, guard, src, log)
	s.RestartBackoff = backoff.Policy{Min: time.Hour, Max: time.Hour}
	s.StoreUp = guard.WhenUp
	s.Start(ctx)
	defer s.Stop()
	waitFor(t, "the write path failing on the store", 30*time.Second, func() error {
		if log.count("write path ended while leading") == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	bucket.down.Store(false)
	if err := guard.Probe(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the capture published once the store is back", 30*time.Second, func() error {
		if c := node.FSM.Cursor(src.Name()); !Done(c) {
			return fmt.Errorf("cursor %q", c)
		}
		return nil
	})
	if n := log.count("final flush"); n != 0 {
		t.Fatalf("%d final flushes of a writer that had stopped itself", n)
	}
}

// A leader whose object store does not answer it while it answers another
// voter (a route, DNS or credential fault on the leader's host alone)
// hands leadership over, and the new leader publishes: it kept leadership
// for as long as the fault lasted, and the whole cluster's ingest stopped.
func TestSupervisorHandsOverWhenOnlyItsStoreIsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	certs := newCA(t)
	base, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	own := &unanswering{Store: base} // n1's way to the bucket, cut
	own.down.Store(true)
	guard := objstore.NewGuard(own)
	for range objstore.GuardFailures {
		guard.Probe(ctx, time.Second)
	}
	src := capture(t)
	storeOf := func(i int) objstore.Store {
		if i == 0 {
			return guard
		}
		return base
	}
	nodes, logs := supervisedThree(t, ctx, certs, src, storeOf, func(i int, s *Supervisor) {
		if i == 0 {
			s.StoreUp = guard.WhenUp
			// The other voters' way to the bucket answers: asked as their
			// own probes ask it.
			s.PeerReachesStore = func(ctx context.Context) bool { return objstore.NewGuard(base).Probe(ctx, time.Second) == nil }
		}
	})
	waitFor(t, "n1 hands leadership over", 60*time.Second, func() error {
		if logs["n1"].count("while it answers another voter: handing leadership over") < 1 {
			return fmt.Errorf("n1: %d restarts", logs["n1"].count("write path ended while leading"))
		}
		if nodes[0].IsLeader() {
			return errors.New("n1 still leads")
		}
		return nil
	})
	if n := logs["n1"].count("keeping leadership"); n != 0 {
		t.Fatalf("n1 kept leadership %d times for an outage of its own", n)
	}
	waitFor(t, "the capture published by the new leader", 60*time.Second, func() error {
		for _, n := range nodes[1:] {
			if c := n.FSM.Cursor(src.Name()); !Done(c) {
				return fmt.Errorf("%s: cursor %q", n.ID(), c)
			}
		}
		return nil
	})
}

// A flush held by a bucket slow to take its tables says so while it runs
// (it was silent for minutes: only the lag showed it).
func TestSlowFlushSaysSo(t *testing.T) {
	prev := slowFlushSay
	slowFlushSay = 100 * time.Millisecond
	t.Cleanup(func() { slowFlushSay = prev })
	bucket, fw := miniotest.StoreBehindForwarder(t, "slow-flush", 1)
	node := oneNode(t)
	log := &logLines{t: t}
	w, err := NewWriter(context.Background(), Config{Node: node, Store: bucket, Catalog: lsm.NewCatalog(t.TempDir(), bucket), MemtableBytes: 1 << 20,
		Metrics: NewMetrics(), Logger: log.logger("n1")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	op := jsCommit(t, 1, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "create", "app.bsky.feed.like", "3mptbypluud2a",
		map[string]any{"subject": map[string]any{"uri": "at://did:plc:bbbbbbbbbbbbbbbbbbbbbbbb/app.bsky.feed.post/3mptbyoumc22i", "cid": "bafyreiguce4jh7kcbmof3pmcvasifqtw24b6isakj5ve5ga2b4z4alpc4i"}, "createdAt": "2026-07-04T00:00:00Z"})
	if err := w.Apply(ctx, "js", "1", &op); err != nil {
		t.Fatal(err)
	}
	fw.SetDelay(400 * time.Millisecond)
	defer fw.SetDelay(0)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := log.count("flush still running"); n == 0 {
		t.Fatal("a flush held by a slow bucket said nothing")
	}
	fw.SetDelay(0)
	before := log.count("flush still running")
	if err := w.Apply(ctx, "js", "2", &op); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := log.count("flush still running"); n != before {
		t.Fatalf("a quick flush said it was slow (%d times)", n-before)
	}
}

// supervisedThree starts three nodes n1-n3, each with a supervisor of its
// own replaying src on storeOf(i), tweaked (when tweak is set) before it
// starts; n1 bootstrapped and leading, n2 and n3 joined.
func supervisedThree(t *testing.T, ctx context.Context, certs string, src *Replay, storeOf func(i int) objstore.Store, tweak func(i int, s *Supervisor)) ([]*cluster.Node, map[string]*logLines) {
	t.Helper()
	var nodes []*cluster.Node
	logs := map[string]*logLines{}
	for i, id := range []string{"n1", "n2", "n3"} {
		n := startNode(t, certs, id, i == 0)
		logs[id] = &logLines{t: t}
		s := supervised(t, n, storeOf(i), &Replay{Path: src.Path}, logs[id])
		if tweak != nil {
			tweak(i, s)
		}
		s.Start(ctx)
		t.Cleanup(s.Stop) // before the node closes (cleanups run last first)
		nodes = append(nodes, n)
	}
	waitFor(t, "n1 leads", 10*time.Second, func() error {
		if !nodes[0].IsLeader() {
			return fmt.Errorf("n1 does not lead")
		}
		return nil
	})
	for _, n := range nodes[1:] {
		if err := nodes[0].Join(ctx, fsm.NodeInfo{ID: n.ID(), Raft: n.Config().RaftBind}); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, logs
}
