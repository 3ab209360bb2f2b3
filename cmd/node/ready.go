package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/query"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// readiness decides whether this node should be sent queries. It is the
// one place that does, in two ways:
//
// /readyz (state, handler): ready while the served manifest is fresh. It
// measures, every poll interval:
//
//   - a leader is known, and a follower heard from it (Raft last contact)
//     within the bound;
//   - a follower asks the leader for the manifest generation it has
//     (GET /admin/status) and remembers when it first saw each one; it is
//     stale once it has not served a generation the leader had for longer
//     than the bound, or when it could not ask the leader for that long;
//   - any node: the view it serves has not trailed the generation its own
//     replicated state applied for longer than the bound (tables it cannot
//     open).
//
// So a node cut off from the leader turns unready after the bound, and
// turns ready again only once it serves what the leader had.
//
// The query gate (caughtUp, the query server's Ready: 503 NotReady while
// it fails): a restarted node answers queries only once it has applied
// the log it had at start and what the leader made committed since (or
// the bound passed); from then on it answers unless its view goes stale
// (stale; an election alone does not stop it, and a node cut off from
// every leader answers, saying so: unsure). run watches the condition in the background, so a
// node that caught up before any query came is not refused by a later
// election.
type readiness struct {
	node  *cluster.Node
	views *query.Views
	// store, when set, is probed every poll: a node whose object store
	// does not answer is not ready (its cold queries would fail).
	store *objstore.Guard
	bound time.Duration
	every time.Duration
	log   hclog.Logger // failed asks of the leader; nil: not logged
	// leaderGeneration asks the leader (its admin address) for its applied
	// manifest generation.
	leaderGeneration func(ctx context.Context, adminAddr string) (uint64, error)

	// The query gate: the log index and time at start, and whether the
	// node has caught up since (for good).
	// startCommand is the last command entry of the log at start: the
	// state machine applies at least that far before queries are
	// answered (found once: the log at start does not change).
	startCommand uint64
	started      time.Time
	caught       atomic.Bool
	lastLed      atomic.Int64 // UnixNano when this node was last seen leading (0: never)

	mu struct {
		sync.Mutex
		seen         []seenGen // leader generations not yet served, by first sight
		lastPoll     time.Time // last successful ask of the leader
		leaderSince  time.Time // when the current leader was first seen
		pollErr      error
		loggedErr    string // the last ask failure logged, and when
		loggedAt     time.Time
		leaderGen    uint64
		behindSince  time.Time // when the view first trailed the applied generation
		wasLeader    bool
		lastLeaderID string
	}
}

type seenGen struct {
	gen uint64
	at  time.Time
}

// seenMax bounds the remembered leader generations (the oldest is kept:
// it decides staleness).
const seenMax = 4096

func newReadiness(node *cluster.Node, views *query.Views, bound time.Duration, token, source string) *readiness {
	r := &readiness{node: node, views: views, bound: bound, every: min(time.Second, max(100*time.Millisecond, bound/4)),
		startCommand: node.LastCommandIndex(node.Raft().LastIndex()), started: time.Now()}
	hc, err := cluster.HTTPClient(source, r.askTimeout())
	if err != nil { // --source-addr was checked with the flags
		hc = &http.Client{Timeout: r.askTimeout()}
	}
	r.leaderGeneration = func(ctx context.Context, addr string) (uint64, error) {
		cl := cluster.AdminClient{Addrs: []string{addr}, Token: token, HTTP: hc}
		var st cluster.NodeStatus
		if err := cl.Call(ctx, http.MethodGet, "/admin/status", nil, &st); err != nil {
			return 0, err
		}
		if st.State != "Leader" {
			return 0, fmt.Errorf("%s is no longer the leader", st.ID)
		}
		return st.Generation, nil
	}
	return r
}

// catchUpPoll: how often run checks the query gate until it opens.
const catchUpPoll = 50 * time.Millisecond

// run polls until ctx ends, and watches the query gate until it opens.
func (r *readiness) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if r.store != nil {
		wg.Go(func() {
			t := time.NewTicker(r.every)
			defer t.Stop()
			for {
				r.store.Probe(ctx, r.probeTimeout())
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Go(func() {
		t := time.NewTicker(catchUpPoll)
		defer t.Stop()
		for r.caughtUp() != nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		r.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// replaying says whether the state is still applying the log this node
// had at start (bounded by --ready-lag-max, for a tail a new leader
// truncates): the views wait for it (query.Views.Hold), so that the
// manifests in between, whose tables may have been collected since, are
// never fetched.
func (r *readiness) replaying() bool {
	return r.node.FSM.AppliedIndex() < r.startCommand && time.Since(r.started) < r.bound
}

// caughtUp is the query gate: nil once the node has caught up with the
// cluster since it started, and from then on while its view is not stale
// (stale); else why not.
func (r *readiness) caughtUp() error {
	if r.caught.Load() {
		if reason := r.stale(); reason != "" {
			return errors.New(reason)
		}
		return nil
	}
	node, views := r.node, r.views
	if _, leader := node.Leader(); leader == "" {
		return errors.New("no leader known")
	}
	// Raft's applied index moves when an entry is handed to the state
	// machine, before it is applied: the state's own index is what counts
	// (a restarted node once answered from generation 0 in between).
	if a, want := node.FSM.AppliedIndex(), r.startCommand; r.replaying() {
		return fmt.Errorf("applied log index %d of %d", a, want)
	}
	if served, applied := views.Current().Generation(), node.FSM.Manifest().Generation; served < applied {
		return fmt.Errorf("serving generation %d, applied %d", served, applied)
	}
	// The log it had at start may end before generations the leader
	// published meanwhile (a node down for a while): a follower must have
	// heard from the leader since it started and applied what that made
	// committed.
	if !node.IsLeader() && time.Since(r.started) < r.bound {
		raft := node.Raft()
		if raft.LastContact().Before(r.started) {
			return errors.New("not heard from the leader since start")
		}
		if a, ci := node.FSM.AppliedIndex(), node.LastCommandIndex(raft.CommitIndex()); a < ci {
			return fmt.Errorf("applied log index %d of %d committed", a, ci)
		}
		if served, applied := views.Current().Generation(), node.FSM.Manifest().Generation; served < applied {
			return fmt.Errorf("serving generation %d, applied %d", served, applied)
		}
	}
	r.caught.Store(true)
	return nil
}

// stale says why the view this node serves is too old to answer from, or
// "": a generation the leader had, or one this node's state applied, has
// gone unserved for longer than the bound (a full disk, tables the node
// cannot open). Such a node answers 503 NotReady, so that a client that
// does not watch /readyz asks another node rather than get an old answer
// with no sign of it. (A node that has heard from no leader for longer
// than the bound answers, saying so: unsure; a leader generation it saw
// before, which it cannot apply without a leader, does not close it.)
func (r *readiness) stale() string {
	now := time.Now()
	served, applied := r.views.Current().Generation(), r.node.FSM.Manifest().Generation
	cut := r.cutOff(now) != ""
	r.mu.Lock()
	defer r.mu.Unlock()
	if cut {
		return r.behindLocked(now, served, applied)
	}
	return r.staleLocked(now, served, applied)
}

// unsure is cutOff now: the query server's Unsure.
func (r *readiness) unsure() string { return r.cutOff(time.Now()) }

// cutOff says why a node that has heard from no leader (nor led) for
// longer than the bound cannot vouch for its view, or "": cut off from the
// others (a partition, a leader that lost its quorum), it cannot know what
// the cluster published meanwhile. It goes on answering (every node may be
// cut off: two voters of three down), each answer saying so. A node that
// never heard of a leader is the query gate's start-up concern (caughtUp).
func (r *readiness) cutOff(now time.Time) string {
	if r.node.IsLeader() {
		r.lastLed.Store(now.UnixNano())
		return ""
	}
	last := r.node.Raft().LastContact()
	if led := r.lastLed.Load(); led != 0 && time.Unix(0, led).After(last) {
		last = time.Unix(0, led)
	}
	if last.IsZero() {
		return ""
	}
	if d := now.Sub(last); d > r.bound {
		return fmt.Sprintf("no contact with a leader for %v: how old this node's view is cannot be known", d.Round(time.Millisecond))
	}
	return ""
}

// staleLocked is stale's judgement, which judgeLocked makes too: the
// oldest leader generation not served has waited longer than the bound
// (or was seen at the first ask after a gap: at once), or the applied one
// has.
func (r *readiness) staleLocked(now time.Time, served, applied uint64) string {
	if s, ok := r.unservedLocked(served); ok {
		if s.at.IsZero() {
			// Seen at the first ask after a gap (a start, a cut): the
			// leader may have had it all along.
			return fmt.Sprintf("serving generation %d; the leader has generation %d (catching up after a start or a gap)", served, s.gen)
		}
		if d := now.Sub(s.at); d > r.bound {
			return fmt.Sprintf("serving generation %d; the leader had generation %d %v ago", served, s.gen, d.Round(time.Millisecond))
		}
	}
	return r.behindLocked(now, served, applied)
}

// behindLocked is the half of staleLocked this node alone decides: the
// generation it applied has gone unserved for longer than the bound (a
// full disk, tables it cannot open).
func (r *readiness) behindLocked(now time.Time, served, applied uint64) string {
	if !r.mu.behindSince.IsZero() {
		if d := now.Sub(r.mu.behindSince); d > r.bound {
			return fmt.Sprintf("serving generation %d, applied %d, for %v", served, applied, d.Round(time.Millisecond))
		}
	}
	return ""
}

// unservedLocked is the oldest leader generation seen that the view
// (generation served) does not serve yet. seen is trimmed at each poll;
// between two polls the view may have moved past some of it, but not
// necessarily past all of it.
func (r *readiness) unservedLocked(served uint64) (seenGen, bool) {
	for _, s := range r.mu.seen {
		if s.gen > served {
			return s, true
		}
	}
	return seenGen{}, false
}

// askTimeout bounds one ask of another party: the leader's generation,
// a probe of the object store.
func (r *readiness) askTimeout() time.Duration { return min(r.bound, 2*time.Second) }

// probeTimeout is what a probe of the object store is allowed: a bucket
// that answers in 2-4 s is slow, not down (with 2 s, such a bucket was
// called down, every cold query refused and the write path stopped,
// where at 1.5 s everything went on).
func (r *readiness) probeTimeout() time.Duration { return min(r.bound, 5*time.Second) }

func (r *readiness) poll(ctx context.Context) {
	now := time.Now()
	leaderID, _ := r.node.Leader()
	isLeader := r.node.IsLeader()
	if isLeader {
		r.lastLed.Store(now.UnixNano())
	}
	var gen uint64
	var err error
	polled, noAddr := false, false
	if leaderID != "" && !isLeader {
		if ni, ok := r.node.FSM.Node(leaderID); ok && ni.Admin != "" {
			pctx, cancel := context.WithTimeout(ctx, r.askTimeout())
			gen, err = r.leaderGeneration(pctx, ni.Admin)
			cancel()
			polled = true
		} else {
			err = fmt.Errorf("the leader %s has no known admin address", leaderID)
			noAddr = true
		}
	}
	served := r.views.Current().Generation()
	applied := r.node.FSM.Manifest().Generation

	r.mu.Lock()
	defer r.mu.Unlock()
	if isLeader != r.mu.wasLeader || leaderID != r.mu.lastLeaderID {
		r.mu.wasLeader, r.mu.lastLeaderID = isLeader, leaderID
		r.mu.leaderSince = now
	}
	if isLeader {
		r.mu.seen = r.mu.seen[:0]
		r.mu.lastPoll, r.mu.pollErr, r.mu.leaderGen = now, nil, applied
	} else if polled && err == nil {
		// After a gap (the first ask since start, or none succeeded for
		// longer than the bound: a stopped process, a cut network) the
		// leader may have had this generation all along: count it as seen
		// since the last ask, so the node stays unready until it serves it.
		at := now
		if r.mu.lastPoll.IsZero() || now.Sub(r.mu.lastPoll) > r.bound {
			at = r.mu.lastPoll // zero: stale at once
		}
		r.mu.lastPoll, r.mu.pollErr, r.mu.leaderGen = now, nil, gen
		if n := len(r.mu.seen); gen > served && (n == 0 || gen > r.mu.seen[n-1].gen) {
			if n >= seenMax {
				r.mu.seen = append(r.mu.seen[:1], r.mu.seen[2:]...)
			}
			r.mu.seen = append(r.mu.seen, seenGen{gen: gen, at: at})
		}
	} else if err != nil {
		r.mu.pollErr = err
		// Logged when it changes, else once a minute: a follower that
		// cannot ask (an admin token unlike the leader's, a firewalled
		// admin port) is not ready for as long.
		// A restarted node learns the leader's address from the log it
		// replays: not worth a warning until the replay is done.
		quiet := noAddr && r.replaying()
		if r.log != nil && !quiet && (err.Error() != r.mu.loggedErr || now.Sub(r.mu.loggedAt) >= time.Minute) {
			r.log.Warn("cannot ask the leader for its generation: not ready while this lasts", "leader", leaderID, "error", err)
			r.mu.loggedErr, r.mu.loggedAt = err.Error(), now
		}
	}
	k := 0
	for k < len(r.mu.seen) && r.mu.seen[k].gen <= served {
		k++
	}
	r.mu.seen = r.mu.seen[k:]
	if served < applied {
		if r.mu.behindSince.IsZero() {
			r.mu.behindSince = now
		}
	} else {
		r.mu.behindSince = time.Time{}
	}
}

func (r *readiness) judgeLocked(now time.Time, leaderID string, isLeader bool, served, applied uint64) string {
	if r.store != nil {
		if down, since, err := r.store.Down(); down {
			return fmt.Sprintf("the object store has not answered for %v: %v", now.Sub(since).Round(time.Millisecond), err)
		}
	}
	if leaderID == "" {
		return "no leader known"
	}
	if !isLeader {
		lc := r.node.Raft().LastContact()
		if lc.IsZero() {
			return "never heard from the leader"
		}
		if d := now.Sub(lc); d > r.bound {
			return fmt.Sprintf("no contact with the leader %s for %v", leaderID, d.Round(time.Millisecond))
		}
		if why := r.askedLocked(now, leaderID); why != "" {
			return why
		}
	}
	return r.staleLocked(now, served, applied) // a leader's seen is empty
}

// askedLocked says why a follower does not know the leader's generation
// well enough to be ready: never asked it, or could not ask it for longer
// than the bound (and the last ask's error); "" when it does.
func (r *readiness) askedLocked(now time.Time, leaderID string) string {
	if r.mu.lastPoll.IsZero() {
		if r.mu.pollErr != nil {
			return fmt.Sprintf("cannot ask the leader %s for its generation: %v", leaderID, r.mu.pollErr)
		}
		return "the leader's generation is not known yet"
	}
	last := r.mu.lastPoll
	if r.mu.leaderSince.After(last) {
		last = r.mu.leaderSince
	}
	if d := now.Sub(last); d > r.bound {
		return fmt.Sprintf("cannot ask the leader %s for its generation for %v: %v", leaderID, d.Round(time.Millisecond), r.mu.pollErr)
	}
	return ""
}

// state returns why the node is not ready ("" when ready) and the served
// generation. It judges now, from the Raft state and what the last polls
// learned (a process resumed after a stop does not answer from a verdict
// taken before it).
func (r *readiness) state() (reason string, served uint64) {
	leaderID, _ := r.node.Leader()
	isLeader := r.node.IsLeader()
	served = r.views.Current().Generation()
	applied := r.node.FSM.Manifest().Generation
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.lastLeaderID != leaderID || r.mu.wasLeader != isLeader {
		if leaderID == "" {
			return "no leader known", served
		}
		return "the leader changed; not yet compared with it", served
	}
	return r.judgeLocked(time.Now(), leaderID, isLeader, served, applied), served
}

// staleness is how long the oldest leader generation not yet served has
// been known (0 when none), judged as /readyz judges (unservedLocked).
func (r *readiness) staleness() time.Duration {
	served := r.views.Current().Generation()
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.unservedLocked(served)
	if !ok {
		return 0
	}
	if s.at.IsZero() {
		return time.Since(r.mu.leaderSince)
	}
	return time.Since(s.at)
}

func (r *readiness) handler(w http.ResponseWriter, _ *http.Request) {
	reason, served := r.state()
	if reason != "" {
		http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ready: generation %d\n", served)
}

// collectors are the readiness metrics.
func (r *readiness) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_ready", Help: "1 while /readyz answers 200."}, func() float64 {
			if reason, _ := r.state(); reason == "" {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_store_up", Help: "0 while the object store does not answer this node's probes (objstore.GuardFailures in a row), else 1."}, func() float64 {
			if r.store != nil {
				if down, _, _ := r.store.Down(); down {
					return 0
				}
			}
			return 1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_manifest_generation", Help: "Manifest generation the replicated state applied on this node."}, func() float64 {
			return float64(r.node.FSM.Manifest().Generation)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_view_generation", Help: "Manifest generation this node serves queries from."}, func() float64 {
			return float64(r.views.Current().Generation())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_leader_generation", Help: "Manifest generation the leader had at the last ask."}, func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return float64(r.mu.leaderGen)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_view_stale_seconds", Help: "Seconds since the leader had a generation this node does not serve yet (0 when none)."}, func() float64 {
			return r.staleness().Seconds()
		}),
	}
}
