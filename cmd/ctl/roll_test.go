package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
)

// rollCluster is three real Raft nodes in this process. The restart
// command cannot restart a goroutine, so it marks a node down instead: its
// admin API refuses connections for a second after DIR/down-ID is written
// (DIR/dead-ID: for good), as a restarting process would.
type rollCluster struct {
	dir, tokenFile string
	nodes          []*testNode
}

func startRollCluster(t *testing.T) *rollCluster {
	t.Helper()
	noTokenEnv(t)
	rc := &rollCluster{dir: t.TempDir()}
	certDir, tokenFile, tok := newCerts(t, rc.dir, "n1,n2,n3")
	rc.tokenFile = tokenFile
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range rc.nodes {
			n.srv.Close()
			n.node.Close(ctx)
		}
	})
	for i, id := range []string{"n1", "n2", "n3"} {
		n := startNode(t, certDir, tok, id, i == 0)
		inner := n.srv.Handler
		n.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if rc.down(id) {
				if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
					c.Close()
				}
				return
			}
			inner.ServeHTTP(w, r)
		})
		rc.nodes = append(rc.nodes, n)
	}
	for _, n := range rc.nodes[1:] {
		mustCtl(t, "join", "--addr", rc.nodes[0].admin, "--token-file", rc.tokenFile, "--id", n.id, "--raft", n.raft, "--admin", n.admin, "--http", "127.0.0.1:1")
	}
	statusJSON(t, "three settled nodes", settled(3), "--addr", rc.addrs(), "--token-file", rc.tokenFile)
	return rc
}

func (rc *rollCluster) down(id string) bool {
	if _, err := os.Stat(filepath.Join(rc.dir, "dead-"+id)); err == nil {
		return true
	}
	st, err := os.Stat(filepath.Join(rc.dir, "down-"+id))
	return err == nil && time.Since(st.ModTime()) < time.Second
}

func (rc *rollCluster) addrs() string {
	var a []string
	for _, n := range rc.nodes {
		a = append(a, n.admin)
	}
	return strings.Join(a, ",")
}

func (rc *rollCluster) leader(t *testing.T) string {
	t.Helper()
	return leaderOf(statusJSON(t, "a settled cluster", settled(3), "--addr", rc.addrs(), "--token-file", rc.tokenFile))
}

// restarts returns the lines the restart command logged.
func (rc *rollCluster) restarts(t *testing.T) []string {
	b, err := os.ReadFile(filepath.Join(rc.dir, "restarts"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (rc *rollCluster) roll(t *testing.T, restartCmd string, extra ...string) (int, string, string) {
	t.Helper()
	cmd := fmt.Sprintf(`cd %q && echo "$EDDY_ROLL_STEP $EDDY_ROLL_NODE_ID $EDDY_ROLL_NODE_ROLE $EDDY_ROLL_NODE_ADMIN $EDDY_ROLL_NODE_RAFT" >> restarts && %s`, rc.dir, restartCmd)
	code, out, errs := ctl(t, append([]string{"roll", "--addr", rc.addrs(), "--token-file", rc.tokenFile, "--restart-cmd", cmd}, extra...)...)
	t.Logf("roll: exit %d\n%s%s", code, out, errs)
	return code, out, errs
}

// Followers first, each waited for; leadership moves; the old leader last.
func TestRoll(t *testing.T) {
	rc := startRollCluster(t)
	lead := rc.leader(t)
	code, out, _ := rc.roll(t, `touch "down-$EDDY_ROLL_NODE_ID"`, "--node-timeout", "30s")
	if code != 0 {
		t.Fatalf("roll: exit %d", code)
	}
	lines := rc.restarts(t)
	if len(lines) != 3 {
		t.Fatalf("restart command ran %d times: %q", len(lines), lines)
	}
	seen := map[string]bool{}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 || f[0] != fmt.Sprintf("%d/3", i+1) {
			t.Fatalf("restart %d: %q", i, l)
		}
		id, role := f[1], f[2]
		seen[id] = true
		n := rc.node(id)
		if n == nil || f[3] != n.admin || f[4] != n.raft {
			t.Fatalf("restart %d: environment %q does not name node %s", i, l, id)
		}
		if last := i == 2; (id == lead) != last || (role == "leader") != last {
			t.Fatalf("restart %d of %s as %s; the leader was %s: %q", i, id, role, lead, lines)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("restarted %v", seen)
	}
	// Each restart was waited for: the node was down after the command.
	if n := strings.Count(out, "back at version dev"); n != 3 {
		t.Fatalf("%d nodes reported back:\n%s", n, out)
	}
	if !strings.Contains(out, lead+": leader is now ") || !strings.Contains(out, "roll: done") {
		t.Fatalf("output:\n%s", out)
	}
	if now := rc.leader(t); now == lead {
		t.Fatalf("%s still leads after the roll", lead)
	}

	// With --expect-version of the running version, nothing is left to do.
	code, out, _ = rc.roll(t, "true", "--expect-version", "dev")
	if code != 0 || strings.Count(out, "already at version dev") != 3 || len(rc.restarts(t)) != 3 {
		t.Fatalf("second roll: exit %d\n%s", code, out)
	}
	// --dry-run restarts nothing.
	code, out, _ = rc.roll(t, "false", "--dry-run")
	if code != 0 || !strings.Contains(out, "restarting in turn: ") || len(rc.restarts(t)) != 3 {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
}

// killFollower marks a node other than lead down for good and returns it.
func (rc *rollCluster) killFollower(t *testing.T, lead string) string {
	t.Helper()
	var follower string
	for _, n := range rc.nodes {
		if n.id != lead {
			follower = n.id
		}
	}
	if err := os.WriteFile(filepath.Join(rc.dir, "dead-"+follower), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return follower
}

func (rc *rollCluster) node(id string) *testNode {
	for _, n := range rc.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// A node that does not come back, a failing command, a cluster unhealthy
// before the start: the roll stops at once, says where it stands, and
// touches nothing more.
func TestRollAborts(t *testing.T) {
	rc := startRollCluster(t)
	lead := rc.leader(t)

	// The node never reports the expected version.
	code, _, errs := rc.roll(t, "true", "--expect-version", "v9", "--node-timeout", "2s")
	lines := rc.restarts(t)
	if code != 1 || len(lines) != 1 {
		t.Fatalf("exit %d, %d restarts", code, len(lines))
	}
	first := strings.Fields(lines[0])[1]
	if first == lead || !strings.Contains(errs, first+` did not come back within --node-timeout 2s after its restart command: reports version "dev", want "v9"`) ||
		!strings.Contains(errs, "restarted: none") || !strings.Contains(errs, "not touched: ") || !strings.Contains(errs, "run the same command again") {
		t.Fatalf("stderr:\n%s", errs)
	}

	// The command fails.
	code, _, errs = rc.roll(t, "exit 3")
	if code != 1 || !strings.Contains(errs, "the restart command for ") || !strings.Contains(errs, "exit status 3") || len(rc.restarts(t)) != 2 {
		t.Fatalf("exit %d, %d restarts:\n%s", code, len(rc.restarts(t)), errs)
	}

	// A node is down before the start: nothing is restarted.
	follower := rc.killFollower(t, lead)
	code, _, errs = rc.roll(t, "true", "--node-timeout", "1s")
	if code != 1 || !strings.Contains(errs, "nothing was restarted") || !strings.Contains(errs, follower+" does not answer") || len(rc.restarts(t)) != 2 {
		t.Fatalf("exit %d, %d restarts:\n%s", code, len(rc.restarts(t)), errs)
	}

	// Bad arguments: exit 2 before anything is asked.
	for _, args := range [][]string{
		{"roll", "--addr", rc.addrs(), "--token-file", rc.tokenFile},
		{"roll", "--addr", rc.addrs(), "--token", "x", "--restart-cmd", "true"},
		{"roll", "--addr", rc.addrs(), "--token-file", rc.tokenFile, "--restart-cmd", "true", "--max-lag", "0"},
		{"roll", "--token-file", rc.tokenFile, "--restart-cmd", "true"},
	} {
		if code, _, errs := ctl(t, args...); code != 2 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
	}
	if code, out, _ := ctl(t, "roll", "-h"); code != 0 {
		t.Fatalf("roll -h: exit %d", code)
	} else if _, _, help := ctl(t, "roll", "-h"); !strings.Contains(help+out, "EDDY_ROLL_NODE_ID") {
		t.Fatalf("roll -h does not document the restart command's environment:\n%s", help)
	}
}

// local restart stops a node's process (SIGTERM), starts it again, on a new
// binary if asked, and records the new pid; a dead binary is reported; a
// pid that names another process is never signalled.
func TestLocalRestart(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "n1")
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A stand-in node: a real process whose command line names its data
	// directory, that exits on SIGTERM.
	loop := `echo "$0 $*" >> ` + filepath.Join(dir, "started") + `; trap 'exit 0' TERM; while :; do sleep 0.05; done`
	oldBin, newBin := script("node-old", loop), script("node-new", loop)
	badBin := script("node-bad", "exit 1")
	n := LocalNode{ID: "n1", Bin: oldBin, Args: []string{"--id", "n1", "--data-dir", data}, Log: filepath.Join(dir, "n1.log")}
	pid, err := StartNode(&n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if lc, err := ReadLocalCluster(dir); err == nil {
			localKill(lc)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	})
	n.PID = pid
	if err := writeJSONFile(filepath.Join(dir, "cluster.json"), LocalCluster{Nodes: []LocalNode{n}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)

	out := mustCtl(t, "local", "restart", "--dir", dir, "--id", "n1", "--node-bin", newBin)
	lc, err := ReadLocalCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := lc.Nodes[0]
	if alive(pid) || got.PID == pid || !alive(got.PID) || got.Bin != newBin {
		t.Fatalf("after restart: old pid %d alive %v; now %+v\n%s", pid, alive(pid), got, out)
	}
	if !strings.Contains(out, "n1: stopped pid "+strconv.Itoa(pid)+" (SIGTERM") || !strings.Contains(out, "started pid "+strconv.Itoa(got.PID)) {
		t.Fatalf("output:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "started")); !strings.Contains(string(b), newBin+" --id n1 --data-dir "+data) {
		t.Fatalf("started:\n%s", b)
	}

	// A binary that exits at once: reported, with the log.
	code, _, errs := ctl(t, "local", "restart", "--dir", dir, "--id", "n1", "--node-bin", badBin)
	if code != 1 || !strings.Contains(errs, "exited at once") {
		t.Fatalf("bad binary: exit %d: %s", code, errs)
	}
	// The recorded pid now names another process (this test): left alone.
	lc, _ = ReadLocalCluster(dir)
	lc.Nodes[0].PID, lc.Nodes[0].Bin = os.Getpid(), newBin
	writeJSONFile(filepath.Join(dir, "cluster.json"), lc)
	out = mustCtl(t, "local", "restart", "--dir", dir, "--id", "n1")
	if !strings.Contains(out, "is another process now; not stopping it") {
		t.Fatalf("output:\n%s", out)
	}
	// An unknown node: a usage error that lists the nodes.
	if code, _, errs := ctl(t, "local", "restart", "--dir", dir, "--id", "n7"); code != 2 || !strings.Contains(errs, "nodes: n1") {
		t.Fatalf("unknown node: exit %d: %s", code, errs)
	}
	var raw map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("cluster.json: %v", err)
	}
}

// A roll stopped part way, then a leader change: a node still on the old
// build cannot open the tables the upgraded leader writes, so it never
// serves the leader's generation. With --expect-version such a node need
// only follow the leader and apply its log before the roll goes on (it is
// the one the roll restarts); a node already at that version must serve
// the generation, and every node must still apply the log.
func TestRollTakesAnOldNodeThatCannotServe(t *testing.T) {
	r := &roller{opt: rollOptions{expectVersion: "v2", maxLag: 64}}
	v := view{leader: "n1", errs: map[string]error{}, st: map[string]cluster.NodeStatus{
		"n1": {ID: "n1", Leader: "n1", Version: "v2", AppliedIndex: 500, ViewGeneration: 67},
		"n2": {ID: "n2", Leader: "n1", Version: "v2", AppliedIndex: 500, ViewGeneration: 67},
		"n3": {ID: "n3", Leader: "n1", Version: "v1", AppliedIndex: 499, ViewGeneration: 53},
	}}
	if why := r.caughtUp(v, "n3", 67); why != "" {
		t.Fatalf("the old node, following and applying: %q; want caught up", why)
	}
	st := v.st["n2"]
	st.ViewGeneration = 53
	v.st["n2"] = st
	if why := r.caughtUp(v, "n2", 67); !strings.Contains(why, "serving generation 53, leader had 67") {
		t.Fatalf("an upgraded node behind: %q", why)
	}
	st = v.st["n3"]
	st.AppliedIndex = 100
	v.st["n3"] = st
	if why := r.caughtUp(v, "n3", 67); !strings.Contains(why, "more than --max-lag") {
		t.Fatalf("an old node that does not apply the log: %q", why)
	}
	// Without --expect-version every node must serve the generation.
	r.opt.expectVersion = ""
	st.AppliedIndex = 499
	v.st["n3"] = st
	if why := r.caughtUp(v, "n3", 67); !strings.Contains(why, "serving generation 53") {
		t.Fatalf("without --expect-version: %q", why)
	}
}

// A dry run with a member down says so within seconds (it waited the whole
// --node-timeout, silent), and a wait says what it waits for as it goes.
func TestRollDryRunWithAMemberDown(t *testing.T) {
	rc := startRollCluster(t)
	follower := rc.killFollower(t, rc.leader(t))
	start := time.Now()
	code, out, errs := rc.roll(t, "false", "--dry-run")
	took := time.Since(start)
	if code != 1 || !strings.Contains(errs, "nothing was restarted") || !strings.Contains(errs, follower+" does not answer") || took > 25*time.Second {
		t.Fatalf("dry run with %s down: exit %d after %v:\n%s%s", follower, code, took, out, errs)
	}
	if !strings.Contains(out, "the cluster is healthy before the roll: waiting up to ") || !strings.Contains(out, follower+" does not answer") {
		t.Fatalf("the wait did not say what it waited for:\n%s", out)
	}
}
