package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/internal/backoff"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/hashicorp/go-hclog"
)

// Defaults of the Supervisor.
const (
	// DefaultHealthyRun: a write path that ran this long was healthy; its
	// failure resets the count of failures in a row.
	DefaultHealthyRun = 5 * time.Minute
	// DefaultFailuresMax: failures in a row, while leading, after which
	// the node hands leadership to another.
	DefaultFailuresMax = 3
	// DefaultTransferTimeout bounds that handover.
	DefaultTransferTimeout = 10 * time.Second
)

// DefaultRestartBackoff: the waits between restarts of a write path that
// failed while its node still leads.
var DefaultRestartBackoff = backoff.Policy{Min: time.Second, Max: 30 * time.Second}

// Supervisor runs the write path (a Runner) while its node leads.
//
// Each leadership callback of the node first stops the write path that
// runs, if any, and waits for it (a clean stop publishes what it
// buffered); on gaining leadership it then starts a new one from the
// committed state. A node that leads again in a later term (cluster.Node
// calls back true again, even if no sample saw it follow in between) thus
// gets a new write path: the one the lost term stopped is never resumed.
//
// A write path that fails while the node still leads (a store refusing
// writes, a table failing its check) starts again from the committed
// state after a backoff; after FailuresMax failures in a row the node
// hands leadership to another, which may fare better, rather than lead
// with no ingest, unless the failure is the object store's not answering
// (objstore.ErrUnavailable), which no other node can fare better with. A
// run longer than HealthyRun resets the count.
//
// With no sources nothing runs (not even compaction).
type Supervisor struct {
	Node *cluster.Node
	// Runner is the write path: every start runs a copy of it.
	Runner Runner
	Logger hclog.Logger // nil: no logging
	// HealthyRun, FailuresMax, TransferTimeout and RestartBackoff: zero
	// takes the defaults above.
	HealthyRun      time.Duration
	FailuresMax     int
	TransferTimeout time.Duration
	RestartBackoff  backoff.Policy
	// StoreUp, when set, returns a channel closed once the object store
	// answers again (objstore.Guard.WhenUp): a write path that failed on an
	// unavailable store starts again then, not at the end of its backoff.
	StoreUp func() <-chan struct{}
	// PeerReachesStore, when set, says whether another voter's object
	// store answers it (cluster.Admin.VoterReachesStore): a leader whose
	// store alone does not answer hands leadership over like any other
	// failing leader, instead of keeping it for an outage only it sees.
	PeerReachesStore func(ctx context.Context) bool

	mu struct {
		sync.Mutex
		ctx     context.Context // parent of every run; nil before Start
		stop    context.CancelFunc
		done    chan struct{} // closed when the running write path returned
		stopped bool
	}
}

// Start follows the node's leadership from now on; every write path runs
// under ctx. Call it once.
func (s *Supervisor) Start(ctx context.Context) {
	s.mu.Lock()
	s.mu.ctx = ctx
	s.mu.Unlock()
	s.Node.OnLeadership(s.leadership)
}

// Stop stops the write path that runs, if any, and waits for it (a leader
// publishes what it buffered); later leadership changes start nothing.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.stopped = true
	s.stopLocked()
}

func (s *Supervisor) stopLocked() {
	if s.mu.stop != nil {
		s.mu.stop()
		<-s.mu.done
		s.mu.stop, s.mu.done = nil, nil
	}
}

// HandOver hands the node's leadership to another voter (transfer:
// cluster.Node.TransferLeadership) once the write path is stopped, so
// that its last flush publishes what it buffered while the node still
// leads. Stopped by the callback that follows the transfer instead, the
// last flush found the node a follower: what it buffered was left for the
// next leader to read again, and its merge in flight for the garbage
// sweep. If the node still leads after the transfer (it failed), the
// write path starts again.
func (s *Supervisor) HandOver(ctx context.Context, transfer func(context.Context) error) error {
	s.mu.Lock()
	s.stopLocked()
	s.mu.Unlock()
	err := transfer(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.stop == nil && s.Node.IsLeader() {
		s.startLocked()
	}
	return err
}

// leadership is the node's leadership callback (cluster.Node calls it in
// order, from one goroutine).
func (s *Supervisor) leadership(isLeader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	if isLeader {
		s.startLocked()
	}
}

// startLocked starts a write path, unless stopped for good or there is
// nothing to run.
func (s *Supervisor) startLocked() {
	if s.mu.stopped || s.mu.ctx == nil || len(s.Runner.Sources) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(s.mu.ctx)
	done := make(chan struct{})
	s.mu.stop, s.mu.done = cancel, done
	go func() {
		defer close(done)
		s.lead(ctx)
	}()
}

// lead runs the write path, starting it again after each failure, until
// ctx ends or the node no longer leads.
func (s *Supervisor) lead(ctx context.Context) {
	log := s.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	healthy := orDefault(s.HealthyRun, DefaultHealthyRun)
	failuresMax := s.FailuresMax
	if failuresMax <= 0 {
		failuresMax = DefaultFailuresMax
	}
	policy := s.RestartBackoff
	if policy == (backoff.Policy{}) {
		policy = DefaultRestartBackoff
	}
	if m := s.Runner.Config.Metrics; m != nil {
		m.leadStarted(time.Now())
		defer m.leadEnded()
	}
	var wait time.Duration
	carry := &leadCarry{} // one collector, and one set of holds, for the leadership
	for failures := 0; ; {
		r := s.Runner
		r.carry = carry
		started := time.Now()
		err := r.Run(ctx)
		if ctx.Err() != nil || !s.Node.IsLeader() {
			return
		}
		if time.Since(started) > healthy {
			failures, wait = 0, 0
		}
		failures++
		wait = policy.Next(wait)
		log.Error("write path ended while leading; starting it again from the committed state", "error", err, "failures_in_a_row", failures, "retry_in", wait)
		unavailable := errors.Is(err, objstore.ErrUnavailable)
		var up <-chan struct{} // closed when this node's probes find the store again
		if s.StoreUp != nil && unavailable {
			up = s.StoreUp()
			select {
			case <-up:
				up = nil // it answers already: the backoff as for any failure
			default:
			}
		}
		// The other voters are asked only once this node's own probes call
		// the store down: theirs run as often, so in an outage of the whole
		// bucket they say so too by then, and no election is spent on it.
		if failures >= failuresMax && unavailable && up != nil && s.peerReachesStore(ctx) {
			log.Error("write path keeps failing because the object store does not answer this node, while it answers another voter: handing leadership over", "failures_in_a_row", failures)
			s.handOver(ctx, log)
		} else if failures >= failuresMax && unavailable && up != nil {
			// Every node writes to the same store: another leader would
			// fail the same way, and moving leadership round the cluster
			// only adds elections to the outage.
			log.Error("write path keeps failing because the object store does not answer: keeping leadership (it answers no other voter either)", "failures_in_a_row", failures)
		} else if failures >= failuresMax && unavailable {
			log.Error("write path keeps failing because the object store does not answer its requests, while this node's probes still find it: keeping leadership", "failures_in_a_row", failures)
		} else if failures >= failuresMax {
			log.Error("write path keeps failing on this node: handing leadership over", "failures_in_a_row", failures)
			s.handOver(ctx, log)
		}
		// Woken early when the store answers again; the failures in a row
		// go on counting (a store that flaps for this node alone must
		// still reach failuresMax and a handover).
		if sleepOrUp(ctx, wait, up) != nil {
			return
		}
	}
}

// handOver transfers leadership away from this node (the write path has
// stopped: lead starts it again if the transfer fails).
func (s *Supervisor) handOver(ctx context.Context, log hclog.Logger) {
	tctx, tcancel := context.WithTimeout(ctx, orDefault(s.TransferTimeout, DefaultTransferTimeout))
	defer tcancel()
	if err := s.Node.TransferLeadership(tctx); err != nil {
		log.Warn("leadership transfer", "error", err)
	}
}

// peerReachesStore asks PeerReachesStore, within a few seconds.
func (s *Supervisor) peerReachesStore(ctx context.Context) bool {
	if s.PeerReachesStore == nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, peerAskTimeout)
	defer cancel()
	return s.PeerReachesStore(pctx)
}

// peerAskTimeout bounds the asking of the other voters.
const peerAskTimeout = 5 * time.Second

// sleepOrUp is sleepCtx, ended early when up is closed (nil: never).
func sleepOrUp(ctx context.Context, d time.Duration, up <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	case <-up:
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
