package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
)

func init() {
	register("roll", command{
		summary: "rolling upgrade: restart every node in turn, followers first, the leader last: roll --addr ADMIN --restart-cmd CMD",
		run:     runRoll,
	})
}

const rollUsage = `Usage: eddy-ctl roll --addr ADMIN_ADDRS --restart-cmd CMD [--token-file FILE]
                     [--expect-version V] [--max-lag N] [--node-timeout D] [--restart-timeout D] [--dry-run]

A rolling upgrade: replaces every node's process, one at a time, without
taking the service down. Install the new binary first (where the restart
command will start it from), then:

 1. Every member of the configuration must answer on its admin address,
    one leader, every node caught up; otherwise nothing is restarted.
    With --expect-version, a node at another version need only follow
    the leader and apply its log (an old build may not open what an
    upgraded leader wrote: run the roll again to finish it).
 2. Each follower in turn: CMD runs; then the node must answer again, report
    --expect-version if given, and catch up: applied Raft index within
    --max-lag entries of the leader's, serving at least the manifest
    generation the leader had when the node came back. Before each restart
    every other node must be up and caught up, so a majority always stays.
 3. The leader last: leadership is transferred to an upgraded follower, the
    cluster must agree on the new leader, then the old leader is restarted
    the same way.

CMD runs through 'sh -c' with, in its environment:
  EDDY_ROLL_NODE_ID     the node's ID
  EDDY_ROLL_NODE_ADMIN  its admin address      EDDY_ROLL_NODE_HTTP  its query address
  EDDY_ROLL_NODE_RAFT   its Raft address       EDDY_ROLL_NODE_ROLE  follower, or leader (led when the roll began)
  EDDY_ROLL_STEP        e.g. 2/3
It must return after the old process has stopped (it may return before the
new one is ready; a non-zero exit stops the roll). On a systemd host:
  --restart-cmd 'ssh "$EDDY_ROLL_NODE_ID" sudo systemctl restart eddy-node'
For a cluster of 'eddy-ctl local up':
  --restart-cmd 'eddy-ctl local restart --dir DIR --id "$EDDY_ROLL_NODE_ID" --node-bin NEW/eddy-node'

When a node does not come back (or the command fails) the roll stops there,
says which nodes are upgraded and which are untouched, and touches nothing
else: the others still form a majority and serve. Fix the node and run the
same command again: with --expect-version, nodes already at that version
are skipped.

Flags:
`

// Roll defaults.
const (
	rollMaxLagDefault         = 64
	rollNodeTimeoutDefault    = 3 * time.Minute
	rollRestartTimeoutDefault = 5 * time.Minute
	rollPoll                  = 200 * time.Millisecond
	rollDryRunWait            = 10 * time.Second // --dry-run's wait for a healthy cluster
	rollCallTimeout           = 3 * time.Second
	rollRechooseMax           = 5
)

type rollOptions struct {
	restartCmd     string
	expectVersion  string
	maxLag         uint64
	nodeTimeout    time.Duration
	restartTimeout time.Duration
	dryRun         bool
}

func runRoll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("roll", rollUsage, stderr)
	var o rollOptions
	addrs := fs.String("addr", "", "admin API addresses of the nodes, comma-separated (host:port or http://host:port); a member not listed is reached at the admin address it recorded")
	tokenFile := fs.String("token-file", os.Getenv(envTokenFile), "file holding the admin token (default $"+envTokenFile+"; without either, the token is read from $"+envToken+")")
	fs.StringVar(&o.restartCmd, "restart-cmd", "", "shell command that restarts one node on the new binary (required; see above for its environment)")
	fs.StringVar(&o.expectVersion, "expect-version", "", "version every restarted node must report (eddy-node --version); nodes already at it are skipped")
	fs.Uint64Var(&o.maxLag, "max-lag", rollMaxLagDefault, "a node is caught up when its applied Raft index is within this many entries of the leader's")
	fs.DurationVar(&o.nodeTimeout, "node-timeout", rollNodeTimeoutDefault, "how long a restarted node has to answer and catch up, the cluster to agree on a new leader, and the cluster to be healthy before the roll and before each restart (--dry-run: at most 10s)")
	fs.DurationVar(&o.restartTimeout, "restart-timeout", rollRestartTimeoutDefault, "how long the restart command may run")
	fs.BoolVar(&o.dryRun, "dry-run", false, "check the cluster (waiting at most 10s for it to be healthy) and print the plan; restart nothing")
	if err := parseAdminArgs(fs, args); err != nil {
		return err
	}
	if strings.TrimSpace(o.restartCmd) == "" && !o.dryRun {
		return fmt.Errorf("%w: --restart-cmd is required: the shell command that restarts one node (eddy-ctl roll -h)", errUsage)
	}
	if o.maxLag == 0 || o.nodeTimeout <= 0 || o.restartTimeout <= 0 {
		return fmt.Errorf("%w: --max-lag, --node-timeout and --restart-timeout must be positive", errUsage)
	}
	af := adminFlags{addrs: *addrs, tokenFile: *tokenFile, timeout: o.nodeTimeout}
	c, err := af.client(ctx)
	if err != nil {
		return err
	}
	r := &roller{opt: o, token: c.Token, seeds: c.Addrs, out: stdout, errw: stderr}
	return r.run(ctx)
}

// rollNode is one member of the cluster being rolled.
type rollNode struct {
	id, admin, http, raft string
}

type roller struct {
	opt   rollOptions
	token string
	seeds []string
	out   io.Writer
	errw  io.Writer
	nodes []rollNode // sorted by ID
	start time.Time
}

// status asks one node for its own status.
func (r *roller) status(ctx context.Context, admin string) (cluster.NodeStatus, error) {
	cl := cluster.AdminClient{Addrs: []string{admin}, Token: r.token, HTTP: &http.Client{Timeout: rollCallTimeout}}
	var st cluster.NodeStatus
	cctx, cancel := context.WithTimeout(ctx, rollCallTimeout)
	defer cancel()
	if err := cl.Call(cctx, http.MethodGet, "/admin/status", nil, &st); err != nil {
		return st, describeCallErr(cctx, err)
	}
	return st, nil
}

// discover maps the configuration's members to admin addresses: a seed
// address that answers as a node names that node; a member no seed
// answered for is reached at the admin address it recorded.
func (r *roller) discover(ctx context.Context) error {
	byID := map[string]string{}
	var config []cluster.ServerStatus
	var errs []string
	for _, a := range r.seeds {
		st, err := r.status(ctx, a)
		if err != nil {
			if len(callErrorsWith(err, http.StatusUnauthorized)) > 0 {
				return err
			}
			errs = append(errs, err.Error())
			continue
		}
		if prev, dup := byID[st.ID]; dup && prev != a {
			return fmt.Errorf("%w: %s and %s are the same node %s", errUsage, prev, a, st.ID)
		}
		byID[st.ID] = a
		if st.State == "Leader" || config == nil {
			config = st.Servers
		}
	}
	if len(byID) == 0 {
		return fmt.Errorf("no node answered: %s", strings.Join(errs, "; "))
	}
	if len(config) == 0 {
		return errors.New("the nodes that answered are not members of a cluster yet")
	}
	voters := 0
	for _, s := range config {
		if s.Suffrage == "Voter" {
			voters++
		}
		n := rollNode{id: s.ID, admin: byID[s.ID], http: s.HTTP, raft: s.Raft}
		if n.admin == "" {
			n.admin = s.Admin
		}
		if n.admin == "" {
			return fmt.Errorf("member %s recorded no admin address and none of --addr is it: add its admin address to --addr", s.ID)
		}
		r.nodes = append(r.nodes, n)
	}
	for id, a := range byID {
		if !slices.ContainsFunc(r.nodes, func(n rollNode) bool { return n.id == id }) {
			return fmt.Errorf("%s answers as %s, which is not in the cluster's configuration (a removed node?): leave it out of --addr", a, id)
		}
	}
	if voters < 3 {
		return fmt.Errorf("the cluster has %d voters: a rolling upgrade needs at least 3, so that a majority stays up while one restarts (restart a smaller cluster with downtime instead)", voters)
	}
	sort.Slice(r.nodes, func(i, j int) bool { return r.nodes[i].id < r.nodes[j].id })
	return nil
}

// view is one poll of every node.
type view struct {
	st     map[string]cluster.NodeStatus
	errs   map[string]error
	leader string // the leader every answering node agrees on, if they do
}

func (r *roller) poll(ctx context.Context) view {
	v := view{st: map[string]cluster.NodeStatus{}, errs: map[string]error{}}
	type res struct {
		id  string
		st  cluster.NodeStatus
		err error
	}
	ch := make(chan res, len(r.nodes))
	for _, n := range r.nodes {
		go func() {
			st, err := r.status(ctx, n.admin)
			if err == nil && st.ID != n.id {
				err = fmt.Errorf("%s answers as node %s", n.admin, st.ID)
			}
			ch <- res{n.id, st, err}
		}()
	}
	for range r.nodes {
		x := <-ch
		if x.err != nil {
			v.errs[x.id] = x.err
		} else {
			v.st[x.id] = x.st
		}
	}
	leaders := map[string]bool{}
	claim := ""
	for id, st := range v.st {
		leaders[st.Leader] = true
		if st.State == "Leader" {
			if claim != "" {
				claim = "?"
			} else {
				claim = id
			}
		}
	}
	if len(leaders) == 1 && claim != "" && claim != "?" && leaders[claim] {
		v.leader = claim
	}
	return v
}

// caughtUp says why node id is not caught up with the leader, or "".
// target is the generation it must serve.
func (r *roller) caughtUp(v view, id string, target uint64) string {
	if err := v.errs[id]; err != nil {
		return "does not answer: " + oneLine(err)
	}
	if v.leader == "" {
		return "the nodes do not agree on a leader yet"
	}
	st, lst := v.st[id], v.st[v.leader]
	if st.Leader != v.leader {
		return fmt.Sprintf("follows %q, not %s", st.Leader, v.leader)
	}
	if st.AppliedIndex+r.opt.maxLag < lst.AppliedIndex {
		return fmt.Sprintf("applied index %d, leader %d (more than --max-lag %d behind)", st.AppliedIndex, lst.AppliedIndex, r.opt.maxLag)
	}
	if st.ViewGeneration < target && !r.toUpgrade(st.Version) {
		return fmt.Sprintf("serving generation %d, leader had %d", st.ViewGeneration, target)
	}
	return ""
}

// toUpgrade says whether a node of version is one the roll is to restart
// (--expect-version given, and another version): such a node need not
// serve the leader's generation before a restart, only follow the leader
// and apply its log. A build older than the tables the upgraded nodes
// write cannot open them (a roll stopped part way, then a leader change),
// and would otherwise keep the roll from finishing the upgrade that
// fixes it.
func (r *roller) toUpgrade(version string) bool {
	return r.opt.expectVersion != "" && version != r.opt.expectVersion
}

// waitHealthy waits until every node but skip answers, one leader is
// agreed, and each is caught up. It returns the last view.
func (r *roller) waitHealthy(ctx context.Context, skip, what string) (view, error) {
	return r.waitHealthyFor(ctx, skip, what, r.opt.nodeTimeout)
}

// rollWaitSay is how often a wait for the cluster says what it waits for.
const rollWaitSay = 5 * time.Second

// waitHealthyFor is waitHealthy within timeout; every rollWaitSay it says
// what it is waiting for.
func (r *roller) waitHealthyFor(ctx context.Context, skip, what string, timeout time.Duration) (view, error) {
	deadline := time.Now().Add(timeout)
	said := time.Now()
	var targets map[string]uint64
	for {
		v := r.poll(ctx)
		why := ""
		if v.leader != "" {
			if targets == nil {
				// Each node must reach the generation the leader serves now.
				targets = map[string]uint64{}
				for _, n := range r.nodes {
					targets[n.id] = v.st[v.leader].ViewGeneration
				}
			}
			for _, n := range r.nodes {
				if n.id == skip {
					continue
				}
				if w := r.caughtUp(v, n.id, targets[n.id]); w != "" {
					why = n.id + " " + w
					break
				}
			}
		} else {
			why = "no agreed leader"
			for _, n := range r.nodes {
				if err := v.errs[n.id]; err != nil && n.id != skip {
					why = n.id + " does not answer: " + oneLine(err)
					break
				}
			}
		}
		if why == "" {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("%s: not within %v: %s", what, timeout, why)
		}
		if time.Since(said) >= rollWaitSay {
			said = time.Now()
			r.logf("%s: waiting up to %v more: %s", what, time.Until(deadline).Round(time.Second), why)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(rollPoll):
		}
	}
}

func (r *roller) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "[%6.1fs] ", time.Since(r.start).Seconds())
	fmt.Fprintf(r.out, format+"\n", args...)
}

func (r *roller) run(ctx context.Context) error {
	r.start = time.Now()
	if err := r.discover(ctx); err != nil {
		return err
	}
	pre := r.opt.nodeTimeout
	if r.opt.dryRun {
		pre = min(pre, rollDryRunWait) // a check: say what is wrong soon
	}
	v, err := r.waitHealthyFor(ctx, "", "the cluster is healthy before the roll", pre)
	if err != nil {
		return fmt.Errorf("nothing was restarted: %w", err)
	}
	done := map[string]bool{}
	var order []string
	for _, n := range r.nodes {
		st := v.st[n.id]
		if r.opt.expectVersion != "" && st.Version == r.opt.expectVersion {
			done[n.id] = true
			r.logf("%s: already at version %s; skipped", n.id, st.Version)
			continue
		}
		if n.id != v.leader {
			order = append(order, n.id)
		}
	}
	if !done[v.leader] {
		order = append(order, v.leader)
	}
	var desc []string
	for _, id := range order {
		desc = append(desc, fmt.Sprintf("%s (version %s)", id, v.st[id].Version))
	}
	r.logf("roll: %d nodes, leader %s; restarting in turn: %s", len(r.nodes), v.leader, strings.Join(desc, ", "))
	if r.opt.dryRun || len(order) == 0 {
		if len(order) == 0 {
			r.logf("roll: every node already runs %s", r.opt.expectVersion)
		}
		return nil
	}
	firstLeader := v.leader
	rechoose := 0
	for step := 1; len(done) < len(r.nodes); step++ {
		// Pick the next node: a follower not yet restarted; the leader last
		// (leadership may have moved since the roll began).
		v = r.poll(ctx)
		next := ""
		for _, n := range r.nodes {
			if !done[n.id] && n.id != v.leader && v.leader != "" {
				next = n.id
				break
			}
		}
		role := "follower"
		if next == "" {
			if v.leader == "" {
				var err error
				if v, err = r.waitHealthy(ctx, "", "an agreed leader"); err != nil {
					return r.abort(done, "", err)
				}
				step--
				continue
			}
			next, role = v.leader, "leader"
			if err := r.transfer(ctx, next); err != nil {
				return r.abort(done, next, err)
			}
		}
		if next == firstLeader {
			role = "leader"
		}
		// Every other node up and caught up: restarting this one keeps a
		// majority.
		hv, err := r.waitHealthy(ctx, next, "every other node caught up before restarting "+next)
		if err != nil {
			return r.abort(done, next, err)
		}
		if st := hv.st[next]; r.opt.expectVersion != "" && st.Version == r.opt.expectVersion {
			// Restarted meanwhile on the new build (a crash and its
			// service manager): nothing to do.
			done[next] = true
			step--
			r.logf("%s: already at version %s; skipped", next, st.Version)
			continue
		}
		if hv.leader == next {
			// It leads (again) now: choose again, transferring first.
			if rechoose++; rechoose > rollRechooseMax {
				return r.abort(done, next, fmt.Errorf("leadership keeps moving to %s (%d times): the cluster is not stable enough to roll", next, rechoose))
			}
			step--
			r.logf("%s: leads now; choosing again", next)
			continue
		}
		if err := r.restart(ctx, next, role, fmt.Sprintf("%d/%d", step, len(order))); err != nil {
			return r.abort(done, next, err)
		}
		done[next] = true
	}
	v = r.poll(ctx)
	var vers []string
	for _, n := range r.nodes {
		vers = append(vers, n.id+" "+v.st[n.id].Version)
	}
	r.logf("roll: done in %v; leader %s; versions: %s", time.Since(r.start).Round(100*time.Millisecond), v.leader, strings.Join(vers, ", "))
	return nil
}

// transfer moves leadership away from id and waits until every node
// agrees on another leader.
func (r *roller) transfer(ctx context.Context, id string) error {
	r.logf("%s: leader; transferring leadership away", id)
	start := time.Now()
	admin := r.node(id).admin
	cl := &cluster.AdminClient{Addrs: []string{admin}, Token: r.token}
	tctx, cancel := context.WithTimeout(ctx, r.opt.nodeTimeout)
	defer cancel()
	var resp struct {
		Leader string `json:"leader"`
	}
	if err := adminCall(tctx, cl, http.MethodPost, "/admin/transfer-leadership", struct{}{}, &resp, false, r.errw, "roll"); err != nil {
		// The leader may have changed on its own meanwhile: fine if so.
		if v := r.poll(ctx); v.leader == "" || v.leader == id {
			return fmt.Errorf("transfer leadership away from %s: %w", id, err)
		}
	}
	deadline := time.Now().Add(r.opt.nodeTimeout)
	for {
		v := r.poll(ctx)
		if v.leader != "" && v.leader != id && len(v.errs) == 0 {
			r.logf("%s: leader is now %s (%v)", id, v.leader, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after the leadership transfer from %s, the nodes did not agree on a new leader within %v", id, r.opt.nodeTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rollPoll):
		}
	}
}

func (r *roller) node(id string) rollNode {
	for _, n := range r.nodes {
		if n.id == id {
			return n
		}
	}
	return rollNode{id: id}
}

// restart runs the restart command for id and waits for the node to be
// back and caught up.
func (r *roller) restart(ctx context.Context, id, role, step string) error {
	n := r.node(id)
	r.logf("%s: restarting (%s, step %s)", id, role, step)
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, r.opt.restartTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, "sh", "-c", r.opt.restartCmd)
	cmd.Env = append(os.Environ(),
		"EDDY_ROLL_NODE_ID="+n.id, "EDDY_ROLL_NODE_ADMIN="+strings.TrimPrefix(n.admin, "http://"), "EDDY_ROLL_NODE_HTTP="+n.http,
		"EDDY_ROLL_NODE_RAFT="+n.raft, "EDDY_ROLL_NODE_ROLE="+role, "EDDY_ROLL_STEP="+step)
	cmd.Stdout, cmd.Stderr = r.errw, r.errw
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("the restart command for %s did not finish within --restart-timeout %v", id, r.opt.restartTimeout)
		}
		return fmt.Errorf("the restart command for %s failed: %v", id, err)
	}
	r.logf("%s: restart command done (%v)", id, time.Since(start).Round(time.Millisecond))

	// Back: answering, at the expected version, caught up.
	deadline := time.Now().Add(r.opt.nodeTimeout)
	var target uint64
	var back time.Duration
	for {
		v := r.poll(ctx)
		why := ""
		st, err := v.st[id], v.errs[id]
		switch {
		case err != nil:
			why = "does not answer: " + oneLine(err)
		case r.opt.expectVersion != "" && st.Version != r.opt.expectVersion:
			why = fmt.Sprintf("reports version %q, want %q", st.Version, r.opt.expectVersion)
		case v.leader == "":
			why = "the nodes do not agree on a leader yet"
		default:
			if back == 0 {
				back = time.Since(start)
				target = v.st[v.leader].ViewGeneration
			}
			why = r.caughtUp(v, id, target)
		}
		if why == "" {
			lst := v.st[v.leader]
			r.logf("%s: back at version %s after %v, caught up after %v: applied index %d (leader %d), serving generation %d (leader %d), skipped entries %d",
				id, st.Version, back.Round(time.Millisecond), time.Since(start).Round(time.Millisecond),
				st.AppliedIndex, lst.AppliedIndex, st.ViewGeneration, lst.ViewGeneration, st.SkippedEntries)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come back within --node-timeout %v after its restart command: %s", id, r.opt.nodeTimeout, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rollPoll):
		}
	}
}

// abort stops the roll with a message that says where it stands.
func (r *roller) abort(done map[string]bool, at string, err error) error {
	var up, untouched []string
	for _, n := range r.nodes {
		switch {
		case done[n.id]:
			up = append(up, n.id)
		case n.id != at:
			untouched = append(untouched, n.id)
		}
	}
	msg := fmt.Sprintf("roll stopped: %v\n  restarted: %s\n  not touched: %s", err, listOrNone(up), listOrNone(untouched))
	if at != "" {
		msg += fmt.Sprintf("\n  %s: check it (its logs, eddy-ctl status), then run the same command again", at)
		if r.opt.expectVersion != "" {
			msg += " (nodes already at --expect-version are skipped)"
		}
	}
	return errors.New(msg)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
