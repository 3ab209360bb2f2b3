// Package ingest is the leader's write path: it consumes operations from
// the network's sources (ingest/event decodes them), stamps each with the
// ingestion clock, extracts links, buffers them in memtables and publishes
// them as tables plus one Raft entry per flush.
//
// The promise: an operation is durable once the flush that holds it is
// committed (its tables are in the store, the entry names them together
// with the outlines they use and the source cursors). A new leader resumes
// every source from its committed cursor; replayed operations fold into the
// same answers (identical links keep their newest rev; revocations are
// idempotent), so nothing acknowledged is lost and nothing deleted comes
// back.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults and limits of the write path.
const (
	// DefaultFlushInterval: how long an operation may wait in memory before
	// its flush starts; with Raft commit and follower apply this bounds
	// freshness to a few seconds.
	DefaultFlushInterval = 2 * time.Second
	// DefaultMemtableBytes bounds each tree's memtable; a full memtable
	// flushes at once, and the sources wait (backpressure) while the one
	// before it is still being published.
	DefaultMemtableBytes = 64 << 20
	// DefaultClockBlock: stamps reserved per Raft entry.
	DefaultClockBlock = 1 << 20
)

// Config configures a Writer.
type Config struct {
	Node          *cluster.Node
	Store         objstore.Store
	Catalog       *lsm.Catalog
	PLC           link.PLC      // nil: every DID outlined ("plc: off")
	PLCDirectory  *PLCDirectory // followed into the PLC map trees, which then encode did:plc (plc.go; overrides PLC)
	FlushInterval time.Duration
	MemtableBytes int
	ClockBlock    uint64
	Logger        hclog.Logger
	Metrics       *Metrics
	// Corrupt, when set, counts the corrupt tables compaction meets, by
	// tree (the node's eddy_corrupt_total{tree}, shared with queries).
	Corrupt *prometheus.CounterVec
	// GCGrace: a table a compaction replaced is deleted no sooner than
	// this long after the flush that published the compaction, and an
	// object under tables/ that no manifest references no sooner than this
	// long after the leader first saw it (0: lsm.DefaultGCGrace). It must
	// exceed the longest compaction (gc.go).
	GCGrace time.Duration
	// Members, when set, reports the oldest generation every member of
	// the cluster serves (cluster.Admin.MembersServed): a garbage table is
	// deleted only once each serves the generation that removed it, and a
	// member that does not answer holds deletion back. Nil (a one-process
	// test cluster): the grace alone decides.
	Members func(ctx context.Context) ([]cluster.MemberServed, error)
	// GCInterval: how often the leader looks for garbage it may delete (0:
	// a quarter of the grace, within 100 ms..30 s).
	GCInterval time.Duration
	// OrphanSweepInterval: how often the leader lists the bucket's tables
	// for objects no manifest references (0: half the grace, within
	// 1 s..10 min).
	OrphanSweepInterval time.Duration
	// StateBackupInterval: how often the leader puts a backup of the
	// replicated state in the bucket (0: DefaultStateBackupInterval;
	// backup.go). It also puts one before deleting replaced tables that
	// the newest one may name.
	StateBackupInterval time.Duration
	// ResyncSlack: how far (by the network's clocks) a resynced repository
	// may be ahead of the stream that asked for it before the resync waits
	// for the stream (0: DefaultResyncSlack; resync.go).
	ResyncSlack time.Duration
	// PathOutlinesMax: past this many paths outlined in the replicated
	// state, a new path is named in the bucket instead (0:
	// DefaultPathOutlinesMax; link.Codec.PathOutlinesMax).
	PathOutlinesMax int
	// CollectionOutlinesMax: the same for collections (0:
	// DefaultCollectionOutlinesMax).
	CollectionOutlinesMax int
}

// slowFlushSay: a flush running this long says so, and again each time
// (a variable for the tests).
var slowFlushSay = 30 * time.Second

// ErrLeadershipLost: the writer's node is no longer the leader (or its
// publication lost the compare-and-set): stop; the new leader resumes.
var ErrLeadershipLost = errors.New("ingest: leadership lost")

// Writer is the write path of one leadership term. It is discarded when
// leadership is lost: what it had not published is not durable and is
// replayed by the next leader from the committed cursors.
type Writer struct {
	cfg     Config
	log     hclog.Logger
	skipLog skipLogger
	pending *fsm.Pending
	codec   link.Codec
	metrics *Metrics
	plc     *plcFollower // nil: plc off
	names   *lsm.NameMap // named record keys (names.go)
	reader  *lsm.Reader  // the maps' (PLC, names) reads of the bucket

	vmu  sync.Mutex
	view *lsm.View // currentView's

	flushMu sync.Mutex // one publication at a time
	// gen (under flushMu) is the manifest generation this writer's next
	// edit is built on: the one after its barrier, then each of its own
	// publications'. Only a writer publishes manifest edits, so the state
	// machine's generation moves past gen only if another term's writer
	// published meanwhile, and then the edit's compare-and-set refuses
	// this one whole (it could otherwise land after a newer leader's
	// flushes, with older stamps and a cursor that skips or repeats).
	gen uint64
	// repos keeps a repository written whole (ApplyRepo: its revocation,
	// then its records, in batches) out of two flushes: each repository
	// write holds it shared, and every flush holds it exclusively while it
	// swaps the memtables (taken before flushMu, let go once swapped), so
	// a flush waits for the writes in progress and new ones wait for the
	// swap. Split across two generations, a repository would be revoked in
	// the first and written again only in the second: answers from the
	// first would miss its links. Only when a repository's records fill
	// the memtables is a flush made without the gate (ApplyRepo): it
	// splits that repository and every other one being written then
	// (counted in eddy_ingest_repo_splits_total: repoWrites at the swap).
	repos      sync.RWMutex
	repoWrites atomic.Int64 // repositories being written (holding repos shared)
	// spare holds the links and revocations memtables of the last flush,
	// emptied, for the next swap (under flushMu): each keeps its buffer
	// (up to MemtableBytes) instead of allocating and clearing a new one.
	spare [2]*lsm.Memtable

	mu struct {
		sync.Mutex
		links, revs *lsm.Memtable
		cursors     map[string]string
		maxStamp    uint64
		clockNext   uint64 // next stamp to hand out
		clockEnd    uint64 // last reserved stamp
		clockSeen   uint64 // the clock after this writer's barrier or its last reservation
		ex          extract.Extractor
		bls         []link.Backlink    // linksLocked's scratch: one record's backlinks
		linkOf      []int              // linksLocked's scratch: the link each backlink is of
		compactions []compactionResult // offered, for the next flush
		lastFlush   time.Time
		// resyncs counts resync requests per DID: a finished resync clears
		// the replicated marker only if no newer request came meanwhile.
		resyncs map[string]uint64
		resync  resyncState // what holds resyncs back while a stream catches up (resync.go)
	}
	dead atomic.Bool
	// resyncer: a source fetches repositories again on request (a
	// Backfiller among the sources; set by the Runner before they start).
	resyncer atomic.Bool
	// uploads are the table uploads in flight (flushes, compactions): the
	// orphan sweep never deletes an object that may be one of them.
	uploads uploads
	// resync receives DIDs whose repository must be fetched again
	// (reactivated accounts, #sync events); bounded, drops when full.
	resync chan resyncJob
	// activity counts the operations Apply began and the sources started;
	// applying is the operations in Apply now; sourcesStarted the sources
	// started. A previous term's resync waiting for a stream position goes
	// ahead once they show the write path idle (resync.go).
	activity       atomic.Uint64
	applying       atomic.Int64
	sourcesStarted atomic.Int64
}

// resyncQueueMax bounds the repositories waiting for a resync.
const resyncQueueMax = 10000

type compactionResult struct {
	add    lsm.Run
	remove []string
}

// NewWriter starts a leadership term's write path: it waits until the
// leader has applied everything committed before it, then reserves its
// first block of stamps.
func NewWriter(ctx context.Context, cfg Config) (*Writer, error) {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.MemtableBytes <= 0 {
		cfg.MemtableBytes = DefaultMemtableBytes
	}
	if cfg.ClockBlock == 0 {
		cfg.ClockBlock = DefaultClockBlock
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.ResyncSlack <= 0 {
		cfg.ResyncSlack = DefaultResyncSlack
	}
	if cfg.PathOutlinesMax <= 0 {
		cfg.PathOutlinesMax = DefaultPathOutlinesMax
	}
	if cfg.CollectionOutlinesMax <= 0 {
		cfg.CollectionOutlinesMax = DefaultCollectionOutlinesMax
	}
	if err := cfg.Node.Barrier(cluster.ProposeTimeout); err != nil {
		return nil, fmt.Errorf("barrier: %w", err)
	}
	w := &Writer{cfg: cfg, log: cfg.Logger.Named("ingest"), metrics: cfg.Metrics, resync: make(chan resyncJob, resyncQueueMax)}
	w.pending = fsm.NewPending(cfg.Node.FSM)
	// Without a PLC directory followed every DID is an outline (the PLC map
	// stays empty), targets' too; with one, a target's unknown DID is hashed.
	w.reader = lsm.NewReader(cfg.Store, nil)
	w.names = lsm.NewNameMap(w.reader, w.currentView, 0)
	w.codec = link.Codec{Outlines: w.pending, PLC: cfg.PLC, Names: w.names, TargetDIDOutlines: cfg.PLCDirectory == nil,
		PathOutlinesMax: cfg.PathOutlinesMax, CollectionOutlinesMax: cfg.CollectionOutlinesMax}
	if cfg.PLCDirectory != nil {
		w.plc = newPLCFollower(ctx, cfg.PLCDirectory, w)
		w.codec.PLC = w.plc
	}
	w.mu.links = lsm.NewMemtable(lsm.BacklinkFormat, cfg.MemtableBytes)
	w.mu.revs = lsm.NewMemtable(lsm.RevocationFormat, cfg.MemtableBytes)
	w.mu.cursors = map[string]string{}
	w.mu.resyncs = map[string]uint64{}
	w.mu.resync.init()
	w.mu.lastFlush = time.Now()
	w.gen = cfg.Node.FSM.Manifest().Generation
	w.mu.clockSeen = cfg.Node.FSM.Clock()
	if err := w.reserveLocked(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Codec returns the writer's codec (reads see uncommitted outlines too).
func (w *Writer) Codec() *link.Codec { return &w.codec }

// reserveLocked reserves the writer's next block of stamps, after the
// clock as this writer last saw it: if another term's writer reserved
// since, the reservation is refused and this writer stops.
func (w *Writer) reserveLocked(ctx context.Context) error {
	res, err := w.cfg.Node.Propose(ctx, fsm.TypeReserveClock, 0, fsm.ReserveClock{After: w.mu.clockSeen, Count: w.cfg.ClockBlock})
	if err != nil {
		w.dead.Store(true)
		return fmt.Errorf("reserve clock: %w: %w", err, ErrLeadershipLost)
	}
	end := res.(uint64)
	w.mu.clockNext, w.mu.clockEnd, w.mu.clockSeen = end-w.cfg.ClockBlock+1, end, end
	return nil
}

// stampLocked hands out the next stamp.
func (w *Writer) stampLocked(ctx context.Context) (uint64, error) {
	if w.mu.clockNext > w.mu.clockEnd {
		if err := w.reserveLocked(ctx); err != nil {
			return 0, err
		}
	}
	s := w.mu.clockNext
	w.mu.clockNext++
	w.mu.maxStamp = s
	return s, nil
}

// Apply stamps one operation and buffers what it writes; cursor is the
// source position after it. Bad input is skipped and counted, never an
// error; an error means this writer must stop (leadership lost, store
// failing past retries).
func (w *Writer) Apply(ctx context.Context, source, cursor string, op *event.Op) error {
	if w.dead.Load() {
		return ErrLeadershipLost
	}
	w.activity.Add(1)
	w.applying.Add(1)
	defer w.applying.Add(-1)
	if _, err := w.lockRoom(ctx, true); err != nil {
		return err
	}
	defer w.mu.Unlock()
	w.metrics.Events.WithLabelValues(source, op.Kind.String()).Inc()
	if err := w.applyLocked(ctx, source, op); err != nil {
		return err
	}
	w.mu.cursors[source] = cursor
	if op.Time.IsZero() {
		w.mu.resync.untimed = true
	} else {
		w.advanceLocked(source, op.Time) // may release resyncs waiting for this source
	}
	return nil
}

// skip counts a bad input that has no operation to name (a queue full, a
// repository-wide event's DID); skipOp also names the operation.
func (w *Writer) skip(source, reason string, kv ...any) {
	w.metrics.Skipped.WithLabelValues(source, reason).Inc()
	w.skipLog.log(w.log, source, reason, kv...)
}

func (w *Writer) applyLocked(ctx context.Context, source string, op *event.Op) error {
	switch op.Kind {
	case event.KindCommit:
	case event.KindSync:
		w.requestResync(source, op.DID, op.Time)
		return nil
	case event.KindAccount, event.KindRepoReset:
		if op.Kind == event.KindAccount && op.Active {
			w.requestResync(source, op.DID, op.Time) // its links may have been revoked: fetch it again
			return nil
		}
		if op.Kind == event.KindAccount && !event.AccountGone(op.Status) {
			// Inactive for the relay's own reasons (desynchronized,
			// throttled) or for none given: the account is still there.
			w.metrics.AccountsKept.Inc()
			w.log.Debug("inactive account's links kept", "did", op.DID, "status", op.Status, "position", op.Seq)
			return nil
		}
		// deleted, takendown, suspended, deactivated: the repository is no
		// longer served, so its links go; a reactivation resyncs them. A
		// reset: the records that follow replace the repository's.
		if !link.ValidDID(op.DID) {
			w.skipOp(source, "bad_did", op, nil)
			return nil
		}
		did, err := w.codec.DID(op.DID, true)
		if errors.Is(err, link.ErrLookup) {
			return w.failLookup(err) // not the DID's fault: applied again, never skipped
		}
		if err != nil {
			w.skipOp(source, "bad_did", op, err)
			return nil
		}
		stamp, err := w.stampLocked(ctx)
		if err != nil {
			return err
		}
		v := link.Revocation{Source: link.RepoID(did), Rev: stamp}
		w.log.Debug("repository revoked", "kind", op.Kind.String(), "did", op.DID, "status", op.Status, "stamp", stamp, "position", op.Seq)
		if op.Kind == event.KindAccount {
			w.accountRevokedLocked(op.DID) // a resync it asked for before is moot
		}
		return w.mu.revs.AddRevocation(&v)
	default:
		return nil // identity, sync: nothing to index
	}
	if !link.ValidDID(op.DID) || !link.ValidCollection(op.Collection) || !link.ValidRKey(op.RKey) {
		w.skipOp(source, "bad_source", op, nil)
		return nil
	}
	src, err := w.codec.Record(op.DID, op.Collection, op.RKey, true)
	if errors.Is(err, link.ErrLookup) {
		return w.failLookup(err) // not the record's fault: applied again, never skipped
	}
	if err != nil {
		w.skipOp(source, "bad_source", op, err)
		return nil
	}
	stamp, err := w.stampLocked(ctx)
	if err != nil {
		return err
	}
	if op.Action == event.ActionUpdate || op.Action == event.ActionDelete {
		v := link.Revocation{Source: src, Rev: stamp}
		if err := w.mu.revs.AddRevocation(&v); err != nil {
			return err
		}
		if op.Action == event.ActionDelete {
			return nil
		}
	}
	if op.Action != event.ActionCreate && op.Action != event.ActionUpdate {
		w.skipOp(source, "bad_action", op, nil)
		return nil
	}
	if op.Skip != "" || op.Record == nil {
		w.skipOp(source, skipReason(op.Skip), op, nil) // a tooBig commit's: its KindSync op asks for a resync
		if op.Skip == event.SkipRecordTooBig {
			// A record the JSON decoder does not take whole: its links
			// come from the repository, fetched again (a firehose's
			// tooBig commit is resynced the same way).
			w.requestResync(source, op.DID, op.Time)
		}
		return nil
	}
	return w.linksLocked(source, op, src, stamp)
}

// linksLocked extracts and buffers the links of a record. A record with
// two or more links also gets one forward entry per link, at the same
// stamp (link.ForwardKey; see the package comment of link): what
// many-to-many queries read (lsm.Reader.Forward). A record with one link
// (most: likes, follows, reposts) gets none, which keeps their cost to the
// records that need them. The Links metric counts the links alone.
func (w *Writer) linksLocked(source string, op *event.Op, src link.RecordID, stamp uint64) error {
	links, st := w.mu.ex.Extract(op.Record)
	// Each link's key and location; a link whose path cannot be encoded
	// is skipped (bad_path) before anything of the record is buffered.
	bls := w.mu.bls[:0]
	var badPaths []error
	for i := range links {
		l := &links[i]
		loc, err := w.codec.Location(l.Path, l.StrongRef, true)
		if errors.Is(err, link.ErrLookup) {
			return w.failLookup(err) // a path's name unread: not the record's fault, applied again
		}
		if err != nil {
			badPaths = append(badPaths, err)
			continue
		}
		tgt := w.codec.TargetKey(&l.Target) // never an outline: a target is anyone's string (link.Codec.TargetKey)
		bls = append(bls, link.Backlink{Target: tgt, Source: src, Location: loc, SourceRev: stamp})
		w.mu.linkOf = append(w.mu.linkOf[:len(bls)-1], i)
	}
	w.mu.bls = bls
	if len(bls) >= 2 { // before the record's links are buffered
		if err := w.nameTargetsLocked(source, op, links, bls); err != nil {
			return err // applied again later (a failed read of the names): nothing counted yet
		}
	}
	w.countLost(source, op, st, badPaths)
	added := 0
	defer func() {
		if added > 0 {
			w.metrics.Links.WithLabelValues(source).Add(float64(added))
		}
	}()
	for i := range bls {
		if err := w.mu.links.AddBacklink(&bls[i]); err != nil {
			return err
		}
		added++
	}
	if len(bls) >= 2 {
		fk := link.ForwardKey(src)
		for i := range bls {
			fl := link.Backlink{Target: fk, Source: bls[i].Target, Location: bls[i].Location, SourceRev: stamp}
			if err := w.mu.links.AddBacklink(&fl); err != nil {
				return err
			}
		}
	}
	return nil
}

// skipReason names the skip metric reason of an operation the decoder
// marked (event.Skip*): the decoder's reason, "record_" prefixed once.
func skipReason(skip string) string {
	switch {
	case skip == "":
		return event.SkipRecordMissing
	case strings.HasPrefix(skip, "record_"):
		return skip
	}
	return "record_" + skip
}

// ReserveStamp hands out a stamp now, for data written later (a backfill
// reserves its repository's stamp before fetching it).
func (w *Writer) ReserveStamp(ctx context.Context) (uint64, error) {
	if w.dead.Load() {
		return 0, ErrLeadershipLost
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stampLocked(ctx)
}

// recordLocked buffers the links of one record at stamp.
func (w *Writer) recordLocked(source string, op *event.Op, stamp uint64) error {
	if !link.ValidDID(op.DID) || !link.ValidCollection(op.Collection) || !link.ValidRKey(op.RKey) {
		w.skipOp(source, "bad_source", op, nil)
		return nil
	}
	if op.Skip != "" || op.Record == nil {
		w.skipOp(source, skipReason(op.Skip), op, nil)
		return nil
	}
	src, err := w.codec.Record(op.DID, op.Collection, op.RKey, true)
	if errors.Is(err, link.ErrLookup) {
		return w.failLookup(err) // not the record's fault: applied again, never skipped
	}
	if err != nil {
		w.skipOp(source, "bad_source", op, err)
		return nil
	}
	return w.linksLocked(source, op, src, stamp)
}

// SetCursor records a source position that needs no operation (a replay
// that reached its end, a heartbeat); it is published with the next flush.
func (w *Writer) SetCursor(source, cursor string) {
	w.mu.Lock()
	w.mu.cursors[source] = cursor
	w.mu.Unlock()
}

// OfferCompaction hands a finished compaction (of disjoint inputs) to the
// next flush; full, if set, is the full compaction's request it carries
// out, marked done in the same entry (fullDoneKey), as are marks (cursors:
// a drop's, dropDoneKey).
func (w *Writer) OfferCompaction(add lsm.Run, remove []string, full *fullMerge, marks map[string]string) {
	w.mu.Lock()
	w.mu.compactions = append(w.mu.compactions, compactionResult{add: add, remove: remove})
	if full != nil {
		w.mu.cursors[fullDoneKey+string(full.tree)] = full.asked
	}
	for k, v := range marks {
		w.mu.cursors[k] = v
	}
	w.mu.Unlock()
}

// Due reports whether the flush interval has passed since the last flush.
func (w *Writer) Due() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.mu.lastFlush) >= w.cfg.FlushInterval
}

// Flush publishes what is buffered: the memtables are swapped for empty
// ones (ingest goes on), written as delta runs, and committed with the
// outlines they use, the cursors and the clock in one entry, on the
// generation this leader last saw (compare-and-set).
//
// It waits for the repositories being written whole (Writer.repos).
func (w *Writer) Flush(ctx context.Context) error { return w.flush(ctx, true) }

// flush is Flush; gated: it takes the repository gate for the swap (all
// but ApplyRepo's own flush, which holds it shared).
func (w *Writer) flush(ctx context.Context, gated bool) error {
	if gated {
		w.repos.Lock()
	}
	ungate := func() {
		if gated {
			gated = false
			w.repos.Unlock()
		}
	}
	defer ungate()
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	if w.dead.Load() {
		return ErrLeadershipLost
	}
	start := time.Now()
	defer w.uploads.begin()() // its tables are unreferenced until the entry commits
	w.mu.Lock()
	links, revs := w.mu.links, w.mu.revs
	cursors := w.mu.cursors
	maxStamp := w.mu.maxStamp
	comps := w.mu.compactions
	if !gated {
		// Every repository being written (made to wait for no gated
		// flush) is split by this one: counted.
		if n := w.repoWrites.Load(); n > 0 {
			w.metrics.RepoSplits.Add(float64(n))
		}
	}
	w.mu.links, w.mu.revs = w.spare[0], w.spare[1]
	w.spare = [2]*lsm.Memtable{}
	if w.mu.links == nil {
		w.mu.links = lsm.NewMemtable(lsm.BacklinkFormat, w.cfg.MemtableBytes)
		w.mu.revs = lsm.NewMemtable(lsm.RevocationFormat, w.cfg.MemtableBytes)
	}
	w.mu.cursors = map[string]string{}
	w.mu.compactions = nil
	w.mu.lastFlush = start
	outlines := w.pending.Take() // after the swap: covers every outline the swapped data uses
	var plcBatch *lsm.PLCBatch
	if w.plc != nil {
		plcBatch = w.plc.take(cursors) // after the swap too: every PLC entry the swapped links use
	}
	nameBatch := w.names.Seal() // and every name
	w.mu.Unlock()
	ungate() // swapped: repository writes go on into the new memtables

	changed := false
	for k, v := range cursors {
		if w.cfg.Node.FSM.Cursor(k) != v {
			changed = true
		}
	}
	if links.Len() == 0 && revs.Len() == 0 && len(comps) == 0 && !changed && len(outlines) == 0 && plcBatch == nil && nameBatch == nil {
		w.spare = [2]*lsm.Memtable{links, revs}
		return nil
	}
	// A bucket slow to take the tables (or a slow publication) holds the
	// flush, silently else. The goroutine reads only these counts, taken
	// now: the memtables are sorted, reset and reused meanwhile.
	nLinks, nRevs := links.Len(), revs.Len()
	slow := time.NewTicker(slowFlushSay)
	flushed, said := make(chan struct{}), make(chan struct{})
	defer func() { close(flushed); <-said; slow.Stop() }()
	go func() {
		defer close(said)
		for {
			select {
			case <-flushed:
				return
			case <-slow.C:
				w.log.Warn("flush still running: the object store is slow to take its tables (or Raft to publish them)", "running", time.Since(start).Round(time.Second), "links", nLinks, "revocations", nRevs)
			}
		}
	}()
	var edit lsm.Edit
	for _, mt := range []struct {
		tree lsm.Tree
		m    *lsm.Memtable
	}{{lsm.TreeRevocations, revs}, {lsm.TreeLinks, links}} {
		if mt.m.Len() == 0 {
			continue
		}
		run, err := lsm.WriteRun(ctx, w.cfg.Store, w.cfg.Catalog, mt.tree, lsm.RunDelta, 0, mt.m.Sorted())
		if err != nil {
			w.dead.Store(true)
			return fmt.Errorf("flush %s: %w", mt.tree, err)
		}
		edit.Add = append(edit.Add, run)
	}
	links.Reset() // written: reused by the next flush
	revs.Reset()
	w.spare = [2]*lsm.Memtable{links, revs}
	if plcBatch != nil {
		runs, err := plcRuns(ctx, w, plcBatch)
		if err != nil {
			w.dead.Store(true)
			return err
		}
		edit.Add = append(edit.Add, runs...)
	}
	if nameBatch != nil {
		run, err := namesRun(ctx, w, nameBatch)
		if err != nil {
			w.dead.Store(true)
			return err
		}
		edit.Add = append(edit.Add, run)
	}
	for _, c := range comps {
		if len(c.add.Tables) > 0 { // none: a drop of a run's every table
			edit.Add = append(edit.Add, c.add)
		}
		edit.Remove = append(edit.Remove, c.remove...)
	}
	outlines, err := w.publishOutlines(ctx, outlines)
	if err != nil {
		return err
	}
	edit.Base = w.gen
	// Time: the tables the edit removes wait for deletion from it (gc.go).
	entry := fsm.Flush{Edit: edit, Outlines: outlines, Cursors: cursors, Clock: maxStamp, Time: time.Now().UnixNano()}
	pubStart := time.Now()
	res, err := w.cfg.Node.Propose(ctx, fsm.TypeFlush, 0, entry)
	if err != nil {
		w.dead.Store(true)
		return fmt.Errorf("publish: %w: %w", err, ErrLeadershipLost)
	}
	w.metrics.PublishSeconds.Observe(time.Since(pubStart).Seconds())
	w.pending.Committed()
	fr := res.(fsm.FlushResult)
	w.gen = fr.Generation
	if plcBatch != nil {
		w.plc.m.Published(plcBatch, fr.Generation)
	}
	if nameBatch != nil {
		w.names.Published(nameBatch, fr.Generation)
	}
	w.metrics.FlushSeconds.Observe(time.Since(start).Seconds())
	w.metrics.Generation.Set(float64(fr.Generation))
	w.log.Debug("published", "generation", fr.Generation, "links", nLinks, "revocations", nRevs, "outlines", len(outlines), "took", time.Since(start))
	return nil
}
