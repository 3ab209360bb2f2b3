package lsm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/eddy-backlinks/eddy/objstore"
)

// fetchBytesMax bounds one ranged GET (adjacent frames of one table).
const fetchBytesMax = 256 << 20

// fetchGroup is one ranged GET: frames first..last of one table.
type fetchGroup struct {
	t           *viewTable
	meta        *TableMeta // t's, loaded when the group was planned
	noCache     bool       // frames fetched are not put in the cache (a big count's later windows)
	first, last int
	frames      [][]byte // decoded, by frame - first
	// own holds the buffers a noCache group decoded its frames into, by
	// frame - first: the slot's next noCache plan decodes into them again
	// (a count's windows: without it each window allocated and faulted in
	// ~64 MiB of fresh memory, and the collector ran for it). Nothing
	// else refers to them once the plan's merge is done.
	own    [][]byte
	lo, hi int // the frames the cache lacked (lo < 0: none)
	gets   int
	err    error
}

// addGroup appends a group for frames first..last of t, reusing the frame
// slice of a group that was there before.
func addGroup(gs []fetchGroup, t *viewTable, m *TableMeta, first, last int) []fetchGroup {
	if len(gs) < cap(gs) {
		gs = gs[:len(gs)+1]
		g := &gs[len(gs)-1]
		*g = fetchGroup{t: t, meta: m, first: first, last: last, frames: g.frames[:0], own: g.own}
		return gs
	}
	return append(gs, fetchGroup{t: t, meta: m, first: first, last: last})
}

// fetch fills g.frames from the cache, or with one ranged GET covering the
// frames the cache lacks.
func (r *Reader) fetch(ctx context.Context, g *fetchGroup) (gets int, err error) {
	lo, hi := r.fromCache(g)
	if lo < 0 {
		return 0, nil
	}
	return r.get(ctx, g, lo, hi)
}

// fromCache sizes g.frames and fills it from the cache; it returns the
// first and last frames the cache lacks (lo < 0: none).
func (r *Reader) fromCache(g *fetchGroup) (lo, hi int) {
	g.frames = reuseSlice(g.frames, g.last-g.first+1)
	clear(g.frames)
	lo, hi = -1, -1
	for i := g.first; i <= g.last; i++ {
		if recs, ok := r.cache.Get(g.t.ref.ID, i); ok {
			g.frames[i-g.first] = recs
			continue
		}
		if lo < 0 {
			lo = i
		}
		hi = i
	}
	return lo, hi
}

// get fetches frames lo..hi of g in one ranged GET and fills the ones
// g.frames lacks.
func (r *Reader) get(ctx context.Context, g *fetchGroup, lo, hi int) (gets int, err error) {
	off, n := g.meta.ByteRange(lo, hi)
	if n > fetchBytesMax {
		return 0, fmt.Errorf("table %s: frames %d..%d are %d bytes: %w", g.t.ref.ID, lo, hi, n, ErrTooBig)
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	buf, err := r.store.GetRange(ctx, dataKey(g.t.tree, g.t.ref.ID), off, n)
	<-r.sem
	if errors.Is(err, objstore.ErrRange) {
		// The meta places these frames past the object's end: the data
		// object was cut short (or replaced) in the store.
		return 1, &CorruptError{Tree: g.t.tree, Table: g.t.ref.ID, Err: fmt.Errorf("frames %d..%d at bytes %d..%d lie past the data object's end (%v): %w", lo, hi, off, off+n, err, ErrCorrupt)}
	}
	if err != nil {
		return 1, fmt.Errorf("table %s: %w", g.t.ref.ID, err)
	}
	for i := lo; i <= hi; i++ {
		if g.frames[i-g.first] != nil {
			continue
		}
		foff, fn := g.meta.ByteRange(i, i)
		var dst []byte
		j := i - g.first
		if g.noCache && j < len(g.own) {
			dst = g.own[j]
		}
		recs, err := g.meta.DecodeFrame(i, buf[foff-off:foff-off+fn], dst)
		if errors.Is(err, ErrCorrupt) {
			return 1, &CorruptError{Tree: g.t.tree, Table: g.t.ref.ID, Err: err} // err names the frame
		}
		if err != nil {
			return 1, fmt.Errorf("table %s frame %d: %w", g.t.ref.ID, i, err)
		}
		if !g.noCache {
			r.cache.Put(g.t.ref.ID, i, recs)
		} else {
			for len(g.own) <= j {
				g.own = append(g.own, nil)
			}
			g.own[j] = recs
		}
		g.frames[i-g.first] = recs
	}
	return 1, nil
}

// fetchAll fills every group: from the cache first, then the groups that
// lack frames with one GET each, concurrently (a warm query starts no
// goroutine). Each group's gets and err say what it cost.
func (r *Reader) fetchAll(ctx context.Context, groups []fetchGroup) error {
	missing := 0
	for i := range groups {
		g := &groups[i]
		g.gets, g.err = 0, nil
		g.lo, g.hi = r.fromCache(g)
		if g.lo >= 0 {
			missing++
		}
	}
	if missing == 0 {
		return nil
	}
	var wg sync.WaitGroup
	for i := range groups {
		g := &groups[i]
		if g.lo < 0 {
			continue
		}
		if missing == 1 {
			g.gets, g.err = r.get(ctx, g, g.lo, g.hi)
			break
		}
		wg.Go(func() { g.gets, g.err = r.get(ctx, g, g.lo, g.hi) })
	}
	wg.Wait()
	var errs []error
	for i := range groups {
		if groups[i].err != nil {
			errs = append(errs, groups[i].err)
		}
	}
	return errors.Join(errs...)
}
