// Package query answers "who links here?" over HTTP on every node: the
// design's blue.cerulea.backlinks.listBacklinks and a Constellation-
// compatible API, from the manifest the node has applied.
package query

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/internal/corrupt"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// ManifestSource is what Views needs from the replicated state.
type ManifestSource interface {
	Manifest() *lsm.Manifest
	Watch() <-chan struct{}
}

// Views keeps the view a node serves queries from: when the replicated
// manifest changes, it loads the metadata of every new table (fetching it
// from the store on a node that never saw it) and only then switches
// queries to the new generation.
type Views struct {
	src     ManifestSource
	cat     *lsm.Catalog
	log     hclog.Logger
	current atomic.Pointer[lsm.View]
	changed chan struct{}  // closed and replaced on every switch
	mu      sync.Mutex     // guards changed and held; a switch stores current under it
	held    map[uint64]int // generation -> queries in flight on a view of it (Acquire)
	applied atomic.Int64   // unix nanos of the last switch
	// Corrupt, when set before Run, counts corrupt table metadata met
	// while loading a view (Metrics.Corrupt).
	Corrupt     *prometheus.CounterVec
	corruptSeen map[string]bool // tables counted (refresh runs on one goroutine)
	swept       bool            // the stale local metas of an earlier process are gone (refresh)
	// Cache, when set before Run, is the frame cache queries read through:
	// a replaced table's frames are evicted from it.
	Cache *lsm.FrameCache
	// Hold, when set before Run, defers opening manifests while it returns
	// true: a restarted node replaying the log it had at start, whose
	// older manifests name tables long since deleted as garbage (each
	// would be fetched, found missing and logged). The first refresh after
	// it returns false opens the newest manifest applied.
	Hold func() bool
}

// dropReplaced forgets the tables of prev that next no longer holds
// (compaction replaced them): their decoded metadata and local meta files,
// and their cached frames. Tables never come back to a manifest (their IDs
// are random, they are immutable). A query still running on prev that
// needs one of their metas again gets it from the bucket (which keeps
// garbage until every node serves past it) without the catalog keeping it
// (lsm.Catalog.Drop); their frames likewise.
//
// It also drops the tables on the replicated garbage list that next is
// past (when the source has one: a cluster's fsm.State): a table this node
// fetched or wrote but never served (published and replaced between two
// generations it served, or fetched for a view it could not open) is in
// no prev, but is on that list from the generation that removed it until
// every node, this one included, serves past it.
func (v *Views) dropReplaced(prev, next *lsm.View) {
	drop := func(t lsm.Tree, id string) {
		v.cat.Drop(t, id)
		if v.Cache != nil {
			v.Cache.DropTable(id)
		}
	}
	if prev != nil {
		for _, t := range lsm.Trees {
			keep := map[string]bool{}
			for _, ref := range next.Manifest.Tables(t) {
				keep[ref.ID] = true
			}
			for _, ref := range prev.Manifest.Tables(t) {
				if !keep[ref.ID] {
					drop(t, ref.ID)
				}
			}
		}
	}
	if gs, ok := v.src.(garbageSource); ok {
		for _, g := range gs.Garbage() {
			if g.Generation <= next.Generation() {
				drop(g.Tree, g.ID)
			}
		}
	}
}

// garbageSource is what a cluster's ManifestSource (fsm.State) also
// offers: the tables that left the manifest and wait for deletion.
type garbageSource interface{ Garbage() []fsm.Garbage }

// dropStale removes, once per process on its first view, the local meta
// files an earlier process left of tables that view does not hold: tables
// compaction replaced while this node was down (dropReplaced only sees the
// switches it makes), or a killed leader's unpublished uploads.
func (v *Views) dropStale(view *lsm.View) {
	if v.swept {
		return
	}
	v.swept = true
	live := map[string]bool{}
	for _, t := range lsm.Trees {
		for _, ref := range view.Manifest.Tables(t) {
			live[ref.ID] = true
		}
	}
	n, err := v.cat.DropStale(func(_ lsm.Tree, id string) bool { return live[id] })
	if err != nil {
		v.log.Warn("remove the local metadata of tables no longer served", "error", err)
	}
	if n > 0 {
		v.log.Info("removed the local metadata of tables no longer served", "tables", n, "generation", view.Generation())
	}
}

// NewViews starts following src.
func NewViews(src ManifestSource, cat *lsm.Catalog, log hclog.Logger) *Views {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	v := &Views{src: src, cat: cat, log: log.Named("views"), changed: make(chan struct{})}
	empty, _ := lsm.OpenView(context.Background(), cat, &lsm.Manifest{})
	v.current.Store(empty)
	return v
}

// Run follows the manifest until ctx is done.
func (v *Views) Run(ctx context.Context) {
	watch := v.src.Watch()
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		v.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-watch:
		case <-retry.C: // also retries a manifest whose tables could not be loaded yet
		}
	}
}

func (v *Views) refresh(ctx context.Context) {
	m := v.src.Manifest()
	if cur := v.current.Load(); cur != nil && cur.Generation() >= m.Generation {
		return
	}
	if v.Hold != nil && v.Hold() {
		return // Run's retry comes back within a second
	}
	view, err := lsm.OpenView(ctx, v.cat, m)
	if err != nil {
		// A corrupt meta is counted and logged once per table (the load is
		// retried every second); anything else is a warning each time.
		var ce *lsm.CorruptError
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			// A manifest older than the cluster's (a node back from a long
			// partition or a restart from an old snapshot) may name tables the
			// leader deleted since: never serve it; the next try takes the
			// newest manifest the state has applied by then.
			v.log.Info("a table of this manifest is gone from the store (deleted as garbage): waiting for a newer manifest", "generation", m.Generation, "error", err)
		case !errors.As(err, &ce):
			v.log.Warn("cannot open manifest yet", "generation", m.Generation, "error", err)
		case !v.corruptSeen[ce.Table]:
			if v.corruptSeen == nil {
				v.corruptSeen = map[string]bool{}
			}
			v.corruptSeen[ce.Table] = true
			corrupt.Note(v.Corrupt, v.log, "loading the metadata of generation "+strconv.FormatUint(m.Generation, 10), err)
		}
		return
	}
	v.mu.Lock() // against Acquire and OldestServed
	prev := v.current.Swap(view)
	v.mu.Unlock()
	v.applied.Store(time.Now().UnixNano())
	v.dropReplaced(prev, view)
	v.dropStale(view)
	v.mu.Lock()
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// Acquire returns the view a query is answered from and holds its
// generation until release is called: OldestServed reports it meanwhile,
// so the leader's garbage collector never deletes a table a query in
// flight may still read. release must be called once.
func (v *Views) Acquire() (view *lsm.View, release func()) {
	v.mu.Lock()
	view = v.current.Load()
	gen := view.Generation()
	if v.held == nil {
		v.held = map[uint64]int{}
	}
	v.held[gen]++
	v.mu.Unlock()
	var once sync.Once
	return view, func() {
		once.Do(func() {
			v.mu.Lock()
			if v.held[gen]--; v.held[gen] <= 0 {
				delete(v.held, gen)
			}
			v.mu.Unlock()
		})
	}
}

// AcquireAtLeast waits until the served generation is at least gen (or
// ctx ends), then acquires the current view as Acquire does. Nothing is
// held while it waits: the hold is on the generation the query reads, so
// a node reports no older one for it (and never the generation 0 of a
// node that had opened no manifest yet, which its status leaves out) while
// the query reads a newer one.
func (v *Views) AcquireAtLeast(ctx context.Context, gen uint64) (*lsm.View, func(), error) {
	if _, err := v.WaitFor(ctx, gen); err != nil {
		return nil, nil, err
	}
	view, release := v.Acquire()
	return view, release, nil
}

// OldestServed is the oldest manifest generation this node may still read
// tables of: its current view's, or an older one a query in flight holds
// (Acquire). Views only move forward, so a query that starts after the call
// reads this generation or a newer one. 0 before the first manifest opens.
func (v *Views) OldestServed() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	oldest := v.current.Load().Generation()
	for gen := range v.held {
		oldest = min(oldest, gen)
	}
	return oldest
}

// Current returns the view queries are answered from.
func (v *Views) Current() *lsm.View { return v.current.Load() }

// Applied is the generation of the newest manifest the source has (the
// node's replicated state): what Current moves to.
func (v *Views) Applied() uint64 { return v.src.Manifest().Generation }

// WaitFor waits until the served generation is at least gen, or ctx ends.
func (v *Views) WaitFor(ctx context.Context, gen uint64) (*lsm.View, error) {
	for {
		cur := v.current.Load()
		if cur.Generation() >= gen {
			return cur, nil
		}
		v.mu.Lock()
		ch := v.changed
		v.mu.Unlock()
		if cur := v.current.Load(); cur.Generation() >= gen {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

// AppliedAt is when the current view was switched to (zero if never).
func (v *Views) AppliedAt() time.Time {
	n := v.applied.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
