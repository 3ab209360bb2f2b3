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

	"github.com/eddy-backlinks/eddy/internal/corrupt"
	"github.com/eddy-backlinks/eddy/lsm"
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
	changed chan struct{} // closed and replaced on every switch
	mu      sync.Mutex
	applied atomic.Int64 // unix nanos of the last switch
	// Corrupt, when set before Run, counts corrupt table metadata met
	// while loading a view (Metrics.Corrupt).
	Corrupt     *prometheus.CounterVec
	corruptSeen map[string]bool // tables counted (refresh runs on one goroutine)
	// Cache, when set before Run, is the frame cache queries read through:
	// a replaced table's frames are evicted from it.
	Cache *lsm.FrameCache
}

// dropReplaced forgets the tables of prev that next no longer holds
// (compaction replaced them): their decoded metadata and local meta files,
// and their cached frames. Tables never come back to a manifest (their IDs
// are random, they are immutable), and queries still running on prev keep
// the metadata prev decoded; their frames, if needed again, are fetched
// from the bucket, which keeps garbage for a grace period.
func (v *Views) dropReplaced(prev, next *lsm.View) {
	if prev == nil {
		return
	}
	for _, t := range lsm.Trees {
		keep := map[string]bool{}
		for _, ref := range next.Manifest.Tables(t) {
			keep[ref.ID] = true
		}
		for _, ref := range prev.Manifest.Tables(t) {
			if keep[ref.ID] {
				continue
			}
			v.cat.Drop(t, ref.ID)
			if v.Cache != nil {
				v.Cache.DropTable(ref.ID)
			}
		}
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
	view, err := lsm.OpenView(ctx, v.cat, m)
	if err != nil {
		// A corrupt meta is counted and logged once per table (the load is
		// retried every second); anything else is a warning each time.
		var ce *lsm.CorruptError
		if !errors.As(err, &ce) {
			v.log.Warn("cannot open manifest yet", "generation", m.Generation, "error", err)
		} else if !v.corruptSeen[ce.Table] {
			if v.corruptSeen == nil {
				v.corruptSeen = map[string]bool{}
			}
			v.corruptSeen[ce.Table] = true
			corrupt.Note(v.Corrupt, v.log, "loading the metadata of generation "+strconv.FormatUint(m.Generation, 10), err)
		}
		return
	}
	prev := v.current.Swap(view)
	v.applied.Store(time.Now().UnixNano())
	v.dropReplaced(prev, view)
	v.mu.Lock()
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// Current returns the view queries are answered from.
func (v *Views) Current() *lsm.View { return v.current.Load() }

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
