package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
)

// Garbage collection of the bucket, run by the leader's write path.
//
// Replaced tables. A compaction's flush puts the tables it replaced on the
// replicated garbage list (fsm.Garbage: tree, ID, the generation that
// removed them, the leader's time). The leader deletes one once
//   - the grace period has passed since it left (by the time its flush
//     carried, else since this leader first saw it), and
//   - every member of the configuration serves that generation or a later
//     one (cluster.MemberServed: the oldest view its queries may read); a
//     member that does not answer holds deletion back, said in the log and
//     in eddy_gc_blocked_seconds,
//
// and then proposes an fsm.Collect naming it, which takes it off the list.
// A leader that dies between the two leaves the table on the list: the
// next one deletes it again (a missing object is no error) and collects it.
//
// Orphans. Every sweep interval the leader lists tables/ and remembers,
// in memory, each table object that neither the manifest nor the garbage
// list names, with when it first saw it and the generation then applied.
// One still unreferenced a grace period later, which no upload in flight
// on this leader may have written, is deleted once every member serves
// that generation: an upload a deposed leader made that never got into a
// manifest, or a table removed before the garbage list existed. A new
// leader starts over, which only delays. The grace must exceed the longest
// compaction a deposed leader may have run; this leader's own uploads in
// flight are never deleted (uploads).

// Bounds of the derived intervals, and timeouts.
const (
	gcIntervalMin    = 100 * time.Millisecond
	gcIntervalMax    = 30 * time.Second
	sweepIntervalMin = time.Second
	sweepIntervalMax = 10 * time.Minute
	// membersTimeout bounds one round of asking the members what they serve.
	membersTimeout = 5 * time.Second
	// blockedLogEvery: how often a held-back deletion is said again.
	blockedLogEvery = time.Minute
)

// uploads tracks the table uploads in flight on this leader.
type uploads struct {
	mu     sync.Mutex
	next   int
	active map[int]time.Time
}

// begin records an upload starting now; the returned func ends it.
func (u *uploads) begin() (end func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.active == nil {
		u.active = map[int]time.Time{}
	}
	id := u.next
	u.next++
	u.active[id] = time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			delete(u.active, id)
			u.mu.Unlock()
		})
	}
}

// oldest is when the oldest upload in flight started (zero: none).
func (u *uploads) oldest() time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	var t time.Time
	for _, at := range u.active {
		if t.IsZero() || at.Before(t) {
			t = at
		}
	}
	return t
}

// orphan is an unreferenced table object the sweep saw.
type orphan struct {
	seen time.Time // first seen unreferenced
	gen  uint64    // the generation applied then
	keys []string  // its objects (data, meta) at the last listing
	size int64
}

// collector is one leadership term's garbage collector (leadCarry).
type collector struct {
	w         *Writer
	log       hclog.Logger
	grace     time.Duration
	firstSeen map[fsm.TableKey]time.Time // when this collector first saw each garbage entry
	orphans   map[fsm.TableKey]*orphan
	blocked   time.Time // since when a due deletion is held back (zero: none)
	saidAt    time.Time // when that was last logged
	// The newest state backup this collector put (backup.go): its
	// generation, and when (zero: none yet).
	backedUp    uint64
	backedUpAt  time.Time
	backedUpKey string
	// afterManifest, if set (tests), runs when a sweep has read the
	// manifest it judges the listing by.
	afterManifest func()
}

func newCollector(w *Writer) *collector {
	grace := w.cfg.GCGrace
	if grace <= 0 {
		grace = lsm.DefaultGCGrace
	}
	return &collector{w: w, log: w.log.Named("gc"), grace: grace, firstSeen: map[fsm.TableKey]time.Time{}, orphans: map[fsm.TableKey]*orphan{}}
}

// clamp bounds d to [lo, hi].
func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// leadCarry is what a leadership keeps across the runs of its write path.
// Its collector: the grace of a garbage table or an orphan runs from when
// this leader first saw it, so a collector made again at each run (a write
// path that fails more often than the grace: a bucket refusing writes)
// never let a grace end, and nothing was ever deleted. And its holds on
// failed full compactions (compactLoop).
type leadCarry struct {
	c    *collector
	held fullHolds
}

// fullHolds: by tree, the full compaction request (its value) that failed
// last, until when it is held back, and the wait that gave.
type fullHolds map[lsm.Tree]fullHold

type fullHold struct {
	asked string
	until time.Time
	wait  time.Duration
}

// collector returns the leadership's collector, now of writer w.
func (g *leadCarry) collector(w *Writer) *collector {
	if g == nil {
		return newCollector(w)
	}
	if g.c == nil {
		g.c = newCollector(w)
	}
	g.c.w, g.c.log = w, w.log.Named("gc")
	return g.c
}

// gcLoop collects garbage every GCInterval, sweeps orphans every
// OrphanSweepInterval and puts a state backup every StateBackupInterval
// (looked at each GCInterval: the backups are no more frequent than it)
// until ctx ends.
func (r *Runner) gcLoop(ctx context.Context, w *Writer) {
	c := r.carry.collector(w)
	every := w.cfg.GCInterval
	if every <= 0 {
		every = clamp(c.grace/4, gcIntervalMin, gcIntervalMax)
	}
	sweepEvery := w.cfg.OrphanSweepInterval
	if sweepEvery <= 0 {
		sweepEvery = clamp(c.grace/2, sweepIntervalMin, sweepIntervalMax)
	}
	backupEvery := w.cfg.StateBackupInterval
	if backupEvery <= 0 {
		backupEvery = DefaultStateBackupInterval
	}
	defer func() { // a follower holds no collector: its gauges say nothing
		w.metrics.GCBlockedSeconds.Set(0)
		w.metrics.GCOrphans.Set(0)
		w.metrics.StateBackupGeneration.Set(0)
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	var swept time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(c.backedUpAt) >= backupEvery {
			if err := c.backupState(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("state backup (tried again next round)", "error", err)
			}
		}
		c.collect(ctx)
		if time.Since(swept) >= sweepEvery {
			swept = time.Now()
			if err := c.sweep(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("orphan sweep", "error", err)
			}
		}
	}
}

// served returns the oldest generation any member serves, and the members
// holding it there that could not be asked. Without Config.Members every
// generation counts as served.
func (c *collector) served(ctx context.Context) (uint64, map[string]uint64, []string) {
	if c.w.cfg.Members == nil {
		return math.MaxUint64, nil, nil
	}
	mctx, cancel := context.WithTimeout(ctx, membersTimeout)
	defer cancel()
	ms, err := c.w.cfg.Members(mctx)
	if err != nil {
		return 0, nil, []string{"configuration: " + err.Error()}
	}
	oldest := uint64(math.MaxUint64)
	gens := map[string]uint64{}
	var down []string
	for _, m := range ms {
		if m.Err != nil {
			down = append(down, m.ID+" ("+m.Err.Error()+")")
			oldest = 0
			continue
		}
		gens[m.ID] = m.Generation
		oldest = min(oldest, m.Generation)
	}
	return oldest, gens, down
}

// since is when a garbage table's grace started, on this leader's clock:
// when this collector first saw the entry. The entry was applied before
// that, so the grace runs at least a grace period past its commit; the
// entry's own time (the proposing leader's clock, possibly another
// node's) is not used: a clock behind would shorten the grace, one ahead
// would hold the table for as long as it is ahead. A new leader waits a
// grace for what was pending when it took over.
func (c *collector) since(g fsm.Garbage, now time.Time) time.Time {
	k := fsm.TableKey{Tree: g.Tree, ID: g.ID}
	first, ok := c.firstSeen[k]
	if !ok {
		first = now
		c.firstSeen[k] = now
	}
	return first
}

// collect deletes the garbage tables that are due and that every member
// has moved past, then takes them off the replicated list.
func (c *collector) collect(ctx context.Context) {
	now := time.Now()
	var due []fsm.Garbage
	for _, g := range c.w.cfg.Node.FSM.Garbage() {
		if now.Sub(c.since(g, now)) >= c.grace {
			due = append(due, g)
		}
	}
	if len(due) == 0 {
		c.unblock()
		return
	}
	oldest, gens, down := c.served(ctx)
	var ok []fsm.Garbage
	held, heldGen := uint64(0), uint64(math.MaxUint64)
	for _, g := range due {
		if g.Generation <= oldest {
			ok = append(ok, g)
		} else {
			held++
			heldGen = min(heldGen, g.Generation)
		}
	}
	if held > 0 {
		c.block(now, held, heldGen, gens, down)
	} else {
		c.unblock()
	}
	// The newest backup in the bucket must not name a table deleted: one
	// at or past the generations that removed them first.
	need := uint64(0)
	for _, g := range ok {
		need = max(need, g.Generation)
	}
	if len(ok) > 0 {
		if err := c.ensureBackup(ctx, need); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("replaced tables wait for a state backup", "tables", len(ok), "error", err)
			}
			return
		}
	}
	var done []fsm.TableKey
	var bytes uint64
	for _, g := range ok {
		if err := c.deleteTable(ctx, g.Tree, g.ID); err != nil {
			c.log.Warn("delete garbage table (retried next round)", "tree", g.Tree, "table", g.ID, "error", err)
			continue
		}
		done = append(done, fsm.TableKey{Tree: g.Tree, ID: g.ID})
		bytes += g.DataBytes + g.MetaBytes
	}
	if err := c.propose(ctx, done); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("record deleted garbage (the next leader deletes it again)", "tables", len(done), "error", err)
		}
		return
	}
	for _, k := range done {
		delete(c.firstSeen, k)
	}
	if len(done) > 0 {
		c.w.metrics.GCDeleted.WithLabelValues("replaced").Add(float64(len(done)))
		c.w.metrics.GCDeletedBytes.WithLabelValues("replaced").Add(float64(bytes))
		c.log.Info("deleted replaced tables", "tables", len(done), "bytes", bytes, "oldest_served", oldest)
	}
}

// block records that due deletions wait for members; it says so at most
// once a minute.
func (c *collector) block(now time.Time, held, gen uint64, gens map[string]uint64, down []string) {
	if c.blocked.IsZero() {
		c.blocked = now
	}
	c.w.metrics.GCBlockedSeconds.Set(now.Sub(c.blocked).Seconds())
	if now.Sub(c.saidAt) < blockedLogEvery {
		return
	}
	c.saidAt = now
	var lagging []string
	for id, g := range gens {
		if g < gen {
			lagging = append(lagging, fmt.Sprintf("%s (serves %d)", id, g))
		}
	}
	sort.Strings(lagging)
	c.log.Warn("garbage deletion held back: a member is down, unreachable or serves an older generation (remove a member that is gone for good: eddy-ctl remove)",
		"tables", held, "needs_generation", gen, "unreachable", strings.Join(down, ", "), "lagging", strings.Join(lagging, ", "), "blocked_for", now.Sub(c.blocked).Round(time.Second))
}

// unblock records that no due deletion waits.
func (c *collector) unblock() {
	if !c.blocked.IsZero() {
		c.log.Info("garbage deletion no longer held back", "was_blocked_for", time.Since(c.blocked).Round(time.Second))
	}
	c.blocked, c.saidAt = time.Time{}, time.Time{}
	c.w.metrics.GCBlockedSeconds.Set(0)
}

// deleteTable deletes a table's objects (a missing one is no error) and
// drops this node's local meta of it.
func (c *collector) deleteTable(ctx context.Context, tree lsm.Tree, id string) error {
	data, meta := lsm.TableKeys(tree, id)
	for _, k := range []string{data, meta} {
		if err := c.w.cfg.Store.Delete(ctx, k); err != nil {
			return err
		}
	}
	c.w.cfg.Catalog.Drop(tree, id)
	return nil
}

// propose takes deleted tables off the replicated garbage list, in
// batches of at most fsm.CollectBatchMax.
func (c *collector) propose(ctx context.Context, done []fsm.TableKey) error {
	for len(done) > 0 {
		n := min(len(done), fsm.CollectBatchMax)
		if _, err := c.w.cfg.Node.Propose(ctx, fsm.TypeCollect, fsm.FlagSkippable, fsm.Collect{Tables: done[:n]}); err != nil {
			return err
		}
		done = done[n:]
	}
	return nil
}

// errNotTable: a key under tables/ that is not a table object.
var errNotTable = errors.New("not a table object")

// parseTableKey splits tables/<tree>/<id>.data or .meta.
func parseTableKey(key string) (fsm.TableKey, error) {
	rest, ok := strings.CutPrefix(key, "tables/")
	if !ok {
		return fsm.TableKey{}, errNotTable
	}
	tree, file, ok := strings.Cut(rest, "/")
	if !ok {
		return fsm.TableKey{}, errNotTable
	}
	if _, err := lsm.FormatOf(lsm.Tree(tree)); err != nil {
		return fsm.TableKey{}, errNotTable
	}
	id, ok := strings.CutSuffix(file, ".data")
	if !ok {
		id, ok = strings.CutSuffix(file, ".meta")
	}
	if !ok || id == "" || strings.Contains(id, "/") {
		return fsm.TableKey{}, errNotTable
	}
	return fsm.TableKey{Tree: lsm.Tree(tree), ID: id}, nil
}
