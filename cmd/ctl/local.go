package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
)

func init() {
	register("local", command{
		summary: "run a local cluster of eddy-node processes on loopback: local up|down|restart --dir DIR [--nodes 3] [--nonvoters N]",
		run:     runLocal,
	})
}

// LocalCluster is DIR/cluster.json, written by `local up`.
type LocalCluster struct {
	Store     string      `json:"store"`
	TokenFile string      `json:"token_file"`
	CertsDir  string      `json:"certs_dir"`
	Nodes     []LocalNode `json:"nodes"`
}

// LocalNode is one node of a local cluster; Args restart it exactly.
type LocalNode struct {
	ID    string   `json:"id"`
	PID   int      `json:"pid"`
	HTTP  string   `json:"http"`
	Admin string   `json:"admin"`
	Raft  string   `json:"raft"`
	Bin   string   `json:"bin"`
	Args  []string `json:"args"`
	Log   string   `json:"log"`
	// Nonvoter: a query node (a Raft non-voter), joined by local up.
	Nonvoter bool `json:"nonvoter,omitempty"`
}

// localUpTimeout bounds how long `local up` waits for a healthy cluster.
const localUpTimeout = 60 * time.Second

func runLocal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "restart" {
		return runLocalRestart(ctx, args[1:], stdout, stderr) // local_restart.go
	}
	if len(args) > 0 && helpAsked(args[0]) {
		fmt.Fprint(stderr, "Usage: eddy-ctl local up|down|restart --dir DIR [flags]\n\nRuns a cluster of local processes. Each subcommand's flags: eddy-ctl local up -h, eddy-ctl local down -h, eddy-ctl local restart -h\n")
		return flag.ErrHelp
	}
	if len(args) == 0 || (args[0] != "up" && args[0] != "down") {
		return fmt.Errorf("local up|down|restart --dir DIR: %w", errUsage)
	}
	fs := flag.NewFlagSet("local "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory of the local cluster (required)")
	nodes := fs.Int("nodes", 3, "number of voters")
	nonvoters := fs.Int("nonvoters", 0, "number of non-voters (query nodes q1, q2, …) beside the voters")
	store := fs.String("store", "", "object store URL (default: file://DIR/store)")
	plc := fs.String("plc", "off", "DID source: off (every DID outlined through Raft) or the URL of a PLC directory the leader follows")
	nodeBin := fs.String("node-bin", "", "eddy-node binary (default: beside eddy-ctl)")
	flushInterval := fs.Duration("flush-interval", 0, "passed to every node (default: the node's)")
	var sources, nodeArgs listFlag
	fs.Var(&nodeArgs, "node-arg", "an eddy-node flag passed to every node, repeatable (e.g. --node-arg=--gc-grace=3s)")
	fs.Var(&sources, "source", "ingest source URL, repeatable (replay+file:///abs/path, jetstream+wss://..., firehose+wss://...)")
	httpHosts := fs.String("http-hosts", "", "loopback IPs, one per node (e.g. 127.0.0.1,127.0.0.2,127.0.0.3): node i serves its query API on the i-th at one port shared by all, as behind a round-robin DNS name (default: 127.0.0.1, a port each)")
	nodeHostsFlag := fs.String("hosts", "", "loopback IPs, one per node (e.g. 127.0.0.11,127.0.0.12,127.0.0.13): node i binds its Raft, admin and (without --http-hosts) query addresses on the i-th, and its connections to peers leave from it (--source-addr), so that rules on addresses can cut nodes apart (default: 127.0.0.1)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("--dir is required: %w", errUsage)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if args[0] == "down" {
		return localDown(abs, stdout)
	}
	if *nodes < 1 || *nodes > 9 {
		return fmt.Errorf("--nodes %d: 1 to 9: %w", *nodes, errUsage)
	}
	if *nonvoters < 0 || *nonvoters > 9 {
		return fmt.Errorf("--nonvoters %d: 0 to 9: %w", *nonvoters, errUsage)
	}
	bin := *nodeBin
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bin = filepath.Join(filepath.Dir(self), "eddy-node")
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("eddy-node binary: %w (build it with make build, or pass --node-bin)", err)
	}
	hosts, err := loopbackHosts("--http-hosts", *httpHosts, *nodes+*nonvoters)
	if err != nil {
		return err
	}
	nodeHosts, err := loopbackHosts("--hosts", *nodeHostsFlag, *nodes+*nonvoters)
	if err != nil {
		return err
	}
	return localUp(ctx, abs, bin, localShape{voters: *nodes, nonvoters: *nonvoters}, *store, *plc, *flushInterval, sources, nodeArgs, hosts, nodeHosts, stdout)
}

// loopbackHosts parses a flag's comma-separated loopback IPs, one per node
// (nil when the flag is empty).
func loopbackHosts(name, v string, nodes int) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	hosts := strings.Split(v, ",")
	if len(hosts) != nodes {
		return nil, fmt.Errorf("%s: %d addresses for %d nodes: %w", name, len(hosts), nodes, errUsage)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("%s: %q is not a loopback IP: %w", name, h, errUsage)
		}
	}
	return hosts, nil
}

// sharedPort finds one TCP port free on every host.
func sharedPort(hosts []string) (string, error) {
	var last error
	for try := 0; try < 50; try++ {
		a, err := freePort()
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(a)
		ok := true
		for _, h := range hosts {
			l, err := net.Listen("tcp", net.JoinHostPort(h, port))
			if err != nil {
				ok, last = false, err
				break
			}
			l.Close()
		}
		if ok {
			return port, nil
		}
	}
	return "", fmt.Errorf("no port free on every one of %v: %v", hosts, last)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func freePort() (string, error) { return freePortOn("127.0.0.1") }

// freePortOn returns host:port with a port free on host.
func freePortOn(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// localShape is how many nodes of each suffrage local up starts.
type localShape struct{ voters, nonvoters int }

func (s localShape) total() int { return s.voters + s.nonvoters }

// (Over 120 lines: one start-up sequence read in order: ports, processes, joins, health.)
func localUp(ctx context.Context, dir, bin string, shape localShape, store, plc string, flushInterval time.Duration, sources, nodeArgs, httpHosts, nodeHosts []string, stdout io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, "cluster.json")); err == nil {
		return fmt.Errorf("%s already holds a cluster (cluster.json); run local down, or remove the directory", dir)
	}
	certs := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		return err
	}
	if store == "" {
		store = "file://" + filepath.Join(dir, "store")
	}
	if _, err := os.Stat(filepath.Join(certs, "ca.pem")); err != nil {
		if err := cluster.MakeCA(certs); err != nil {
			return err
		}
	}
	tokenFile := filepath.Join(certs, "admin-token")
	if _, err := makeAdminToken(tokenFile); err != nil {
		return err
	}
	lc := LocalCluster{Store: store, TokenFile: tokenFile, CertsDir: certs}
	httpPort := ""
	if len(httpHosts) > 0 {
		p, err := sharedPort(httpHosts)
		if err != nil {
			return err
		}
		httpPort = p
	}
	nodes, err := localNodes(dir, certs, bin, shape, nodeHosts)
	if err != nil {
		return err
	}
	lc.Nodes = nodes
	// The node's addresses and flags: its ports are chosen just before it
	// starts, and chosen again, over an empty data directory, if it could
	// not bind them (it never listened, so nothing knows the first ones).
	configure := func(i int, retry bool) error {
		ln := &lc.Nodes[i]
		if retry {
			if err := emptyDir(filepath.Join(dir, ln.ID)); err != nil {
				return err
			}
		}
		host := "127.0.0.1"
		if nodeHosts != nil {
			host = nodeHosts[i]
		}
		var addrs [3]string
		for j := range addrs {
			a, err := freePortOn(host)
			if err != nil {
				return err
			}
			addrs[j] = a
		}
		ln.Raft, ln.Admin, ln.HTTP = addrs[0], addrs[1], addrs[2]
		if httpPort != "" {
			ln.HTTP = net.JoinHostPort(httpHosts[i], httpPort)
		}
		ln.Args = []string{
			"--id", ln.ID, "--data-dir", filepath.Join(dir, ln.ID), "--raft-addr", ln.Raft, "--admin-addr", ln.Admin, "--http-addr", ln.HTTP,
			"--certs-dir", certs, "--admin-token-file", tokenFile, "--store", store, "--plc", plc,
		}
		if nodeHosts != nil {
			ln.Args = append(ln.Args, "--source-addr", host)
		}
		if flushInterval > 0 {
			ln.Args = append(ln.Args, "--flush-interval", flushInterval.String())
		}
		for _, s := range sources {
			ln.Args = append(ln.Args, "--source", s)
		}
		ln.Args = append(ln.Args, nodeArgs...)
		switch {
		case i == 0:
			ln.Args = append(ln.Args, "--bootstrap")
		case !ln.Nonvoter:
			ln.Args = append(ln.Args, "--join", lc.Nodes[0].Admin)
		}
		// A non-voter starts without --join: local up joins it once it
		// listens (joinNonvoter); after that it restarts as a member.
		return nil
	}
	// Start the bootstrap node and wait for it to lead; then start the
	// others, publish the cluster (cluster.json: watchers start here), and
	// wait for them to listen, starting again on fresh ports any that
	// could not bind.
	reconf := func(i int) func(bool) error { return func(retry bool) error { return configure(i, retry) } }
	if err := startLocalNodeFresh(ctx, &lc.Nodes[0], reconf(0)); err != nil {
		localKill(lc)
		return err
	}
	if err := waitHealthy(ctx, lc, localShape{voters: 1}); err != nil {
		localKill(lc)
		return err
	}
	from := make([]int64, len(lc.Nodes))
	for i := 1; i < len(lc.Nodes); i++ {
		f, err := startConfigured(&lc.Nodes[i], reconf(i), false)
		if err != nil {
			localKill(lc)
			return err
		}
		from[i] = f
	}
	clusterJSON := filepath.Join(dir, "cluster.json")
	if err := writeJSONFile(clusterJSON, lc); err != nil {
		localKill(lc)
		return err
	}
	for i := 1; i < len(lc.Nodes); i++ {
		restarted, err := awaitLocalNode(ctx, &lc.Nodes[i], from[i], reconf(i))
		if err == nil && restarted {
			err = writeJSONFile(clusterJSON, lc) // its new addresses
		}
		if err == nil && lc.Nodes[i].Nonvoter {
			err = joinNonvoter(ctx, lc, lc.Nodes[i])
		}
		if err != nil {
			localKill(lc)
			return err
		}
	}
	if err := waitHealthy(ctx, lc, shape); err != nil {
		return fmt.Errorf("%w (the nodes are still running; see their logs in %s; stop them with local down)", err, dir)
	}
	printLocalUp(stdout, dir, lc, shape)
	return nil
}

// localNodes names the nodes of a local cluster, voters n1… then
// non-voters q1…, each with a certificate.
func localNodes(dir, certs, bin string, shape localShape, hosts []string) ([]LocalNode, error) {
	var nodes []LocalNode
	for i := 1; i <= shape.total(); i++ {
		id, nonvoter := fmt.Sprintf("n%d", i), i > shape.voters
		if nonvoter {
			id = fmt.Sprintf("q%d", i-shape.voters)
		}
		if _, err := os.Stat(filepath.Join(certs, id+".pem")); err != nil {
			names := []string{"127.0.0.1", "localhost"}
			if hosts != nil {
				names = append(names, hosts[i-1])
			}
			if err := cluster.MakeNodeCert(certs, id, names); err != nil {
				return nil, err
			}
		}
		nodes = append(nodes, LocalNode{ID: id, Bin: bin, Log: filepath.Join(dir, id+".log"), Nonvoter: nonvoter})
	}
	return nodes, nil
}

// printLocalUp says what local up started.
func printLocalUp(w io.Writer, dir string, lc LocalCluster, shape localShape) {
	what := fmt.Sprintf("%d nodes", shape.voters)
	if shape.nonvoters > 0 {
		what = fmt.Sprintf("%d voters and %d non-voters", shape.voters, shape.nonvoters)
	}
	fmt.Fprintf(w, "local cluster of %s up in %s\n", what, dir)
	for _, nd := range lc.Nodes {
		mark := ""
		if nd.Nonvoter {
			mark = "  (non-voter)"
		}
		fmt.Fprintf(w, "  %s pid %d  http %s  admin %s  raft %s%s\n", nd.ID, nd.PID, nd.HTTP, nd.Admin, nd.Raft, mark)
	}
}

// joinNonvoter asks the cluster (its first node, which leads or forwards)
// to add nd as a non-voter, retrying while no leader is known.
func joinNonvoter(ctx context.Context, lc LocalCluster, nd LocalNode) error {
	tok, err := os.ReadFile(lc.TokenFile)
	if err != nil {
		return err
	}
	var addrs []string
	for _, v := range lc.Nodes {
		if !v.Nonvoter {
			addrs = append(addrs, v.Admin)
		}
	}
	cl := cluster.AdminClient{Addrs: addrs, Token: strings.TrimSpace(string(tok)), HTTP: &http.Client{Timeout: 15 * time.Second}}
	body, err := json.Marshal(cluster.JoinRequest{ID: nd.ID, Raft: nd.Raft, Admin: nd.Admin, HTTP: nd.HTTP, Suffrage: "nonvoter"})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(localUpTimeout)
	for {
		err := cl.Call(ctx, http.MethodPost, "/admin/join", body, nil)
		var ce *cluster.CallError
		if err == nil || (errors.As(err, &ce) && ce.Status < 500) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("join %s as a non-voter: %w", nd.ID, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StartNode starts one node process in its own session (it outlives
// eddy-ctl), logging to its log file; it returns the pid.
func StartNode(n *LocalNode) (int, error) {
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(n.Bin, n.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", n.ID, err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() // reap it if it exits while eddy-ctl runs
	return pid, nil
}

// localStartTries bounds how often local up gives a node new ports after
// it could not bind the ones chosen (a port freed by freePort can be taken,
// as another connection's local port, before the node binds it).
const localStartTries = 3

// localListenWait bounds how long a started node may take to listen.
const localListenWait = 30 * time.Second

// startLocalNodeFresh configures n (choosing its ports), starts it and
// waits until it listens (see awaitLocalNode).
func startLocalNodeFresh(ctx context.Context, n *LocalNode, configure func(retry bool) error) error {
	from, err := startConfigured(n, configure, false)
	if err != nil {
		return err
	}
	_, err = awaitLocalNode(ctx, n, from, configure)
	return err
}

// startConfigured configures n (retry: fresh ports over an empty data
// directory) and starts it; it returns the offset in n's log where this
// run's lines begin.
func startConfigured(n *LocalNode, configure func(retry bool) error, retry bool) (int64, error) {
	if err := configure(retry); err != nil {
		return 0, err
	}
	var from int64
	if fi, err := os.Stat(n.Log); err == nil {
		from = fi.Size() // earlier runs' lines do not count
	}
	pid, err := StartNode(n)
	if err != nil {
		return 0, err
	}
	n.PID = pid
	return from, nil
}

// awaitLocalNode waits until the started n listens: it logs "node
// started" once its Raft, query and admin addresses are bound. A node that
// exits first because an address is in use is configured and started
// again (restarted reports it), at most localStartTries starts in all; any
// other exit is an error with its log's tail.
func awaitLocalNode(ctx context.Context, n *LocalNode, from int64, configure func(retry bool) error) (restarted bool, err error) {
	for try := 1; ; try++ {
		listening, err := waitListening(ctx, n, from)
		if err != nil || listening {
			return restarted, err
		}
		tail := logTail(n.Log, 2000)
		if !strings.Contains(tail, "address already in use") || try == localStartTries {
			return restarted, fmt.Errorf("%s (pid %d) exited before listening; its log %s ends:\n%s", n.ID, n.PID, n.Log, tail)
		}
		if from, err = startConfigured(n, configure, true); err != nil {
			return restarted, err
		}
		restarted = true
	}
}

// nodeStartedLine is what eddy-node logs once it listens on every address.
const nodeStartedLine = "node started"

// waitListening waits until n's log, past offset from, says it started
// (true) or its process has exited (false).
func waitListening(ctx context.Context, n *LocalNode, from int64) (bool, error) {
	deadline := time.Now().Add(localListenWait)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(n.Log); err == nil && int64(len(b)) > from && bytes.Contains(b[from:], []byte(nodeStartedLine)) {
			return true, nil
		}
		if !alive(n.PID) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false, fmt.Errorf("%s (pid %d) has not logged %q after %v; see its log %s", n.ID, n.PID, nodeStartedLine, localListenWait, n.Log)
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// waitHealthy waits until the first shape.total() nodes are the whole
// configuration, shape.voters voters and shape.nonvoters non-voters, with
// one leader every node knows.
func waitHealthy(ctx context.Context, lc LocalCluster, shape localShape) error {
	n := shape.total()
	tok, err := os.ReadFile(lc.TokenFile)
	if err != nil {
		return err
	}
	var addrs []string
	for _, nd := range lc.Nodes[:n] {
		addrs = append(addrs, nd.Admin)
	}
	cl := cluster.AdminClient{Addrs: addrs, Token: strings.TrimSpace(string(tok)), HTTP: &http.Client{Timeout: 2 * time.Second}}
	deadline := time.Now().Add(localUpTimeout)
	var last error
	for time.Now().Before(deadline) {
		var st []cluster.NodeStatus
		err := cl.Call(ctx, http.MethodGet, "/admin/cluster", nil, &st)
		if err == nil {
			err = healthy(st, shape)
		}
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not healthy within %v: %v", localUpTimeout, last)
}

func healthy(st []cluster.NodeStatus, shape localShape) error {
	if n := shape.total(); len(st) != n {
		return fmt.Errorf("%d of %d nodes in the configuration", len(st), n)
	}
	leaders := 0
	for _, s := range st {
		if s.State == "Leader" {
			var v, nv int
			for _, sv := range s.Servers {
				switch sv.Suffrage {
				case cluster.SuffrageVoter:
					v++
				case cluster.SuffrageNonvoter:
					nv++
				}
			}
			if v != shape.voters || nv != shape.nonvoters {
				return fmt.Errorf("%d voters and %d non-voters in the configuration, want %d and %d", v, nv, shape.voters, shape.nonvoters)
			}
		}
		if s.Error != "" {
			return fmt.Errorf("node %s: %s", s.ID, s.Error)
		}
		if s.State == "Leader" {
			leaders++
		}
		if s.Leader == "" {
			return fmt.Errorf("node %s knows no leader", s.ID)
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d leaders", leaders)
	}
	return nil
}

// ReadLocalCluster reads DIR/cluster.json.
func ReadLocalCluster(dir string) (LocalCluster, error) {
	var lc LocalCluster
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return lc, err
	}
	return lc, json.Unmarshal(b, &lc)
}

func localKill(lc LocalCluster) {
	for _, n := range lc.Nodes {
		if n.PID > 0 {
			syscall.Kill(n.PID, syscall.SIGKILL)
		}
	}
}

// localDown stops every node: SIGTERM (a leader publishes and hands over),
// then SIGKILL after a grace period.
func localDown(dir string, stdout io.Writer) error {
	lc, err := ReadLocalCluster(dir)
	if err != nil {
		return fmt.Errorf("no local cluster in %s: %w", dir, err)
	}
	for _, n := range lc.Nodes {
		if n.PID > 0 {
			syscall.Kill(n.PID, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range lc.Nodes {
		for n.PID > 0 && alive(n.PID) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if n.PID > 0 && alive(n.PID) {
			syscall.Kill(n.PID, syscall.SIGKILL)
		}
	}
	if err := os.Remove(filepath.Join(dir, "cluster.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Fprintf(stdout, "local cluster in %s stopped\n", dir)
	return nil
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) < 3 || f[2] != "Z"
}

// emptyDir removes what a directory holds and keeps the directory: it may
// be a mount point (a node's data directory on its own filesystem), which
// cannot be removed (EBUSY).
func emptyDir(path string) error {
	entries, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
