package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
)

// Source is what the runner needs of an input. Each kind of source
// implements it in its own file (Jetstream, Firehose, Replay, Backfill),
// so a new kind is a new file and a case of ParseSource, not an edit of
// the runner.
type Source interface {
	// Name identifies the source: its cursor is kept under this name, and
	// the part before the first ':' (or all of it) is its kind in status.
	Name() string
	// Live reports whether the source is a live stream, which starts at
	// the stream's head when it has no committed cursor. A Backfiller
	// starts only once every live source has committed a cursor.
	Live() bool
	// Ingest reads the source into w from cursor, its committed cursor
	// ("" when it has none), until ctx ends. It returns nil once the
	// source has nothing more to give (a replay read to its end, a
	// backfill through its last page: the cursor it leaves is then an
	// EOFCursor), or the error that stopped it; ErrLeadershipLost stops
	// the write path.
	Ingest(ctx context.Context, w *Writer, cursor string) error
}

// Backfiller is a source that writes whole repositories (Backfill).
//
// It starts only once every live source has a committed cursor: a stream
// that starts "from now" and loses its leader before committing would
// otherwise skip the events between the two leaders for repositories
// already backfilled. And it fetches one repository again on request
// (Resync): a reactivated account, a #sync event, or a resync a previous
// leader had not finished. The last Backfiller of the sources takes the
// resyncs; with none, a resync is skipped and counted.
type Backfiller interface {
	Source
	// Resync fetches the repository of did and writes it whole; once
	// fetched, before it writes anything, it asks w.ResyncReady and, on
	// false, writes nothing and returns an error wrapping ErrResyncHeld.
	Resync(ctx context.Context, w *Writer, did string) error
}

// Runner runs the write path while this node leads: the sources, the flush
// timer and compaction. Start it on gaining leadership and cancel its
// context on losing it (Supervisor does both).
type Runner struct {
	Config  Config
	Sources []Source
	// CompactionInterval: how often to look for a merge due (0: 5 s).
	CompactionInterval time.Duration
	// ShardTargetBytes for compacted runs (0: lsm default).
	ShardTargetBytes uint64
	// CompactionFanIn: flushes of a tier merged together, merged runs
	// lsm.MergedFanIn of it (0: lsm.DefaultCompactionFanIn).
	CompactionFanIn int
	// SpillDir holds a compaction's input tables, each split by output
	// shard, until their output shards are built (a directory on local
	// disk; "": the system's temporary directory). A merge removes its
	// spill files as it goes and when it ends, cut short or not; what a
	// crash leaves, the process removes when it starts (lsm.RemoveSpills,
	// cmd/node), whatever the node's role.
	SpillDir string

	// carry is what one run of the write path hands the next within a
	// leadership (Supervisor.lead): nil, each run's own.
	carry *leadCarry
}

// A full compaction is an operator's request that each tree's runs be
// merged into one (a major compaction: what an index is given after a
// backfill, when nothing will be written for a while that a smaller merge
// would write again): fewer runs for a query to read, and one account
// dictionary a run. The request is a replicated cluster setting per tree
// (fullCompactionKey + the tree, its value the generation it was asked
// at), so it outlives the leader that took it: whichever node leads runs
// it, and every node's status shows it. The leader's compaction loop
// merges, one tree at a time, every run the tree has when it picks the
// tree (runs flushed meanwhile stay for the ordinary compactions), and
// deletes the tree's setting once the merge is published, unless it was
// asked again meanwhile (then the runs flushed since are merged next). A
// merge that fails is tried again at the loop's next look, until the
// request is withdrawn (CancelFullCompaction, eddy-ctl compact --cancel);
// a leader lost before it published leaves the request to the next one.
// The entry that publishes the merge also marks, among the cursors
// (fullDoneKey), the request it carried out, so a leader lost between
// publishing and deleting the setting leaves the next one that mark, and
// the next one deletes the setting instead of merging the whole tree
// again (hours of CPU at the network's size).
const fullCompactionKey = "full_compaction:"

// fullDoneKey + a tree is a cursor the flush that publishes a full
// compaction's merge of the tree sets to the request's value; fullDone
// deletes it with the request.
const fullDoneKey = "full_compaction_done:"

// RequestFullCompaction asks for a full compaction of every tree (on the
// leader: the setting is proposed through Raft) and returns the trees it
// now waits for.
func RequestFullCompaction(ctx context.Context, node *cluster.Node) ([]lsm.Tree, error) {
	gen := strconv.FormatUint(node.FSM.Manifest().Generation, 10)
	for _, t := range lsm.Trees {
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: fullCompactionKey + string(t), Value: gen}); err != nil {
			return nil, fmt.Errorf("request a full compaction of %s: %w", t, err)
		}
	}
	return FullCompactionPending(node.FSM), nil
}

// backfillCompactedKey + a backfill's name is set once the end of that
// backfill asked for a full compaction.
const backfillCompactedKey = "backfill_compacted:"

// backfillStartedKey + a source's name is set when a source whose
// history is a backfill (a Jetstream v2 archive) starts reading it from
// its beginning: its end then asks for a full compaction.
const backfillStartedKey = "backfill_started:"

// compactAfterBackfill asks for a full compaction the first time a
// backfill reaches its end (on the leader). A backfill writes the whole history in a few
// days: its merges leave the index in a dozen or more runs, which every
// query reads and whose filters and dictionaries each repeat most targets
// and accounts; merged into one run, the local metadata is about half and
// a cold query makes one or two GETs instead of about nine (docs/scale.md).
// The two compaction lanes keep merging what the live stream flushes
// meanwhile. It is asked by the pass that reaches the end, not by a
// leader whose backfill starts there, so that upgrading a node whose
// backfill ended long ago does not start a rewrite of the whole index
// (`eddy-ctl compact --full` does, when wanted); a leader lost between
// the end's checkpoint and the request leaves it unasked. The setting
// records that the end asked: a backfill started again under the same
// name (its cursor reset) asks no second time. A crawl a restart began
// (eddy-ctl backfill restart; restart is that request, "" for none) asks
// once more: the setting then names that restart.
func compactAfterBackfill(ctx context.Context, node *cluster.Node, backfill, restart string) error {
	key := backfillCompactedKey + backfill
	value := strconv.FormatUint(node.FSM.Manifest().Generation, 10)
	if restart != "" {
		value = "restart:" + restart
	}
	if asked := node.FSM.Setting(key); asked != "" && (asked == value || !strings.HasPrefix(value, "restart:")) {
		return nil
	}
	if _, err := RequestFullCompaction(ctx, node); err != nil {
		return err
	}
	_, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: key, Value: value})
	return err
}

// FullCompactionPending returns the trees a requested full compaction has
// not merged yet (nil: none asked, or done), as s says.
func FullCompactionPending(s *fsm.State) []lsm.Tree {
	var out []lsm.Tree
	for _, t := range lsm.Trees {
		if s.Setting(fullCompactionKey+string(t)) != "" {
			out = append(out, t)
		}
	}
	return out
}

// CancelFullCompaction withdraws a requested full compaction (on the
// leader): a merge already running is published, no other is started.
func CancelFullCompaction(ctx context.Context, node *cluster.Node) error {
	for _, t := range FullCompactionPending(node.FSM) {
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: fullCompactionKey + string(t)}); err != nil {
			return fmt.Errorf("cancel the full compaction of %s: %w", t, err)
		}
	}
	return nil
}

// AdminCompact is the admin API's Compact hook of a node (cluster.Admin):
// it asks for a full compaction, or withdraws one, and says what is
// pending.
func AdminCompact(node *cluster.Node) func(context.Context, cluster.CompactRequest) (map[string]any, error) {
	return func(ctx context.Context, req cluster.CompactRequest) (map[string]any, error) {
		if req.Cancel {
			if err := CancelFullCompaction(ctx, node); err != nil {
				return nil, err
			}
			return map[string]any{"full": false, "cancelled": true, "pending": FullCompactionPending(node.FSM), "leader": node.ID()}, nil
		}
		pending, err := RequestFullCompaction(ctx, node)
		if err != nil {
			return nil, err
		}
		return map[string]any{"full": true, "pending": pending, "leader": node.ID()}, nil
	}
}

// fullMerge is a full compaction's merge of one tree, and the request it
// carries out (the setting's value when the tree was picked).
type fullMerge struct {
	tree  lsm.Tree
	asked string
}

// fullInputs returns the runs of tree to merge for a pending full
// compaction and the request's value (nil if none is pending, or the tree
// has no work for it, lsm.FullCompactionNeeded: then it is done, and its
// request deleted). A lone run whose form cannot be read counts as a
// failed compaction in metrics and is tried again at the next look, as a
// failed merge is.
func (r *Runner) fullInputs(ctx context.Context, w *Writer, m *lsm.Manifest, tree lsm.Tree, log hclog.Logger, metrics *Metrics) ([]lsm.Run, string) {
	asked := r.Config.Node.FSM.Setting(fullCompactionKey + string(tree))
	if asked == "" {
		return nil, ""
	}
	if r.Config.Node.FSM.Cursor(fullDoneKey+string(tree)) == asked {
		// Published by a leader lost before it deleted the request.
		r.fullDone(ctx, w, fullMerge{tree, asked}, log)
		return nil, ""
	}
	runs := m.RunsOf(tree)
	need, err := lsm.FullCompactionNeeded(ctx, r.Config.Catalog, runs)
	if err != nil {
		metrics.Compactions.WithLabelValues(string(tree), "failed").Inc()
		log.Warn("full compaction: could not read the run's form; trying again", "tree", tree, "error", err)
		return nil, ""
	}
	if !need {
		r.fullDone(ctx, w, fullMerge{tree, asked}, log)
		return nil, ""
	}
	return runs, asked
}

// fullDone deletes the request f carried out, unless it was asked again
// since (a later generation's request, for the runs flushed meanwhile,
// stays) or withdrawn, and then its mark (fullDoneKey, in w's next
// flush). It reports false if the deletion could not be proposed
// (leadership lost, a timeout): the caller tries again, so that a merged
// tree is not merged once more for a request already done.
func (r *Runner) fullDone(ctx context.Context, w *Writer, f fullMerge, log hclog.Logger) bool {
	if r.Config.Node.FSM.Setting(fullCompactionKey+string(f.tree)) == f.asked {
		if _, err := r.Config.Node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: fullCompactionKey + string(f.tree)}); err != nil {
			log.Warn("full compaction: could not mark the tree done; trying again", "tree", f.tree, "error", err)
			return false
		}
	}
	if r.Config.Node.FSM.Cursor(fullDoneKey+string(f.tree)) != "" {
		w.SetCursor(fullDoneKey+string(f.tree), "")
	}
	return true
}

// flushPoll: how often the flush timer checks whether a flush is due.
const flushPoll = 100 * time.Millisecond

// Run runs until ctx is done or the writer fails (leadership lost); it
// returns the reason.
func (r *Runner) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w, err := NewWriter(ctx, r.Config)
	if err != nil {
		return err
	}
	log := w.log
	log.Info("write path started", "sources", len(r.Sources), "clock", r.Config.Node.FSM.Clock())
	var resyncer Backfiller
	unserved := false // a source whose reactivated accounts nothing fetches again
	for _, s := range r.Sources {
		switch s := s.(type) {
		case Backfiller:
			resyncer = s
		case *Jetstream2: // reads them back from its server (jetstream2.go)
		default:
			unserved = true
		}
	}
	w.resyncer.Store(resyncer != nil)
	if resyncer == nil && unserved {
		log.Warn("no backfill source: an account active again does not get back the links revoked when it went inactive (a backfill source with resync_only=true fetches its repository again)")
	}
	r.queueUnfinishedResyncs(w)
	w.metrics.termStarted(time.Now())
	defer w.metrics.termEnded()
	var wg sync.WaitGroup
	if w.plc != nil {
		wg.Go(func() {
			if err := w.plc.run(ctx); err != nil && ctx.Err() == nil {
				log.Error("plc follower stopped", "error", err)
				cancel(err)
			}
		})
	}
	for _, s := range r.Sources {
		wg.Go(func() { r.runSource(ctx, cancel, w, s) })
	}
	wg.Go(func() { r.compactLoop(ctx, w) })
	wg.Go(func() { r.gcLoop(ctx, w) })
	if resyncer != nil {
		wg.Go(func() { r.resyncLoop(ctx, w, resyncer) })
	}
	result := r.flushLoop(ctx, cancel, w)
	wg.Wait()
	// A writer that stopped itself (a failed lookup, a failed publication)
	// publishes nothing more: its buffer is the next term's to read again.
	if errors.Is(result, context.Canceled) && !errors.Is(result, ErrLeadershipLost) && !w.dead.Load() {
		// A clean stop (shutdown, leadership handed away): publish what is
		// buffered so the next leader does not have to replay it.
		fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := w.Flush(fctx); err != nil {
			log.Warn("final flush", "error", err)
		}
		fcancel()
	}
	r.forgetUnpublished(log)
	log.Info("write path stopped", "reason", result)
	return result
}

// forgetUnpublished removes the local meta of every table neither the
// manifest nor the garbage list names: above all those this term uploaded
// and never published (its leadership lost, its upload cut, its
// publication refused), whose objects the next leader's orphan sweep
// deletes, and which nothing else would remove while the process runs. What is on local disk is listed before the manifest and
// the garbage list are read, so a table a newer view loaded meanwhile is
// named by them.
func (r *Runner) forgetUnpublished(log hclog.Logger) {
	cat := r.Config.Catalog
	local, err := cat.LocalTables()
	if err != nil {
		log.Warn("list the local metadata of tables", "error", err)
		return
	}
	keep := map[string]bool{}
	m := r.Config.Node.FSM.Manifest()
	for _, t := range lsm.Trees {
		for _, ref := range m.Tables(t) {
			keep[ref.ID] = true
		}
	}
	for _, g := range r.Config.Node.FSM.Garbage() {
		keep[g.ID] = true
	}
	n := 0
	for _, lt := range local {
		if !keep[lt.ID] {
			cat.Forget(lt.Tree, lt.ID)
			n++
		}
	}
	if n > 0 {
		log.Info("removed the local metadata of tables this term uploaded and did not publish", "tables", n, "generation", m.Generation)
	}
}

// queueUnfinishedResyncs queues the resyncs a previous leader had not
// finished (their "resync:<did>" markers among the cursors). They are
// queued at once, but held back like the others while the repository is
// ahead of the streams, which replay from the committed cursors
// (resync.go). Without a backfill source nothing can fetch them: they
// stay, for a later term that has one (no new marker is made meanwhile).
func (r *Runner) queueUnfinishedResyncs(w *Writer) {
	waiting := 0
	for k := range r.Config.Node.FSM.Summary().Cursors {
		if did, ok := strings.CutPrefix(k, ResyncPrefix); ok {
			if !w.resyncer.Load() {
				waiting++
				continue
			}
			w.queueUnfinished(did)
		}
	}
	if waiting > 0 {
		w.log.Warn("resyncs of an earlier term wait for a leader with a backfill source", "repositories", waiting)
	}
}

// runSource runs one source from its committed cursor, once the PLC
// follower has reached the directory's head (and, for a Backfiller, every
// live source has a committed cursor). A source that stops with an error
// is logged; a lost leadership or a failed writer stops the write path.
func (r *Runner) runSource(ctx context.Context, cancel context.CancelCauseFunc, w *Writer, s Source) {
	if !w.plcReady(ctx) {
		return
	}
	if _, ok := s.(Backfiller); ok && !r.waitLiveCursors(ctx, w.log) {
		return
	}
	name := s.Name()
	w.sourcesStarted.Add(1)
	w.activity.Add(1)
	for {
		err := s.Ingest(ctx, w, r.Config.Node.FSM.Cursor(name))
		if err != nil && ctx.Err() == nil {
			w.log.Error("source stopped", "source", name, "error", err)
			if errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrWriterFailed) {
				cancel(err) // the supervisor starts the write path again
			}
		}
		if ctx.Err() == nil {
			w.sourceStopped(name) // the resyncs waiting for it wait no more
		}
		// A backfill that is done crawls again when asked (eddy-ctl
		// backfill restart: backfill_restart.go).
		if b, ok := s.(*Backfill); !ok || err != nil || b.ResyncOnly || !b.waitRestart(ctx, w) {
			return
		}
	}
}

// resyncLoop fetches again, through b, each repository the writer queues
// for a resync, until ctx ends: up to resyncConcurrency repositories at
// once (a PDS that stalls holds one of them, not every account's resync
// behind it), one account's one at a time: requests made while its fetch
// is in flight are answered by one fetch after it.
// The writer may hold one back (Writer.ResyncReady: deferred or
// cancelled; resync.go).
func (r *Runner) resyncLoop(ctx context.Context, w *Writer, b Backfiller) {
	tick := time.NewTicker(resyncIdle / 4)
	defer tick.Stop()
	var iw idleWatch
	var retrying atomic.Int64 // failed resyncs waiting to be tried again
	type result struct {
		job resyncJob
		err error
	}
	results := make(chan result)
	var wg sync.WaitGroup
	defer wg.Wait()
	// running: by DID in flight, the newest job of that DID asked
	// meanwhile (nil: none). One waits at most: a fetch after the one in
	// flight answers every request made before it starts (resyncDone
	// clears the marker for the newest request only), so an account that
	// asks again and again holds one job here, not one a request.
	running := map[string]*resyncJob{}
	start := func(job resyncJob) {
		w.beginResync(job)
		wg.Go(func() {
			err := b.Resync(ctx, w, job.did)
			w.endResync(job)
			select {
			case results <- result{job, err}:
			case <-ctx.Done():
			}
		})
	}
	for {
		var in <-chan resyncJob // nil while resyncConcurrency are in flight
		if len(running) < resyncConcurrency {
			in = w.resync
		}
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			w.releaseUnplaced(iw.idle(w, now))
		case job := <-in:
			if _, busy := running[job.did]; busy {
				running[job.did] = &job
				continue
			}
			running[job.did] = nil
			start(job)
		case res := <-results:
			resyncEnded(ctx, w, res.job, res.err, &retrying)
			if next := running[res.job.did]; next != nil {
				running[res.job.did] = nil
				start(*next)
			} else {
				delete(running, res.job.did)
			}
		}
	}
}

// resyncConcurrency: the repositories the resync loop fetches at once.
const resyncConcurrency = 4

// resyncEnded records how job's fetch ended: written (its marker goes),
// held back (deferred or cancelled), or failed (tried again later, while
// fewer than resyncQueueMax wait for that).
func resyncEnded(ctx context.Context, w *Writer, job resyncJob, err error, retrying *atomic.Int64) {
	if errors.Is(err, ErrResyncHeld) {
		return // deferred (queued again later) or cancelled
	}
	if err == nil {
		w.resyncDone(job)
		return
	}
	if ctx.Err() != nil {
		return
	}
	job.failed++
	wait := resyncRetry(job.failed)
	if retrying.Load() >= resyncQueueMax {
		// As many wait as the queue holds: this one's marker stays for
		// the next term.
		w.log.Warn("resync failed; too many wait to be tried again: left to the next term", "did", job.did, "error", err)
		return
	}
	w.log.Warn("resync failed; trying again later", "did", job.did, "error", err, "retry_in", wait, "failures", job.failed)
	retrying.Add(1)
	go func() {
		defer retrying.Add(-1)
		retryResync(ctx, w, job, wait)
	}()
}

// retryResync queues job again after wait, unless the term ends first (a
// new leader queues its marker at once); a full queue drops it (the marker
// stays for the next term).
func retryResync(ctx context.Context, w *Writer, job resyncJob, wait time.Duration) {
	if sleepCtx(ctx, wait) != nil {
		return
	}
	select {
	case w.resync <- job:
	default:
		w.skip(job.source, "resync_queue_full")
	}
}

// flushLoop flushes whenever the flush interval has passed, until ctx is
// done (its cause is the result) or a flush fails (which cancels ctx).
func (r *Runner) flushLoop(ctx context.Context, cancel context.CancelCauseFunc, w *Writer) error {
	t := time.NewTicker(flushPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			if !w.Due() {
				continue
			}
			if err := w.Flush(ctx); err != nil {
				cancel(err)
				return err
			}
		}
	}
}

// waitLiveCursors waits until every live source has a committed cursor;
// it returns false if ctx ends first. A stream that starts live commits
// its first position with its first event, so on a network that is quiet
// from the start the backfill waits for that event (said once in the
// log); a busy network commits one within a flush interval.
func (r *Runner) waitLiveCursors(ctx context.Context, log hclog.Logger) bool {
	said := false
	for {
		ready := true
		for _, s := range r.Sources {
			if s.Live() && r.Config.Node.FSM.Cursor(s.Name()) == "" {
				ready = false
				if !said {
					said = true
					log.Info("backfill waits for the live stream's first committed position", "source", s.Name())
				}
			}
		}
		if ready {
			return true
		}
		if sleepCtx(ctx, 50*time.Millisecond) != nil {
			return false
		}
	}
}

// FanIn is the compaction fan-in the runner merges tiers with.
func (r *Runner) FanIn() int {
	return lsm.FanInOrDefault(r.CompactionFanIn)
}

func (r *Runner) shardTarget() uint64 {
	if r.ShardTargetBytes > 0 {
		return r.ShardTargetBytes
	}
	return lsm.DefaultShardTargetBytes
}
