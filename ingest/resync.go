package ingest

import (
	"errors"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/eddy-backlinks/eddy/link"
)

// Resyncs: a reactivated account or a #sync event asks for the repository
// to be fetched again from its PDS (requestResync); the resync loop
// (Runner.resyncLoop) fetches it through the Backfiller and writes it
// whole.
//
// A repository is fetched as it is now, but the stream that asked may be
// far behind now: catching up after an outage, it replays the network's
// events from the last committed cursor. Written then, the repository
// would run ahead of the replay (records created after the replay's
// position), and the replay's next deactivation of the account would take
// them away again, its next reactivation bring them back: answers not
// monotonic in the network's time (docs/reliability.md, "The outage").
// So a resync asked by an event with a known time (Op.Time) is held back
// when the repository fetched is ahead of its stream: when its revision
// (a TID: the time of its last commit, by its PDS's clock) is more than
// Config.ResyncSlack past the time of the newest event the stream has
// applied (by the relay's or Jetstream's clock). Both are the network's
// clocks, so neither the write path's clock nor a simulated network's
// matter. The resync is deferred: its replicated marker stays, and once
// the stream has applied an event within the slack of that revision it
// is queued again and fetches the repository again (which may be newer
// still; the stream gains on it). The account's links stay out meanwhile:
// stale, never ahead of the network. A deactivation, takedown or deletion
// of the account after the event that asked (applyLocked) cancels it: the
// repository is revoked anyway, and a later reactivation asks again.
//
// The resyncs a previous leader had not finished (queueUnfinishedResyncs)
// have no event: they are held against the slowest stream's position,
// and, when no stream has applied an event with a time yet, until one
// has; if none applies anything for resyncIdle (a network with nothing
// to replay), they go ahead as before. A stream that stops (a replay read
// to its end) lets go of the resyncs that wait for it.

// ResyncPrefix marks pending resyncs among the cursors: the flush holding
// the event that asked for one also records "resync:<did>", so a new
// leader finds every resync its predecessor had not finished.
const ResyncPrefix = "resync:"

// DefaultResyncSlack: how far a resynced repository's revision may be
// past its stream's position and still be written. The two times come
// from different servers' clocks (a PDS's, a relay's), and a live stream
// is a moment behind the PDSes; a slack smaller than that would fetch a
// busy repository again and again.
const DefaultResyncSlack = time.Second

// resyncIdle: a previous term's resync waiting for a stream position goes
// ahead once no operation has been applied for this long.
const resyncIdle = 2 * time.Second

// resyncHoldMax: a resync held back this many times is written the next
// time, even if ahead of its stream. Each hold fetches the repository
// again once the stream reaches it, and a stream that stays more than the
// slack behind the PDSes could otherwise chase an account that commits
// within that time for ever; after a few tries the repository is written,
// ahead by at most that lag.
const resyncHoldMax = 3

// resyncFutureMax: a revision dated further than this past now (a PDS
// whose clock is wrong) says nothing of the stream: the resync goes ahead.
const resyncFutureMax = 5 * time.Minute

// ErrResyncHeld is what a Backfiller's Resync returns when the writer held
// the resync back (ResyncReady said no): it is deferred or cancelled, and
// the writer keeps its marker as it should.
var ErrResyncHeld = errors.New("resync: held back until the stream catches up, or cancelled")

// resyncJob is one queued resync: the DID and the request count it answers.
type resyncJob struct {
	did string
	seq uint64
	// source is the source whose event asked for it ("": a previous
	// term's, held against every source); check says to hold it back while
	// the repository is ahead of that source (not for an event of unknown
	// time, nor once its source has stopped).
	source string
	check  bool
	held   int // times it was held back already (resyncHoldMax)
	failed int // times its fetch failed already (resyncRetry)
}

// resyncRetry is the wait before a failed resync is tried again: a minute,
// doubled at each failure, at most an hour. Its marker stays meanwhile
// (and a new leader queues it at once).
func resyncRetry(failed int) time.Duration {
	return min(resyncRetryBase<<min(failed-1, 6), time.Hour)
}

// resyncRetryBase is resyncRetry's first wait (a variable for the tests).
var resyncRetryBase = time.Minute

// deferredResync is a resync held back until its source reaches need, the
// time of the revision it fetched.
type deferredResync struct {
	job  resyncJob
	need time.Time
}

// resyncState is the writer's state of resyncs held back (under w.mu).
type resyncState struct {
	pos      map[string]time.Time      // by source: the newest Op.Time it applied
	stopped  map[string]bool           // sources that stopped: nothing waits for them
	deferred map[string]deferredResync // by DID
	earliest time.Time                 // the earliest need among deferred (zero: none)
	// revoked: by DID with requests outstanding, the request count when
	// its account was last deactivated (taken down, deleted): requests up
	// to it are moot.
	revoked  map[string]uint64
	inflight map[string]resyncJob // by DID: the resync being fetched
	untimed  bool                 // a source applied an event of unknown time
}

func (s *resyncState) init() {
	s.pos = map[string]time.Time{}
	s.stopped = map[string]bool{}
	s.deferred = map[string]deferredResync{}
	s.revoked = map[string]uint64{}
	s.inflight = map[string]resyncJob{}
}

// requestResync queues a repository for a resync, asked by an event of
// source at time at (zero: unknown); the caller holds w.mu.
func (w *Writer) requestResync(source, did string, at time.Time) {
	if !link.ValidDID(did) {
		return
	}
	if !w.resyncer.Load() {
		// Nothing can fetch it: no marker (it would stay in the
		// replicated state for good, queued again by every term).
		w.skip("resync", "no_backfill_source", "did", did)
		return
	}
	w.mu.resyncs[did]++
	w.mu.cursors[ResyncPrefix+did] = "pending"
	w.log.Debug("resync requested", "did", did, "request", w.mu.resyncs[did], "source", source, "time", at)
	select {
	case w.resync <- resyncJob{did: did, seq: w.mu.resyncs[did], source: source, check: !at.IsZero()}:
	default:
		// The queue is full: the pending entry stays in the replicated
		// state, and the next leadership term picks it up.
		w.skip(source, "resync_queue_full")
	}
}

// queueUnfinished queues the resync of a previous term's marker, held
// against every source.
func (w *Writer) queueUnfinished(did string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.resyncs[did]++
	select {
	case w.resync <- resyncJob{did: did, seq: w.mu.resyncs[did], check: true}:
	default:
	}
}

// resyncDone records that a repository was fetched again for request seq;
// the replicated marker goes only if no newer request is waiting.
func (w *Writer) resyncDone(j resyncJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.mu.resync.deferred[j.did]; ok && d.job.seq <= j.seq {
		delete(w.mu.resync.deferred, j.did) // fetched since: no need
	}
	if w.mu.resyncs[j.did] == j.seq {
		w.clearResyncLocked(j.did)
	}
}

// clearResyncLocked forgets the requests of did and clears its marker.
func (w *Writer) clearResyncLocked(did string) {
	delete(w.mu.resyncs, did)
	delete(w.mu.resync.revoked, did)
	w.mu.cursors[ResyncPrefix+did] = ""
}

// beginResync and endResync bracket the fetch of a job (the resync loop's
// one at a time), which ResyncReady then judges.
func (w *Writer) beginResync(j resyncJob) {
	w.mu.Lock()
	w.mu.resync.inflight[j.did] = j
	w.mu.Unlock()
}

func (w *Writer) endResync(j resyncJob) {
	w.mu.Lock()
	if cur, ok := w.mu.resync.inflight[j.did]; ok && cur.seq == j.seq {
		delete(w.mu.resync.inflight, j.did)
	}
	w.mu.Unlock()
}

// ResyncReady is asked by a Backfiller's Resync once it has fetched the
// repository of did, at revision rev ("" for a repository that is gone),
// before it writes anything. False: do not write it, and return
// ErrResyncHeld; the writer has deferred the resync (the repository is
// ahead of the stream that asked for it: it is queued again once the
// stream has caught up with rev) or cancelled it (the account was
// deactivated, taken down or deleted since it was asked for).
func (w *Writer) ResyncReady(did, rev string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := &w.mu.resync
	job, ok := rs.inflight[did]
	if !ok {
		return true // not one of the resync loop's
	}
	latest := w.mu.resyncs[did]
	if latest == 0 {
		// A newer request was done (or cancelled) meanwhile: this one's
		// repository is written already, or revoked since.
		w.log.Debug("resync dropped: a newer one is done", "did", did, "request", job.seq)
		return false
	}
	if job.seq <= rs.revoked[did] {
		w.metrics.ResyncsCancelled.Inc()
		w.log.Debug("resync cancelled: the account was deactivated since", "did", did, "request", job.seq)
		if latest == job.seq {
			w.clearResyncLocked(did)
		}
		return false
	}
	if !job.check || rs.stopped[job.source] || rev == "" {
		return true
	}
	tid, err := syntax.ParseTID(rev)
	if err != nil {
		return true
	}
	need := tid.Time().UTC()
	if need.After(time.Now().Add(resyncFutureMax)) {
		return true
	}
	if w.reachedLocked(job.source, need) {
		return true
	}
	if job.held >= resyncHoldMax {
		w.log.Debug("resync written ahead of its stream: held back too often", "did", did, "request", job.seq, "source", job.source, "held", job.held)
		return true
	}
	job.held++
	if d, ok := rs.deferred[did]; ok && d.job.seq > job.seq {
		job = d.job // the newer request waits in its place
	} else if !ok && len(rs.deferred) >= resyncQueueMax {
		// Too many waiting: the marker stays for the next term.
		w.skip(job.source, "resync_deferred_full")
		return false
	}
	rs.deferred[did] = deferredResync{job: job, need: need}
	if rs.earliest.IsZero() || need.Before(rs.earliest) {
		rs.earliest = need
	}
	w.metrics.ResyncsDeferred.Inc()
	p, _ := w.positionLocked(job.source)
	w.log.Debug("resync deferred: the repository is ahead of its stream", "did", did, "request", job.seq, "source", job.source,
		"rev", rev, "rev_time", need, "stream_time", p)
	return false
}

// positionLocked is the newest event time source applied ("": the
// slowest source's); false when there is none yet.
func (w *Writer) positionLocked(source string) (time.Time, bool) {
	if source != "" {
		p, ok := w.mu.resync.pos[source]
		return p, ok
	}
	var slowest time.Time
	known := false
	for _, p := range w.mu.resync.pos {
		if !known || p.Before(slowest) {
			slowest, known = p, true
		}
	}
	return slowest, known
}

// reachedLocked says whether source's position is within the slack of
// need.
func (w *Writer) reachedLocked(source string, need time.Time) bool {
	p, ok := w.positionLocked(source)
	return ok && !need.After(p.Add(w.cfg.ResyncSlack))
}

// advanceLocked records that source applied an event of time t, and
// queues again the resyncs it lets go.
func (w *Writer) advanceLocked(source string, t time.Time) {
	rs := &w.mu.resync
	if p, ok := rs.pos[source]; !ok || t.After(p) {
		rs.pos[source] = t
	}
	if len(rs.deferred) == 0 || rs.earliest.After(t.Add(w.cfg.ResyncSlack)) {
		return // the cheap case: nothing waits for this time yet
	}
	w.releaseLocked(func(d deferredResync) bool { return w.reachedLocked(d.job.source, d.need) }, false)
}

// releaseLocked queues again the deferred resyncs that match (with force:
// to be written whatever their stream's position), as many as the queue
// takes; the others wait for the next release.
func (w *Writer) releaseLocked(match func(deferredResync) bool, force bool) {
	rs := &w.mu.resync
	var earliest time.Time
	for did, d := range rs.deferred {
		if match(d) {
			j := d.job
			if force {
				j.check = false
			}
			select {
			case w.resync <- j:
				delete(rs.deferred, did)
				w.log.Debug("resync released", "did", did, "request", j.seq, "source", j.source, "forced", force)
				continue
			default:
			}
		}
		if earliest.IsZero() || d.need.Before(earliest) {
			earliest = d.need
		}
	}
	rs.earliest = earliest
}

// accountRevokedLocked: did's account was deactivated, taken down or
// deleted. A resync asked before is moot (the repository is revoked; a
// later reactivation asks again): a deferred one is cancelled now, a
// queued or fetching one when ResyncReady judges it.
func (w *Writer) accountRevokedLocked(did string) {
	latest, ok := w.mu.resyncs[did]
	if !ok {
		return
	}
	rs := &w.mu.resync
	rs.revoked[did] = latest
	if d, ok := rs.deferred[did]; ok {
		delete(rs.deferred, did) // rs.earliest may now be early: the next release recomputes it
		w.metrics.ResyncsCancelled.Inc()
		w.log.Debug("deferred resync cancelled: the account was deactivated", "did", did, "request", d.job.seq)
		if d.job.seq == latest {
			w.clearResyncLocked(did)
		}
	}
}

// sourceStopped lets go of the resyncs that wait for source, which
// applies nothing more in this term (a replay read to its end, a source
// that failed).
func (w *Writer) sourceStopped(source string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.resync.stopped[source] = true
	w.releaseLocked(func(d deferredResync) bool { return d.job.source == source }, true)
}

// releaseUnplaced lets go of a previous term's resyncs waiting for a
// stream position when no source has applied an event with a time, and
// either one applied an event of unknown time (as before: not behind) or
// idle says none applied anything for resyncIdle (nothing to replay).
func (w *Writer) releaseUnplaced(idle bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := &w.mu.resync
	if len(rs.deferred) == 0 || len(rs.pos) > 0 || !(idle || rs.untimed) {
		return
	}
	w.releaseLocked(func(d deferredResync) bool { return d.job.source == "" }, true)
}

// idleWatch tells the resync loop when no operation has been applied for
// resyncIdle since a source started.
type idleWatch struct {
	seen  uint64
	since time.Time
}

// idle reports whether the write path has been idle for resyncIdle at
// now.
func (iw *idleWatch) idle(w *Writer, now time.Time) bool {
	n := w.activity.Load()
	if n != iw.seen || w.applying.Load() > 0 || w.sourcesStarted.Load() == 0 {
		iw.seen, iw.since = n, now
		return false
	}
	return now.Sub(iw.since) >= resyncIdle
}
