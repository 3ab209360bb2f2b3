package ingest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/internal/corrupt"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
)

// Compaction lanes. A merge of the top tier at the network's scale, or a
// full compaction, reads and rewrites most of the index: hours of one
// core on a small node. Merging one set of runs at a time, the leader
// would hold back meanwhile the merges of the runs it flushes (one every
// flush interval), and those would pile up by the thousand for every
// query to read. So the leader merges in two lanes, each one merge at a
// time, on disjoint runs: the big lane takes full compactions and merges
// of at least bigMergeBytes of input, the small lane every other merge.
// Both lanes' results are published by the writer's next flush.
//
// Memory: a merge holds one output shard of records and the table built
// from it, but for a merge into columns, which writes its tables a
// record at a time (its frames, compressed, and a frame of records). The big lane's shards are lsm.DefaultCompactionShardBytes
// decoded at most, the small lane's a quarter of that (more, smaller
// tables for runs the big lane merges again later), so the second lane
// adds a quarter to the leader's compaction memory. A merge of flushes
// (the small lane's usual merge) is the exception: it merges in one pass
// and holds its inputs and its output compressed, about twice its
// inputs' bytes (~290 MB for eight flushes of the default memtable; at
// most 384 MiB, else it spills as the others do), and keeps its tables'
// buffers for the next such merge.
const (
	bigMergeBytes        = 256 << 20
	smallMergeShardBytes = lsm.DefaultCompactionShardBytes / 4
)

const (
	laneBig = iota
	laneSmall
)

// lane is one compaction lane's state, owned by compactLoop.
type lane struct {
	inputs   map[string]bool // the runs being merged (nil: idle)
	uploaded func()          // ends the merge's upload (w.uploads)
	full     *fullMerge      // the full compaction this merge carries out
	drop     *dropMerge      // the tables this merge drops (droptable.go)
}

// end makes the lane idle; its merge's tables are no longer an upload in
// flight (abandoned to the garbage sweep).
func (l *lane) end() {
	if l.uploaded != nil {
		l.uploaded()
	}
	*l = lane{}
}

// offeredMerge is a merge done and handed to the writer: its lane is free
// for the next merge, while its inputs stay reserved (no other merge
// takes them) until a flush publishes it.
type offeredMerge struct {
	inputs   map[string]bool
	uploaded func()
	full     *fullMerge
}

// mergeResult is what a lane's merge reports to compactLoop.
type mergeResult struct {
	lane int
	tree lsm.Tree
	out  lsm.Run
	ids  []string
	err  error
}

// compactLoop merges the runs due (lsm.PickCompaction) and requested
// full compactions in the background (two lanes) and hands each result
// to the writer, whose next flush publishes it (one serialised
// publisher, so the compare-and-set never races the flushes). A lane
// takes its next merge as soon as it hands one over (its inputs reserved
// until published), not once the flush has published it: a lane that
// waited for the flush merged once a flush interval at most, fewer runs
// than the flushes make once three trees take turns. The trees take turns
// for the first pick of each look (a fixed order gave the last tree,
// names, one merge in forty minutes of steady ingest while its runs grew
// by the hundred).
func (r *Runner) compactLoop(ctx context.Context, w *Writer) {
	every := r.CompactionInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var (
		lanes    [2]lane
		offered  []offeredMerge
		doneFull []fullMerge // published; their requests not deleted yet
		turn     int         // the tree that picks first at the next look
		// A tree whose full compaction failed merges as usual until its
		// hold ends (the wait doubling from one failure to the next), for
		// the leadership (its runs of the write path share it) and while
		// the request is the one that failed (a new one is tried at once).
		holds = r.fullHolds()
		// A run whose drop merges failed waits before the next
		// (droptable.go), while its request stays the same.
		dropHolds = map[string]dropHold{}
		// Runs whose merges failed in a row wait before the next try.
		runHolds = map[string]runHold{}
		// Drop marks this write path cleared, not yet out of the state.
		clearedMarks = map[string]bool{}
	)
	results := make(chan mergeResult, len(lanes)) // never blocks a merge: one each at most
	var merges sync.WaitGroup
	defer func() {
		merges.Wait() // they end with ctx
		for i := range lanes {
			lanes[i].end()
		}
		for _, o := range offered {
			o.uploaded()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case res := <-results:
			l := &lanes[res.lane]
			if res.err != nil {
				full := l.full != nil
				var asked string
				if full {
					asked = l.full.asked
				}
				drop := l.drop
				l.end()
				if ctx.Err() != nil {
					continue // cut short by the write path's end, not failed
				}
				w.metrics.Compactions.WithLabelValues(string(res.tree), "failed").Inc()
				if drop != nil {
					h := dropHolds[drop.run]
					if h.asked != drop.asked {
						h = dropHold{asked: drop.asked}
					}
					h.fails++
					wait := retryWait(h.fails)
					h.until = time.Now().Add(wait)
					dropHolds[drop.run] = h
					w.log.Error("dropping tables failed: the run's other tables could not be merged (name the table the error names too, or the run)", "tree", res.tree, "run", drop.run, "retry_in", wait, "error", res.err)
					continue
				}
				if !full {
					var wait time.Duration
					if damaged(res.err) {
						wait = holdRuns(runHolds, damagedRuns(r.Config.Node.FSM.Manifest(), res.ids, res.err), time.Now())
					}
					w.log.Warn("compaction failed", "tree", res.tree, "runs", len(res.ids), "retry_in", wait, "error", res.err)
					continue
				}
				// Tried again at once, it would take every run of the tree
				// each time and fail again, and no other merge of the tree
				// would ever start (a damaged table: hundreds of runs a
				// minute).
				wait := min(max(2*holds[res.tree].wait, fullRetryMin), fullRetryMax)
				holds[res.tree] = fullHold{asked: asked, until: time.Now().Add(wait), wait: wait}
				w.log.Warn("full compaction failed: the tree merges as usual meanwhile", "tree", res.tree, "retry_in", wait, "error", res.err)
				continue
			}
			if l.full != nil {
				delete(holds, res.tree)
			}
			var marks map[string]string
			if d := l.drop; d != nil {
				delete(dropHolds, d.run)
				if r.Config.Node.FSM.Setting(dropKey(dropTablesKey, d.tree, d.run)) != d.asked {
					// Asked again (more tables) or withdrawn while it ran:
					// merged again for the request as it is now.
					l.end()
					w.log.Info("drop tables: the request changed while its merge ran; merging again", "tree", d.tree, "run", d.run)
					continue
				}
				marks = map[string]string{dropKey(dropDoneKey, d.tree, d.run): d.asked}
			}
			w.metrics.Compactions.WithLabelValues(string(res.tree), "done").Inc()
			w.OfferCompaction(res.out, res.ids, l.full, marks) // a full one, a drop, marked done in the same entry
			w.log.Info("compacted", "tree", res.tree, "runs", len(res.ids), "records", res.out.Records(), "full", l.full != nil, "drop", l.drop != nil, "big", res.lane == laneBig)
			offered = append(offered, offeredMerge{inputs: l.inputs, uploaded: l.uploaded, full: l.full})
			*l = lane{} // free for the next merge; its upload ends once published
		case <-t.C:
		}
		m := r.Config.Node.FSM.Manifest()
		present := make(map[string]bool, len(m.Runs))
		for _, run := range m.Runs {
			present[run.ID] = true
		}
		maps.DeleteFunc(runHolds, func(id string, _ runHold) bool { return !present[id] })
		maps.DeleteFunc(dropHolds, func(id string, _ dropHold) bool { return !present[id] })
		r.sweepDropMarks(w, m, clearedMarks)
		offered = slices.DeleteFunc(offered, func(o offeredMerge) bool {
			if anyPresent(o.inputs, present) {
				return false
			}
			o.uploaded() // published
			if o.full != nil {
				doneFull = append(doneFull, *o.full)
			}
			return true
		})
		doneFull = slices.DeleteFunc(doneFull, func(f fullMerge) bool { return r.fullDone(ctx, w, f, w.log) })
		if len(doneFull) == 0 { // else tried again next time, before any merge of its tree starts
			held := func(tree lsm.Tree) bool {
				h, ok := holds[tree]
				return ok && time.Now().Before(h.until) && r.Config.Node.FSM.Setting(fullCompactionKey+string(tree)) == h.asked
			}
			now := time.Now()
			hs := mergeHolds{
				full: held,
				drop: func(run, asked string) bool { h := dropHolds[run]; return h.asked == asked && now.Before(h.until) },
				run:  func(id string) bool { return now.Before(runHolds[id].until) },
			}
			r.startMerges(ctx, w, m, &lanes, offered, turn, hs, results, &merges)
			turn++
		}
	}
}

// fullHolds returns the leadership's holds on failed full compactions (a
// Runner run alone, outside a Supervisor: its own).
func (r *Runner) fullHolds() fullHolds {
	if r.carry == nil {
		return fullHolds{}
	}
	if r.carry.held == nil {
		r.carry.held = fullHolds{}
	}
	return r.carry.held
}

// fullRetryMin and fullRetryMax bound the wait before a failed full
// compaction is tried again (variables for the tests).
var (
	fullRetryMin = 30 * time.Second
	fullRetryMax = 10 * time.Minute
)

// anyPresent reports whether any of runs is in present.
func anyPresent(runs, present map[string]bool) bool {
	for id := range runs {
		if present[id] {
			return true
		}
	}
	return false
}

// startMerges starts a merge in each idle lane that has one to do: a
// tree's drop of damaged tables first (startDrop: the big lane; the runs
// it names are left out of every other merge), then a
// pending full compaction not held back by a failure (hs.full) in the
// idle big lane (once neither the small
// lane nor a merge waiting to be published holds any of its tree's runs,
// so that a quiet tree ends as one run: until then no other merge of the
// tree starts), else the tree's next merge (lsm.PickCompaction) in the
// lane its size belongs to, on runs neither a lane nor a merge waiting to
// be published holds; while the small lane is busy, the idle big lane
// takes the smallest merge due of at least bigMergeBytes. Runs whose
// merges failed lately (hs.run) wait. The trees pick in turn, from
// lsm.Trees[turn % len].
func (r *Runner) startMerges(ctx context.Context, w *Writer, m *lsm.Manifest, lanes *[2]lane, offered []offeredMerge, turn int, hs mergeHolds, results chan<- mergeResult, merges *sync.WaitGroup) {
	// The runs no lane or offered merge holds: a merge started below takes
	// runs of its own tree only, so the other trees' picks need no update.
	reserved := func(id string) bool {
		if lanes[laneBig].inputs[id] || lanes[laneSmall].inputs[id] {
			return true
		}
		for _, o := range offered {
			if o.inputs[id] {
				return true
			}
		}
		return false
	}
	var free lsm.Manifest
	dropping := r.dropRuns(m) // left to the drop merges
	for _, run := range m.Runs {
		if !reserved(run.ID) && !dropping[run.ID] && !hs.run(run.ID) {
			free.Runs = append(free.Runs, run)
		}
	}
	for k := range lsm.Trees {
		tree := lsm.Trees[(turn+k)%len(lsm.Trees)]
		if lanes[laneBig].inputs != nil && lanes[laneSmall].inputs != nil {
			return
		}
		big := &lanes[laneBig]
		if r.startDrop(ctx, w, m, lanes, reserved, tree, hs.drop, results, merges) {
			// No full compaction of the tree until its drops are done:
			// it would take the run that holds a damaged table.
		} else if fullRunning := big.full != nil && big.full.tree == tree; !fullRunning && big.inputs == nil && !hs.full(tree) && r.Config.Node.FSM.Setting(fullCompactionKey+string(tree)) != "" {
			if holdsTree(m, tree, reserved) {
				continue // those merges end first; no more of the tree's start
			}
			full, asked := r.fullInputs(ctx, w, m, tree, w.log, w.metrics)
			if full != nil {
				r.startMerge(ctx, w, m, laneBig, big, tree, full, &fullMerge{tree, asked}, results, merges)
				continue
			}
		}
		inputs, i := pickLane(&free, tree, r.FanIn(), lanes[laneSmall].inputs != nil, lanes[laneBig].inputs != nil)
		if inputs == nil {
			continue
		}
		r.startMerge(ctx, w, m, i, &lanes[i], tree, inputs, nil, results, merges)
	}
}

// pickLane returns the next merge of tree among the runs of free and the
// lane it goes to: the merge lsm.PickCompaction picks, in the big lane if
// its inputs hold bigMergeBytes, else the small one; nil if that lane is
// busy, except that while the small lane is busy the idle big lane takes
// the smallest merge due of at least bigMergeBytes (a merge of larger
// runs need not wait behind small ones).
func pickLane(free *lsm.Manifest, tree lsm.Tree, fanIn int, smallBusy, bigBusy bool) ([]lsm.Run, int) {
	inputs := lsm.PickCompaction(free, tree, fanIn)
	if inputs == nil {
		return nil, 0
	}
	switch big := lsm.RunsBytes(inputs) >= bigMergeBytes; {
	case big && !bigBusy:
		return inputs, laneBig
	case !big && !smallBusy:
		return inputs, laneSmall
	case !big && !bigBusy:
		if inputs = lsm.PickCompactionAtLeast(free, tree, fanIn, bigMergeBytes); inputs != nil {
			return inputs, laneBig
		}
	}
	return nil, 0
}

// holdsTree reports whether a run of tree is held (reserved).
func holdsTree(m *lsm.Manifest, tree lsm.Tree, held func(id string) bool) bool {
	for _, run := range m.RunsOf(tree) {
		if held(run.ID) {
			return true
		}
	}
	return false
}

// startMerge starts merging inputs in lane l (index i); the merge reports
// to results.
func (r *Runner) startMerge(ctx context.Context, w *Writer, m *lsm.Manifest, i int, l *lane, tree lsm.Tree, inputs []lsm.Run, full *fullMerge, results chan<- mergeResult, merges *sync.WaitGroup) {
	ids := make([]string, len(inputs))
	l.inputs = make(map[string]bool, len(inputs))
	for k, in := range inputs {
		ids[k] = in.ID
		l.inputs[in.ID] = true
	}
	l.full = full
	l.uploaded = w.uploads.begin() // its tables are unreferenced until published
	opt := lsm.CompactOptions{ShardTargetBytes: r.shardTarget(), BytesPerSec: lsm.DefaultCompactionBytesPerSec, SpillDir: r.SpillDir}
	opt.ForMerge(inputs, full != nil, r.FanIn())
	if i == laneSmall {
		opt.ShardBytesMax = smallMergeShardBytes
	}
	inputIDs := l.inputs
	merges.Go(func() {
		var out lsm.Run
		if runsTables(inputs) == 0 {
			// A drop of a run's every table: the run goes, nothing
			// replaces it.
			results <- mergeResult{lane: i, tree: tree, out: out, ids: ids}
			return
		}
		// The view of the inputs alone: a merge reads nothing else, and a
		// table of another run whose meta is lost must not fail it.
		v, err := lsm.OpenView(ctx, r.Config.Catalog, m.Only(func(run lsm.Run) bool { return inputIDs[run.ID] }))
		if err == nil {
			out, err = lsm.CompactRuns(ctx, r.Config.Store, r.Config.Catalog, v, inputs, opt)
			corrupt.Note(r.Config.Corrupt, w.log, "compaction", err)
		}
		results <- mergeResult{lane: i, tree: tree, out: out, ids: ids, err: err}
	})
}

// runsTables is the tables of runs together.
func runsTables(runs []lsm.Run) int {
	n := 0
	for _, r := range runs {
		n += len(r.Tables)
	}
	return n
}

// mergeHolds say what failures hold back for now: a tree's full
// compaction, its drop merges, a run's ordinary merges.
type mergeHolds struct {
	full func(lsm.Tree) bool
	drop func(run, asked string) bool
	run  func(id string) bool
}

// runHold is a run's ordinary merges failed in a row, and until when the
// next waits.
type runHold struct {
	fails int
	until time.Time
}

// holdRuns notes a merge of runs (their IDs) failed at now on a damaged
// or lost input (damaged) and returns how long their next merge waits:
// none after a first failure, then fullRetryMin doubling up to
// fullRetryMax for each failure in a row. Such a merge fails the same way
// at every look until an operator restores or drops the table, and read
// the other inputs' gigabytes again each time: every look, with a log
// line each. Other failures (the bucket slow or away) are tried again at
// the next look, as before: holding every run flushed during an outage of
// reads for as long again would leave them all for queries to read.
func holdRuns(holds map[string]runHold, ids []string, now time.Time) time.Duration {
	var wait time.Duration
	for _, id := range ids {
		h := holds[id]
		h.fails++
		d := retryWait(h.fails)
		h.until = now.Add(d)
		holds[id] = h
		wait = max(wait, d)
	}
	return wait
}

// retryWait is the wait after fails failures in a row: none after the
// first, then fullRetryMin doubling up to fullRetryMax.
func retryWait(fails int) time.Duration {
	switch k := fails - 2; {
	case k < 0:
		return 0
	case k < 16:
		return min(fullRetryMin<<k, fullRetryMax)
	}
	return fullRetryMax
}

// damaged reports whether a merge failed on a damaged or lost input: a
// table that fails its checks, or an object the bucket does not have.
func damaged(err error) bool {
	var ce *lsm.CorruptError
	return errors.As(err, &ce) || errors.Is(err, objstore.ErrNotFound)
}

// damagedRuns returns the runs of ids to hold after their merge failed on
// err: the one holding the table err names as corrupt or missing
// (lsm.DamagedTable), so that the others merge with other runs meanwhile;
// all of them when err names no table of theirs.
func damagedRuns(m *lsm.Manifest, ids []string, err error) []string {
	table, ok := lsm.DamagedTable(err)
	if !ok {
		return ids
	}
	for _, run := range m.Runs {
		if !slices.Contains(ids, run.ID) {
			continue
		}
		if slices.ContainsFunc(run.Tables, func(t lsm.TableRef) bool { return t.ID == table }) {
			return []string{run.ID}
		}
	}
	return ids
}
