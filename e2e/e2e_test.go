// Package e2e drives the real binaries: eddy-ctl local up starts eddy-node
// processes on loopback, the tests SIGKILL them and check what users would
// see.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
)

var binDir string

// e2eBinEnv names binaries already built (the chaos schedules' run in
// their own network namespace reuses the outer run's).
const e2eBinEnv = "EDDY_E2E_BIN"

func TestMain(m *testing.M) {
	if dir := os.Getenv(e2eBinEnv); dir != "" {
		binDir = dir
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "eddy-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, b := range []struct{ out, pkg string }{{"eddy-node", "../cmd/node"}, {"eddy-ctl", "../cmd/ctl"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", b.pkg, err)
			os.Exit(1)
		}
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type localNode struct {
	ID    string   `json:"id"`
	PID   int      `json:"pid"`
	HTTP  string   `json:"http"`
	Admin string   `json:"admin"`
	Raft  string   `json:"raft"`
	Bin   string   `json:"bin"`
	Args  []string `json:"args"`
	Log   string   `json:"log"`
}

type localCluster struct {
	TokenFile string      `json:"token_file"`
	Nodes     []localNode `json:"nodes"`
	dir       string
	token     string
}

func ctl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "eddy-ctl"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("eddy-ctl %v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	return out.String()
}

func up(t *testing.T, args ...string) *localCluster {
	t.Helper()
	return upIn(t, t.TempDir(), args...)
}

// upIn is up in a directory the test prepared (a node's data directory
// mounted beforehand).
func upIn(t *testing.T, dir string, args ...string) *localCluster {
	t.Helper()
	lc := &localCluster{dir: dir}
	lc.downAtCleanup(t) // first: a cluster that does not come up healthy still runs
	// The tests' checkers ask each node thousands of 1,000-link pages a
	// second from one address: a trusted client, as an operator's own
	// tooling would be, so the per-client rate is raised out of their way
	// (the limiter still runs; a test that wants the node's limits passes
	// its own --node-arg after these: the last flag wins).
	trusted := []string{"--node-arg=--client-rate=1000000", "--node-arg=--client-burst=10000000", "--node-arg=--client-in-flight=0"}
	ctl(t, append(append([]string{"local", "up", "--dir", dir}, trusted...), args...)...)
	if err := lc.read(); err != nil {
		t.Fatal(err)
	}
	return lc
}

// read loads the cluster eddy-ctl local up described in lc.dir
// (cluster.json) and its admin token.
func (lc *localCluster) read() error {
	b, err := os.ReadFile(filepath.Join(lc.dir, "cluster.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, lc); err != nil {
		return err
	}
	tok, err := os.ReadFile(lc.TokenFile)
	if err != nil {
		return err
	}
	lc.token = strings.TrimSpace(string(tok))
	return nil
}

// downAtCleanup stops the cluster when the test ends, showing the tail of
// every node's log if it failed.
func (lc *localCluster) downAtCleanup(t *testing.T) {
	t.Cleanup(func() {
		exec.Command(filepath.Join(binDir, "eddy-ctl"), "local", "down", "--dir", lc.dir).Run()
		if t.Failed() {
			if len(lc.Nodes) == 0 {
				lc.read() // local up failed after writing cluster.json
			}
			for _, n := range lc.Nodes {
				b, _ := os.ReadFile(n.Log)
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("--- %s log tail:\n%s", n.ID, b)
			}
		}
	})
}

// status asks one node for its own status (no forwarding).
func (lc *localCluster) status(n localNode) (cluster.NodeStatus, error) {
	cl := cluster.AdminClient{Addrs: []string{n.Admin}, Token: lc.token, HTTP: &http.Client{Timeout: time.Second}}
	var st cluster.NodeStatus
	err := cl.Call(context.Background(), http.MethodGet, "/admin/status", nil, &st)
	return st, err
}

func (lc *localCluster) waitFor(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, timeout, err)
}

// leader returns the node every live node agrees leads.
// killLeader waits for a leader, SIGKILLs it, waits for another node to
// lead, restarts the killed one (its PID recorded) and returns it.
func (lc *localCluster) killLeader(t *testing.T) localNode {
	t.Helper()
	var lead localNode
	lc.waitFor(t, "a leader", 15*time.Second, func() error {
		l, err := lc.leader(nil)
		lead = l
		return err
	})
	if err := syscall.Kill(lead.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{lead.ID: true}
	lc.waitFor(t, "a new leader", 15*time.Second, func() error { _, err := lc.leader(skip); return err })
	pid := restart(t, lead)
	for i := range lc.Nodes {
		if lc.Nodes[i].ID == lead.ID {
			lc.Nodes[i].PID = pid
		}
	}
	return lead
}

// leaderStatus returns the leader and the status it reports of itself.
func (lc *localCluster) leaderStatus() (localNode, cluster.NodeStatus, error) {
	l, err := lc.leader(nil)
	if err != nil {
		return l, cluster.NodeStatus{}, err
	}
	st, err := lc.status(l)
	return l, st, err
}

func (lc *localCluster) leader(skip map[string]bool) (localNode, error) {
	var lead string
	for _, n := range lc.Nodes {
		if skip[n.ID] {
			continue
		}
		st, err := lc.status(n)
		if err != nil {
			return localNode{}, err
		}
		if st.Leader == "" || (lead != "" && st.Leader != lead) {
			return localNode{}, fmt.Errorf("%s sees leader %q", n.ID, st.Leader)
		}
		lead = st.Leader
	}
	for _, n := range lc.Nodes {
		if n.ID == lead && !skip[n.ID] {
			return n, nil
		}
	}
	return localNode{}, fmt.Errorf("leader %q is not live", lead)
}

const corpus = "../testdata/jetstream/corpus/"

// A leader SIGKILLed: a new one is elected within 5 s, every committed
// generation and outline survives, and the killed node restarts with the
// same command and catches up.
func TestLeaderKill(t *testing.T) {
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	lc := up(t, "--flush-interval", "200ms", "--source", "replay+file://"+src)
	var before cluster.NodeStatus
	lc.waitFor(t, "the replay is published", 30*time.Second, func() error {
		_, st, err := lc.leaderStatus()
		if err != nil {
			return err
		}
		for _, c := range st.Cursors {
			if strings.HasPrefix(c, "eof:") && st.Generation > 0 {
				before = st
				return nil
			}
		}
		return fmt.Errorf("cursors %v", st.Cursors)
	})
	old, err := lc.leader(nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{old.ID: true}
	var nl localNode
	lc.waitFor(t, "a new leader", 10*time.Second, func() error {
		n, err := lc.leader(skip)
		if err == nil {
			nl = n
		}
		return err
	})
	took := time.Since(start)
	t.Logf("new leader %s elected %v after SIGKILL of %s", nl.ID, took.Round(time.Millisecond), old.ID)
	fmt.Printf("e2e: leader re-election after SIGKILL: %v\n", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("re-election took %v", took)
	}
	// A survivor may hold the last committed entries without having
	// applied them: the old leader died before telling it the commit
	// index, and it learns it from the new leader's first append. So each
	// survivor gets a few heartbeats, not forever, to apply them.
	for _, n := range lc.Nodes {
		if skip[n.ID] {
			continue
		}
		lc.waitFor(t, n.ID+" applies every committed generation and outline", 5*time.Second, func() error {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if st.Generation < before.Generation {
				return fmt.Errorf("%s lost generations: %d < %d", n.ID, st.Generation, before.Generation)
			}
			for k, v := range before.Outlines {
				if st.Outlines[k] < v {
					return fmt.Errorf("%s lost %s outlines: %d < %d", n.ID, k, st.Outlines[k], v)
				}
			}
			return nil
		})
	}
	// The killed node restarts with the same command line and catches up.
	cmd := exec.Command(old.Bin, old.Args...)
	logf, _ := os.OpenFile(old.Log, os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	t.Cleanup(func() { cmd.Process.Kill(); logf.Close() })
	lc.waitFor(t, "the restarted node catches up", 20*time.Second, func() error {
		lst, err := lc.status(nl)
		if err != nil {
			return err
		}
		st, err := lc.status(old)
		if err != nil {
			return err
		}
		if st.Generation != lst.Generation || st.ViewGeneration != lst.Generation {
			return fmt.Errorf("restarted at %d (serving %d), leader at %d", st.Generation, st.ViewGeneration, lst.Generation)
		}
		return nil
	})
}

type linkLine struct {
	Source, Path, Target, Op string
}

// A recorded real capture replays through a cluster, and every node then
// answers exactly the links eddy-ctl links prints for the same file.
func TestReplayMatchesLinks(t *testing.T) {
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	// Expected: per target, the sources of links still live at the end of
	// the capture (wantLinks applies the capture's deletes).
	want := wantLinks(t, "--jetstream", src)
	if len(want) < 100 {
		t.Fatalf("only %d targets", len(want))
	}
	lc := up(t, "--flush-interval", "200ms", "--source", "replay+file://"+src)
	lc.waitFor(t, "every node serves the replay", 30*time.Second, func() error {
		for _, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			done := false
			for _, c := range st.Cursors {
				done = done || strings.HasPrefix(c, "eof:")
			}
			if !done || st.ViewGeneration != st.Generation {
				return fmt.Errorf("%s: cursors %v, serving %d of %d", n.ID, st.Cursors, st.ViewGeneration, st.Generation)
			}
		}
		return nil
	})
	targets := make([]string, 0, len(want))
	for k := range want {
		targets = append(targets, k)
	}
	sort.Strings(targets)
	links := 0
	for _, n := range lc.Nodes {
		for _, tg := range targets {
			exp := want[tg]
			// Constellation's paths, exactly as eddy-ctl links prints them.
			if have := nodeLinks(t, n, tg); !slices.Equal(have, exp) {
				t.Fatalf("%s target %s:\n have %v\n want %v", n.ID, tg, have, exp)
			}
			// listBacklinks: the same sources, in seed 000's paths.
			var resp struct {
				Backlinks map[string][]string `json:"backlinks"`
			}
			getJSON(t, "http://"+n.HTTP+"/xrpc/blue.cerulea.backlinks.listBacklinks?limit=1000&target="+url.QueryEscape(tg), &resp)
			var srcs []string
			for path, ss := range resp.Backlinks {
				if !strings.HasPrefix(path, "$.") {
					t.Fatalf("%s target %s: path %q", n.ID, tg, path)
				}
				srcs = append(srcs, ss...)
			}
			var expSrcs []string
			for _, k := range exp {
				src, _, _ := strings.Cut(k, " ")
				expSrcs = append(expSrcs, src)
			}
			slices.Sort(srcs)
			slices.Sort(expSrcs)
			if !slices.Equal(srcs, expSrcs) {
				t.Fatalf("%s target %s: listBacklinks sources %v, want %v", n.ID, tg, srcs, expSrcs)
			}
			links += len(exp)
		}
	}
	t.Logf("%d targets, %d links compared on %d nodes", len(targets), links, len(lc.Nodes))
}

// With one node SIGKILLed, eddy-ctl query across the three addresses has
// no failed query in a run of 1,000.
func TestQueryFailover(t *testing.T) {
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	lc := up(t, "--flush-interval", "200ms", "--source", "replay+file://"+src)
	lc.waitFor(t, "every node serves the replay", 30*time.Second, func() error {
		for _, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if st.ViewGeneration == 0 || st.ViewGeneration != st.Generation {
				return fmt.Errorf("%s serving %d of %d", n.ID, st.ViewGeneration, st.Generation)
			}
		}
		return nil
	})
	// Kill the first address, so every query meets a dead node first.
	victim := lc.Nodes[0]
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, n := range lc.Nodes {
		addrs = append(addrs, "http://"+n.HTTP)
	}
	target := "at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/3mpsjbtci2c2o"
	failed := 0
	answeredBy := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	jobs := make(chan int)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				cmd := exec.Command(filepath.Join(binDir, "eddy-ctl"), "query", target, "--json", "--addr", strings.Join(addrs, ","))
				out, err := cmd.Output()
				var page struct {
					Node      string              `json:"node"`
					Backlinks map[string][]string `json:"backlinks"`
				}
				mu.Lock()
				if err != nil || json.Unmarshal(out, &page) != nil || len(page.Backlinks["$.subject"]) != 1 {
					failed++
				} else {
					answeredBy[page.Node]++
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 1000; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("1000 queries with %s killed: %d failed, answered by %v", victim.ID, failed, answeredBy)
	fmt.Printf("e2e: 1000 queries with one node SIGKILLed: %d failed\n", failed)
	if failed != 0 {
		t.Fatalf("%d of 1000 queries failed", failed)
	}
	if answeredBy["http://"+victim.HTTP] != 0 {
		t.Fatal("the killed node answered")
	}
}
