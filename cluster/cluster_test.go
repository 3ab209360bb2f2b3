package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
)

const testToken = "test-admin-token-0123456789"

// tnode is one in-process node with its admin server.
type tnode struct {
	id, dir, raftAddr, adminAddr string
	node                         *Node
	admin                        *Admin
	srv                          *http.Server
	blocked                      *sync.Map // peer IDs and raft addresses this node cannot reach
}

type tcluster struct {
	t       *testing.T
	certDir string
	nodes   map[string]*tnode
	// tune, when set, changes a node's configuration before it opens.
	tune func(id string, cfg *Config)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newTCluster(t *testing.T) *tcluster {
	dir := t.TempDir()
	if err := MakeCA(dir); err != nil {
		t.Fatal(err)
	}
	c := &tcluster{t: t, certDir: dir, nodes: map[string]*tnode{}}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
	})
	return c
}

// start starts (or restarts) node id.
func (c *tcluster) start(id string, bootstrap bool) *tnode {
	t := c.t
	n := c.nodes[id]
	if n == nil {
		if err := MakeNodeCert(c.certDir, id, []string{"127.0.0.1", "localhost"}); err != nil {
			t.Fatal(err)
		}
		n = &tnode{id: id, dir: filepath.Join(t.TempDir(), id), raftAddr: freeAddr(t), adminAddr: freeAddr(t), blocked: &sync.Map{}}
		c.nodes[id] = n
	}
	blocked := n.blocked
	cfg := Config{
		ID: id, Dir: n.dir, RaftBind: n.raftAddr, AdminAddr: n.adminAddr, HTTPAddr: "127.0.0.1:1",
		Certs: Files(c.certDir, id), Bootstrap: bootstrap,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testWriter{t}}),
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		SnapshotThreshold: 64, TrailingLogs: 16, SnapshotInterval: 200 * time.Millisecond,
		testBlock: func(peer, addr string) bool {
			_, a := blocked.Load(peer)
			_, b := blocked.Load(addr)
			return (peer != "" && a) || (addr != "" && b)
		},
	}
	if c.tune != nil {
		c.tune(id, &cfg)
	}
	node, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.node = node
	n.admin, err = NewAdmin(node, testToken)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", n.adminAddr)
	if err != nil {
		t.Fatal(err)
	}
	n.srv = &http.Server{Handler: n.admin.Handler()}
	go n.srv.Serve(ln)
	return n
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func (c *tcluster) stop(n *tnode) {
	if n.node == nil {
		return
	}
	n.srv.Close()
	n.node.Close(context.Background())
	n.node = nil
}

// crash stops a node without a leadership transfer.
func (c *tcluster) crash(n *tnode) {
	n.srv.Close()
	n.node.raft.Shutdown().Error()
	close(n.node.done)
	n.node.wg.Wait()
	n.node.closeStores()
	n.node = nil
}

// three starts n1 (bootstrapped, leading) and joins n2 and n3 through it.
func (c *tcluster) three() (n1, n2, n3 *tnode) {
	c.t.Helper()
	n1 = c.start("n1", true)
	c.leader(5 * time.Second)
	n2, n3 = c.start("n2", false), c.start("n3", false)
	for _, n := range []*tnode{n2, n3} {
		if err := c.join(n1, n); err != nil {
			c.t.Fatal(err)
		}
	}
	return n1, n2, n3
}

func (c *tcluster) join(via *tnode, n *tnode) error {
	cl := AdminClient{Addrs: []string{via.adminAddr}, Token: testToken}
	body := fmt.Sprintf(`{"id":%q,"raft":%q,"admin":%q,"http":"127.0.0.1:1"}`, n.id, n.raftAddr, n.adminAddr)
	// A node that just joined may not know the leader's address yet: retry
	// a 503 for a while, as eddy-ctl join does.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cl.Call(context.Background(), http.MethodPost, "/admin/join", []byte(body), nil)
		var ce *CallError
		if err == nil || !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leader waits for a leader among the running nodes (except skip).
func (c *tcluster) leader(timeout time.Duration, skip ...*tnode) *tnode {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			if n.node == nil || contains(skip, n) {
				continue
			}
			if n.node.IsLeader() {
				return n
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %v", timeout)
	return nil
}

func contains(list []*tnode, n *tnode) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

func flushEntry(base uint64, runID string) fsm.Flush {
	return fsm.Flush{Edit: lsm.Edit{Base: base, Add: []lsm.Run{{ID: runID, Tree: lsm.TreeLinks, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "t-" + runID, Records: 1}}}}}}
}

// waitGen waits until every running node applied generation gen.
func (c *tcluster) waitGen(gen uint64, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ok := true
		for _, n := range c.nodes {
			if n.node != nil && n.node.FSM.Manifest().Generation < gen {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, n := range c.nodes {
		if n.node != nil {
			c.t.Logf("%s at generation %d", n.id, n.node.FSM.Manifest().Generation)
		}
	}
	c.t.Fatalf("generation %d not applied everywhere within %v", gen, timeout)
}

// publish commits a flush adding run runID through leader l. A leader
// can lose its term under a loaded machine's scheduling (300 ms
// timeouts): then, for up to ten seconds, the run is published through
// whichever running node (but skip) leads next, unless the lost term had
// committed it already.
func (c *tcluster) publish(l *tnode, runID string, skip ...*tnode) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := l.node.FSM.Manifest()
		for _, r := range m.Runs {
			if r.ID == runID {
				return m.Generation
			}
		}
		res, err := l.node.Propose(context.Background(), fsm.TypeFlush, 0, flushEntry(m.Generation, runID))
		if err == nil {
			return res.(fsm.FlushResult).Generation
		}
		if !(errors.Is(err, ErrNotLeader) || errors.Is(err, fsm.ErrStale)) || time.Now().After(deadline) {
			c.t.Fatalf("publish %s: %v", runID, err)
		}
		c.t.Logf("publish %s through %s: %v; again through the next leader", runID, l.id, err)
		l = c.leader(time.Until(deadline), skip...)
	}
}

// (Over 120 lines: one scenario: bootstrap, join, replicate, fail over, rejoin.)
func TestThreeNodes(t *testing.T) {
	c := newTCluster(t)
	n1 := c.start("n1", true)
	c.leader(5 * time.Second)
	n2 := c.start("n2", false)
	n3 := c.start("n3", false)
	// Join through a follower too: forwarded to the leader.
	if err := c.join(n1, n2); err != nil {
		t.Fatal(err)
	}
	if err := c.join(n2, n3); err != nil {
		t.Fatal(err)
	}
	// A re-join with the same ID and address is a no-op.
	if err := c.join(n3, n3); err != nil {
		t.Fatal(err)
	}
	servers, _ := n1.node.Servers()
	if len(servers) != 3 {
		t.Fatalf("%d servers", len(servers))
	}
	l := c.leader(5 * time.Second)
	gen := c.publish(l, "a")
	c.waitGen(gen, 5*time.Second)

	t.Run("leader loss and re-election", func(t *testing.T) {
		old := c.leader(5 * time.Second)
		start := time.Now()
		c.crash(old)
		nl := c.leader(10*time.Second, old)
		t.Logf("new leader %s after %v", nl.id, time.Since(start))
		g := c.publish(nl, "b")
		c.waitGen(g, 5*time.Second)
		// The crashed node restarts with the same configuration and catches up.
		c.start(old.id, false)
		c.waitGen(g, 10*time.Second)
	})

	t.Run("partitioned leader cannot publish", func(t *testing.T) {
		old := c.leader(5 * time.Second)
		base := old.node.FSM.Manifest().Generation
		// Cut the leader off from both followers, in both directions.
		for _, n := range c.nodes {
			if n != old {
				old.blocked.Store(n.id, true)
				old.blocked.Store(n.raftAddr, true)
				n.blocked.Store(old.id, true)
				n.blocked.Store(old.raftAddr, true)
			}
		}
		// Its flush cannot commit...
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := old.node.Propose(ctx, fsm.TypeFlush, 0, flushEntry(base, "stale"))
		cancel()
		if err == nil {
			t.Fatal("a partitioned leader published")
		}
		// ...while the majority elects a leader and goes on.
		nl := c.leader(10*time.Second, old)
		g := c.publish(nl, "majority", old)
		// Heal: the old leader rejoins as a follower and gets the majority's
		// history; its stale flush never appears.
		for _, n := range c.nodes {
			n.blocked.Range(func(k, _ any) bool { n.blocked.Delete(k); return true })
		}
		c.waitGen(g, 10*time.Second)
		for _, n := range c.nodes {
			for _, r := range n.node.FSM.Manifest().Runs {
				if r.ID == "stale" {
					t.Fatalf("%s has the partitioned leader's run", n.id)
				}
			}
		}
		// The same edit, retried on the new leader on its old base, loses
		// the compare-and-set.
		l := c.leader(5 * time.Second)
		if _, err := l.node.Propose(context.Background(), fsm.TypeFlush, 0, flushEntry(base, "stale")); !errors.Is(err, fsm.ErrStale) {
			t.Fatalf("stale edit: %v", err)
		}
	})

	t.Run("lagging follower catches up through a snapshot", func(t *testing.T) {
		l := c.leader(5 * time.Second)
		var lag *tnode
		for _, n := range c.nodes {
			if n != l {
				lag = n
				break
			}
		}
		c.stop(lag)
		var g uint64
		for i := 0; i < 200; i++ {
			g = c.publish(l, fmt.Sprintf("lag-%d", i))
		}
		// The snapshot is the leader's (publish may have gone on through
		// another one), so its log no longer holds what lag missed.
		if err := c.leader(5 * time.Second).node.raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
		c.start(lag.id, false)
		c.waitGen(g, 15*time.Second)
		// It got there by installing the leader's snapshot: its snapshot
		// is past the end of its own log, which only an install does.
		// Raft records the install just after the state machine restored
		// it (which waitGen saw): wait for that too.
		var st map[string]string
		deadline := time.Now().Add(5 * time.Second)
		for {
			st = lag.node.raft.Stats()
			snapIdx, _ := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
			lastLog, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
			if snapIdx > lastLog {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no snapshot install on %s (generation %d of %d): %v", lag.id, lag.node.FSM.Manifest().Generation, g, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("removed node is refused", func(t *testing.T) {
		l := c.leader(5 * time.Second)
		var victim *tnode
		for _, n := range c.nodes {
			if n != l {
				victim = n
				break
			}
		}
		cl := AdminClient{Addrs: []string{l.adminAddr}, Token: testToken}
		if err := cl.Call(context.Background(), http.MethodPost, "/admin/remove", []byte(fmt.Sprintf(`{"id":%q}`, victim.id)), nil); err != nil {
			t.Fatal(err)
		}
		servers, _ := l.node.Servers()
		if len(servers) != 2 {
			t.Fatalf("%d servers after remove", len(servers))
		}
		var ce *CallError
		if err := c.join(l, victim); !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
			t.Fatalf("re-join of a removed node: %v", err)
		}
		// Its Raft connections are refused by the members.
		for _, n := range c.nodes {
			if n.node == nil || n == victim {
				continue
			}
			deadline := time.Now().Add(5 * time.Second)
			for !errors.Is(n.node.acceptPeer(victim.id), ErrRemoved) {
				if time.Now().After(deadline) {
					t.Fatalf("%s accepts the removed node", n.id)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		// The remaining two still publish.
		g := c.publish(l, "after-remove")
		c.stop(victim)
		c.waitGen(g, 5*time.Second)
	})

	t.Run("bad admin token", func(t *testing.T) {
		l := c.leader(5 * time.Second)
		cl := AdminClient{Addrs: []string{l.adminAddr}, Token: "wrong-token-wrong-token"}
		var ce *CallError
		if err := cl.Call(context.Background(), http.MethodGet, "/admin/status", nil, nil); !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized {
			t.Fatalf("bad token: %v", err)
		}
	})
}

// The node ID persists: a data directory refuses another ID.
func TestNodeIDPersisted(t *testing.T) {
	dir := t.TempDir()
	// A start refused for want of the ID's certificate (a mistyped --id)
	// leaves the directory free for the right ID.
	if _, err := Open(Config{ID: "typo", Dir: dir, RaftBind: "127.0.0.1:0", Certs: Files(t.TempDir(), "typo")}); err == nil {
		t.Fatal("opened without a certificate")
	}
	if id, err := readNodeID(dir, "a"); err != nil || id != "a" {
		t.Fatal(id, err)
	}
	if err := keepNodeID(dir, "a"); err != nil {
		t.Fatal(err)
	}
	if id, err := readNodeID(dir, ""); err != nil || id != "a" {
		t.Fatal(id, err)
	}
	if _, err := readNodeID(dir, "b"); !errors.Is(err, ErrNodeID) {
		t.Fatal(err)
	}
}

// Losing two of three nodes: the survivor, restarted with a peers.json
// naming only itself, leads alone with all committed state, and fresh nodes
// join under new IDs.
func TestRecoverFromPeersJSON(t *testing.T) {
	c := newTCluster(t)
	n1, n2, n3 := c.three()
	l := c.leader(5 * time.Second)
	gen := c.publish(l, "before")
	c.waitGen(gen, 5*time.Second)
	// Two nodes are lost for good; the survivor cannot make progress.
	var survivor *tnode
	for _, n := range []*tnode{n1, n2, n3} {
		if n != l && survivor == nil {
			survivor = n
			continue
		}
		c.crash(n)
	}
	c.stop(survivor)
	peers := fmt.Sprintf(`[{"id":%q,"address":%q,"non_voter":false}]`, survivor.id, survivor.raftAddr)
	if err := os.WriteFile(filepath.Join(survivor.dir, "peers.json"), []byte(peers), 0o644); err != nil {
		t.Fatal(err)
	}
	c.start(survivor.id, false)
	nl := c.leader(10 * time.Second)
	if nl != survivor || nl.node.FSM.Manifest().Generation != gen {
		t.Fatalf("after recovery: leader %s at generation %d", nl.id, nl.node.FSM.Manifest().Generation)
	}
	if _, err := os.Stat(filepath.Join(survivor.dir, "peers.json")); !os.IsNotExist(err) {
		t.Fatal("peers.json left behind")
	}
	n4 := c.start("n4", false)
	if err := c.join(nl, n4); err != nil {
		t.Fatal(err)
	}
	g := c.publish(nl, "after")
	c.waitGen(g, 5*time.Second)
}
