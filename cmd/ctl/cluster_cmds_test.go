package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
)

// ctl runs eddy-ctl with args and returns its exit code and output.
func ctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func mustCtl(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := ctl(t, args...)
	if code != 0 {
		t.Fatalf("eddy-ctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// noTokenEnv clears the token variables, so the tests do not see the
// environment's.
func noTokenEnv(t *testing.T) {
	t.Setenv(envTokenFile, "")
	t.Setenv(envToken, "")
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out := mustCtl(t, "certs", "--dir", dir, "--nodes", "n1,n2,n3", "--hosts", "127.0.0.1,localhost,::1")
	if !strings.Contains(out, "n2: ca.pem n2.pem n2-key.pem admin-token") {
		t.Fatalf("output does not say what goes where:\n%s", out)
	}
	want := map[string]os.FileMode{
		"ca.pem": 0o644, "ca-key.pem": 0o600, "admin-token": 0o600,
		"n1.pem": 0o644, "n1-key.pem": 0o600, "n2.pem": 0o644, "n2-key.pem": 0o600, "n3.pem": 0o644, "n3-key.pem": 0o600,
	}
	for name, mode := range want {
		// Group and other bits may only be narrower than wanted (umask).
		if got := fileMode(t, filepath.Join(dir, name)); got&^mode != 0 || got&0o600 != 0o600 {
			t.Errorf("%s: mode %v, want %v", name, got, mode)
		}
	}
	if got := fileMode(t, dir); got&0o077 != 0 {
		t.Errorf("directory mode %v, want 0700", got)
	}
	tok, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := hex.DecodeString(strings.TrimSpace(string(tok))); err != nil || len(b) != 32 {
		t.Fatalf("admin token %q: want 32 bytes in hex", tok)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if _, err := cluster.LoadTLS(cluster.Files(dir, id), nil); err != nil {
			t.Fatalf("LoadTLS %s: %v", id, err)
		}
	}

	// Again, with a fourth node: only its files are new; the rest is kept.
	before := map[string][]byte{}
	for name := range want {
		before[name], _ = os.ReadFile(filepath.Join(dir, name))
	}
	out = mustCtl(t, "certs", "--dir", dir, "--nodes", "n1,n2,n3,n4", "--json")
	var res certsResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	slices.Sort(res.Written)
	if w := []string{filepath.Join(dir, "n4-key.pem"), filepath.Join(dir, "n4.pem")}; !slices.Equal(res.Written, w) {
		t.Fatalf("written %v, want %v", res.Written, w)
	}
	if len(res.Existing) != 9 || len(res.Nodes) != 4 || res.AdminToken != filepath.Join(dir, "admin-token") {
		t.Fatalf("result %+v", res)
	}
	if h := res.Nodes["n1"].Hosts; !slices.Contains(h, "localhost") || !slices.Contains(h, "::1") {
		t.Fatalf("n1 hosts %v", h)
	}
	for name, b := range before {
		if now, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(now, b) {
			t.Fatalf("%s was rewritten", name)
		}
	}
	if _, err := cluster.LoadTLS(cluster.Files(dir, "n4"), nil); err != nil {
		t.Fatal(err)
	}

	// A node certificate left beside a new CA is caught.
	if err := os.Remove(filepath.Join(dir, "ca.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := ctl(t, "certs", "--dir", dir, "--nodes", "n1"); code != 1 || !strings.Contains(errs, "does not verify") {
		t.Fatalf("stale node certificate: exit %d: %s", code, errs)
	}

	for _, args := range [][]string{
		{"certs", "--nodes", "n1"},
		{"certs", "--dir", dir},
		{"certs", "--dir", dir, "--nodes", "ca"},
		{"certs", "--dir", dir, "--nodes", "n1-key"},
		{"certs", "--dir", dir, "--nodes", "../x"},
		{"certs", "--dir", dir, "--nodes", "n1,n1"},
		{"certs", "--dir", dir, "--nodes", "n1", "--hosts", "10.0.0.1:7000"},
	} {
		if code, _, _ := ctl(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestParseAdminAddrs(t *testing.T) {
	defer func(f func(context.Context, string) ([]string, error)) { lookupHost = f }(lookupHost)
	lookupHost = func(_ context.Context, host string) ([]string, error) {
		if host == "eddy.example" {
			return []string{"10.0.0.1", "10.0.0.2", "fd00::3"}, nil
		}
		return nil, errors.New("no such host")
	}
	cases := []struct {
		in   string
		want []string
	}{
		{"10.0.0.1:7001", []string{"http://10.0.0.1:7001"}},
		{"http://10.0.0.1:7001/, 10.0.0.2:7001", []string{"http://10.0.0.1:7001", "http://10.0.0.2:7001"}},
		{"eddy.example:7001", []string{"http://10.0.0.1:7001", "http://10.0.0.2:7001", "http://[fd00::3]:7001"}},
		{"https://eddy.example:7001", []string{"https://eddy.example:7001"}},
		{"unknown.example:7001", []string{"http://unknown.example:7001"}},
		{"[::1]:7001", []string{"http://[::1]:7001"}},
	}
	for _, c := range cases {
		got, err := parseAdminAddrs(context.Background(), c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %v %v, want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", " , ", "10.0.0.1", "ftp://h:1", "h:0", "http://h:1/admin", "h:port"} {
		if _, err := parseAdminAddrs(context.Background(), bad); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
}

// testNode is one in-process node with its admin API.
type testNode struct {
	id, raft, admin string
	node            *cluster.Node
	srv             *http.Server
	compacts        atomic.Int32 // full compactions asked of this node's write path
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startNode(t *testing.T, certDir, token, id string, bootstrap bool) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{id: id, raft: freeAddr(t), admin: ln.Addr().String()}
	n.node, err = cluster.Open(cluster.Config{
		ID: id, Dir: filepath.Join(t.TempDir(), id), RaftBind: n.raft, AdminAddr: n.admin, HTTPAddr: "127.0.0.1:1",
		Certs: cluster.Files(certDir, id), Bootstrap: bootstrap,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testLogWriter{t}}),
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	admin, err := cluster.NewAdmin(n.node, token)
	if err != nil {
		t.Fatal(err)
	}
	compact := ingest.AdminCompact(n.node) // eddy-node's
	admin.Compact = func(ctx context.Context, req cluster.CompactRequest) (map[string]any, error) {
		if req.Full {
			n.compacts.Add(1)
		}
		return compact(ctx, req)
	}
	// A backfill source, as eddy-node's configuration gives (no write
	// path runs here: the request is only replicated).
	admin.BackfillRestart = ingest.AdminBackfillRestart(n.node, []ingest.Source{&ingest.Backfill{Relay: testRelay}})
	admin.DropTables = ingest.AdminDropTables(n.node)
	n.srv = &http.Server{Handler: admin.Handler()}
	go n.srv.Serve(ln)
	return n
}

// testRelay is the test nodes' backfill source's relay.
const testRelay = "https://relay.example"

// statusJSON runs status --json until ok accepts the answer.
func statusJSON(t *testing.T, what string, ok func([]cluster.NodeStatus) bool, args ...string) []cluster.NodeStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last string
	for {
		code, out, errs := ctl(t, append([]string{"status", "--json"}, args...)...)
		if code == 0 {
			var nodes []cluster.NodeStatus
			if err := json.Unmarshal([]byte(out), &nodes); err != nil {
				t.Fatalf("status --json: %v\n%s", err, out)
			}
			if ok(nodes) {
				return nodes
			}
		}
		last = out + errs
		if time.Now().After(deadline) {
			t.Fatalf("status never showed %s; last answer:\n%s", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settled: want nodes, all answering, exactly one leader, whom all follow.
func settled(want int) func([]cluster.NodeStatus) bool {
	return func(nodes []cluster.NodeStatus) bool {
		if len(nodes) != want {
			return false
		}
		leaders := 0
		for _, n := range nodes {
			if n.Error != "" || len(n.Servers) != want || n.Leader == "" || n.Leader != nodes[0].Leader {
				return false
			}
			if n.State == "Leader" {
				leaders++
			}
		}
		return leaders == 1
	}
}

// newCerts makes a test cluster's certificates for nodes (comma-separated)
// under dir and returns the certificates directory, the admin token file
// and the token.
func newCerts(t *testing.T, dir, nodes string) (certDir, tokenFile, tok string) {
	t.Helper()
	certDir = filepath.Join(dir, "certs")
	mustCtl(t, "certs", "--dir", certDir, "--nodes", nodes)
	tokenFile = filepath.Join(certDir, "admin-token")
	tok, err := readToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return certDir, tokenFile, tok
}

func leaderOf(nodes []cluster.NodeStatus) string {
	for _, n := range nodes {
		if n.State == "Leader" {
			return n.ID
		}
	}
	return ""
}

// (Over 120 lines: one scenario: every cluster command against one real cluster.)
func TestClusterCommands(t *testing.T) {
	noTokenEnv(t)
	certDir, tokenFile, tok := newCerts(t, t.TempDir(), "n1,n2,n3")

	nodes := map[string]*testNode{}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range nodes {
			n.srv.Close()
			if err := n.node.Close(ctx); err != nil {
				t.Logf("close %s: %v", n.id, err)
			}
		}
	})
	for i, id := range []string{"n1", "n2", "n3"} {
		nodes[id] = startNode(t, certDir, tok, id, i == 0)
	}
	n1, n2, n3 := nodes["n1"], nodes["n2"], nodes["n3"]
	all := n1.admin + "," + n2.admin + "," + n3.admin
	auth := []string{"--token-file", tokenFile}

	join := func(via string, n *testNode, extra ...string) (int, string, string) {
		args := append([]string{"join", "--addr", via, "--id", n.id, "--raft", n.raft, "--admin", n.admin, "--http", "127.0.0.1:1"}, auth...)
		code, out, errs := ctl(t, append(args, extra...)...)
		if errs != "" {
			t.Logf("join %s via %s: %s", n.id, via, errs)
		}
		return code, out, errs
	}
	// n1 may not have elected itself yet: join waits for a leader.
	if code, out, errs := join(n1.admin, n2); code != 0 || !strings.Contains(out, "n2 is a member") {
		t.Fatalf("join n2: exit %d: %s%s", code, out, errs)
	}
	// Through n2, a follower that forwards to the leader.
	if code, out, errs := join(n2.admin, n3); code != 0 {
		t.Fatalf("join n3 via n2: exit %d: %s%s", code, out, errs)
	}
	// Again: a no-op.
	if code, out, errs := join(n3.admin, n3, "--json"); code != 0 || !strings.Contains(out, `"joined": "n3"`) {
		t.Fatalf("re-join n3: exit %d: %s%s", code, out, errs)
	}

	st := statusJSON(t, "three settled nodes", settled(3), append([]string{"--addr", all}, auth...)...)
	leader := leaderOf(st)
	t.Logf("leader %s", leader)

	// The table, from the leader (a follower may not have applied the last
	// join yet); a dead address first is skipped; an http:// address works.
	dead := freeAddr(t)
	out := mustCtl(t, append([]string{"status", "--addr", dead + ",http://" + nodes[leader].admin}, auth...)...)
	t.Logf("status:\n%s", out)
	for _, s := range []string{"NODE", "n1", "n2", "n3", "Leader", "Follower", "*", "Configuration"} {
		if !strings.Contains(out, s) {
			t.Fatalf("status table lacks %q:\n%s", s, out)
		}
	}
	// One host name standing for several addresses: localhost is 127.0.0.1
	// (and maybe ::1, where nothing listens).
	_, port, _ := net.SplitHostPort(n3.admin)
	mustCtl(t, append([]string{"status", "--addr", "localhost:" + port}, auth...)...)
	// The token from the environment.
	t.Setenv(envToken, tok)
	mustCtl(t, "status", "--addr", n1.admin)
	t.Setenv(envToken, "")
	t.Setenv(envTokenFile, tokenFile)
	mustCtl(t, "status", "--addr", n1.admin)
	t.Setenv(envTokenFile, "")

	// A full compaction, asked through a follower, reaches the leader's
	// write path only; without --full it is a usage error.
	var asked *testNode
	for _, n := range nodes {
		if n.id != leader {
			asked = n
			break
		}
	}
	out = mustCtl(t, append([]string{"compact", "--full", "--addr", asked.admin}, auth...)...)
	if !strings.Contains(out, "full compaction asked of leader "+leader) || !strings.Contains(out, "links, revocations") {
		t.Fatalf("compact --full: %s", out)
	}
	for _, n := range nodes {
		if want := int32(0); n.id == leader {
			want = 1
			if got := n.compacts.Load(); got != want {
				t.Fatalf("the leader %s was asked %d full compactions, want 1", n.id, got)
			}
		} else if got := n.compacts.Load(); got != want {
			t.Fatalf("follower %s was asked %d full compactions, want 0", n.id, got)
		}
	}
	// The request is replicated: every node holds it (whichever node
	// leads next carries it out).
	for _, n := range nodes {
		for deadline := time.Now().Add(5 * time.Second); ; {
			if p := ingest.FullCompactionPending(n.node.FSM); len(p) == len(lsm.Trees) {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("node %s holds a full compaction of %v, want every tree", n.id, p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Withdrawn through a follower, on every node.
	out = mustCtl(t, append([]string{"compact", "--cancel", "--addr", asked.admin}, auth...)...)
	if !strings.Contains(out, "full compaction withdrawn by leader "+leader) {
		t.Fatalf("compact --cancel: %s", out)
	}
	for _, n := range nodes {
		for deadline := time.Now().Add(5 * time.Second); ; {
			if p := ingest.FullCompactionPending(n.node.FSM); len(p) == 0 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("node %s still holds a full compaction of %v after --cancel", n.id, p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A crawl again, asked through a follower: replicated to every node;
	// without --yes a usage error.
	out = mustCtl(t, append([]string{"backfill", "restart", "--yes", "--addr", asked.admin}, auth...)...)
	if !strings.Contains(out, "crawl again asked of leader "+leader+": backfill:"+testRelay) {
		t.Fatalf("backfill restart: %s", out)
	}
	for _, n := range nodes {
		for deadline := time.Now().Add(5 * time.Second); n.node.FSM.Setting("backfill_restart:backfill:"+testRelay) == ""; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s holds no backfill restart request", n.id)
			}
		}
	}
	// A table dropped, asked through a follower: the request names a
	// table the manifest holds (a run published here without objects: no
	// write path runs to carry the request out), is replicated to every
	// node, and is withdrawn; a table not in the index is answered 404.
	run := lsm.Run{ID: "ab01", Tree: lsm.TreeLinks, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "cd02", Records: 7, DataBytes: 100}}}
	if _, err := nodes[leader].node.Propose(context.Background(), fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: nodes[leader].node.FSM.Manifest().Generation, Add: []lsm.Run{run}}}); err != nil {
		t.Fatal(err)
	}
	out = mustCtl(t, append([]string{"tables", "drop", "--tree", "links", "--tables", "ab01", "--yes", "--addr", asked.admin}, auth...)...)
	if !strings.Contains(out, "links table cd02 (run ab01): 7 records") || !strings.Contains(out, "drop of 1 tables (7 records) asked of leader "+leader) {
		t.Fatalf("tables drop: %s", out)
	}
	for _, n := range nodes {
		for deadline := time.Now().Add(5 * time.Second); !slices.Equal(ingest.DropsPending(n.node.FSM)[lsm.TreeLinks], []string{"cd02"}); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s holds drop requests %v, want links table cd02", n.id, ingest.DropsPending(n.node.FSM))
			}
		}
	}
	if code, _, errs := ctl(t, append([]string{"tables", "drop", "--tree", "links", "--tables", "ef03", "--yes", "--addr", asked.admin}, auth...)...); code != 1 || !strings.Contains(errs, "NotFound") {
		t.Fatalf("tables drop of a table not in the index: exit %d: %s", code, errs)
	}
	if code, _, errs := ctl(t, append([]string{"tables", "drop", "--tree", "revocations", "--tables", "ef03", "--yes", "--addr", asked.admin}, auth...)...); code != 1 || !strings.Contains(errs, "InvalidRequest") || !strings.Contains(errs, "only tables of the links tree") {
		t.Fatalf("tables drop of a revocations table: exit %d: %s", code, errs)
	}
	out = mustCtl(t, append([]string{"tables", "drop", "--tree", "links", "--cancel", "--addr", asked.admin}, auth...)...)
	if !strings.Contains(out, "drop requests withdrawn by leader "+leader+": cd02") {
		t.Fatalf("tables drop --cancel: %s", out)
	}
	for _, n := range nodes {
		for deadline := time.Now().Add(5 * time.Second); ingest.DropsPending(n.node.FSM) != nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s still holds drop requests %v after --cancel", n.id, ingest.DropsPending(n.node.FSM))
			}
		}
	}
	for _, bad := range [][]string{{"compact"}, {"compact", "--full", "--cancel"}, {"backfill", "restart"},
		{"tables"}, {"tables", "drop", "--tree", "links", "--tables", "ab01"}, {"tables", "drop", "--tables", "ab01", "--yes"}, {"tables", "drop", "--tree", "links", "--yes"}} {
		if code, _, _ := ctl(t, append(append(bad, "--addr", asked.admin), auth...)...); code != 2 {
			t.Fatalf("%v: exit %d, want 2", bad, code)
		}
	}

	// Leadership moves, asked through a follower.
	var follower *testNode
	for _, n := range nodes {
		if n.id != leader {
			follower = n
			break
		}
	}
	out = mustCtl(t, append([]string{"transfer-leadership", "--addr", follower.admin}, auth...)...)
	if !strings.Contains(out, "leader: ") {
		t.Fatalf("transfer-leadership: %s", out)
	}
	st = statusJSON(t, "a new leader", func(ns []cluster.NodeStatus) bool {
		return settled(3)(ns) && leaderOf(ns) != leader
	}, append([]string{"--addr", all}, auth...)...)
	t.Logf("leader %s after transfer", leaderOf(st))

	// Remove n3 (if it leads, it hands leadership over first).
	if code, out, errs := ctl(t, append([]string{"remove", "--addr", all, "--id", "n3"}, auth...)...); code != 0 || !strings.Contains(out, "removed n3") {
		t.Fatalf("remove n3: exit %d: %s%s", code, out, errs)
	}
	statusJSON(t, "two servers", settled(2), append([]string{"--addr", n1.admin + "," + n2.admin}, auth...)...)
	// n3 cannot come back under its ID.
	if code, _, errs := join(n1.admin, n3); code != 1 || !strings.Contains(errs, "new --id") {
		t.Fatalf("re-join of removed n3: exit %d: %s", code, errs)
	}
	// An ID not in the configuration is refused without --force.
	if code, _, errs := ctl(t, append([]string{"remove", "--addr", n1.admin, "--id", "n9"}, auth...)...); code != 1 || !strings.Contains(errs, "not in the cluster's configuration") {
		t.Fatalf("remove unknown: exit %d: %s", code, errs)
	}

	// With --force, an ID the cluster knows but no longer has in its
	// configuration (a node lost before a peers.json recovery) is recorded
	// as removed; an ID it never knew is still refused by the leader.
	if code, out, errs := ctl(t, append([]string{"remove", "--addr", n1.admin, "--id", "n3", "--force"}, auth...)...); code != 0 {
		t.Fatalf("remove --force of a known ID: exit %d: %s%s", code, out, errs)
	}
	if code, _, errs := ctl(t, append([]string{"remove", "--addr", n1.admin, "--id", "n9", "--force"}, auth...)...); code != 1 || !strings.Contains(errs, "not a member") {
		t.Fatalf("remove --force of an unknown ID: exit %d: %s", code, errs)
	}
	// A removed node, still up, is not taken for the cluster: status asked
	// there first goes on to a node that shows a leader.
	statusJSON(t, "two servers, asked first at the removed node", settled(2), append([]string{"--addr", n3.admin + "," + n1.admin}, auth...)...)

	// Removing the leader hands leadership over first.
	leader = leaderOf(statusJSON(t, "two servers", settled(2), append([]string{"--addr", n1.admin + "," + n2.admin}, auth...)...))
	survivor := n1
	if leader == "n1" {
		survivor = n2
	}
	if code, out, errs := ctl(t, append([]string{"remove", "--addr", n1.admin + "," + n2.admin, "--id", leader}, auth...)...); code != 0 || !strings.Contains(errs, "transferring leadership first") {
		t.Fatalf("remove the leader %s: exit %d: %s%s", leader, code, out, errs)
	}
	st = statusJSON(t, "one server", settled(1), append([]string{"--addr", survivor.admin}, auth...)...)
	if st[0].ID != survivor.id || st[0].State != "Leader" {
		t.Fatalf("after removing the leader: %+v", st)
	}

	// A wrong token: a clear refusal, exit 1.
	bad := filepath.Join(t.TempDir(), "bad-token")
	if err := os.WriteFile(bad, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "--addr", all, "--token-file", bad},
		{"transfer-leadership", "--addr", n1.admin, "--token-file", bad},
		{"join", "--addr", n1.admin, "--token-file", bad, "--id", "n5", "--raft", "127.0.0.1:9", "--admin", "127.0.0.1:9", "--http", "127.0.0.1:9"},
	} {
		if code, _, errs := ctl(t, args...); code != 1 || !strings.Contains(errs, "admin token was refused") {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
	}
	// No token, or a token on the command line: usage errors.
	for _, args := range [][]string{
		{"status", "--addr", n1.admin},
		{"status", "--addr", n1.admin, "--token", tok},
		{"status", "--addr", n1.admin, "-token=" + tok},
		{"join", "--addr", n1.admin, "--token-file", tokenFile, "--id", "n5", "--raft", "nohostport", "--admin", "127.0.0.1:9", "--http", "127.0.0.1:9"},
		{"remove", "--addr", n1.admin, "--token-file", tokenFile},
	} {
		if code, _, errs := ctl(t, args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2: %s", args, code, errs)
		}
	}
	// Nothing answers: exit 1 within --timeout.
	if code, _, _ := ctl(t, "status", "--addr", dead, "--token-file", tokenFile, "--timeout", "2s"); code != 1 {
		t.Fatalf("dead address: exit %d", code)
	}
}
