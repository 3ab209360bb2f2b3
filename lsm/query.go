package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
)

// Query limits.
const (
	// FetchConcurrencyMax bounds concurrent object-store requests of one
	// reader: enough to fetch every run of a tree at once on a small node.
	FetchConcurrencyMax = 32
	// LimitMax bounds the links one page returns.
	LimitMax = 1000
	// CandidatesMax bounds the links one query considers (a count of the
	// most popular targets on the network is in the low millions).
	CandidatesMax = 64 << 20
	// fetchBytesMax bounds one ranged GET (adjacent frames of one table).
	fetchBytesMax = 256 << 20
)

// ErrTooBig: a query would consider more than CandidatesMax links.
var ErrTooBig = errors.New("query too big")

// Reader answers queries from views; it fetches frames from the object
// store into a shared cache. Safe for concurrent use.
type Reader struct {
	store objstore.Store
	cache *FrameCache
	sem   chan struct{}
}

// NewReader returns a reader over store with a frame cache.
func NewReader(store objstore.Store, cache *FrameCache) *Reader {
	if cache == nil {
		cache = NewFrameCache(0)
	}
	return &Reader{store: store, cache: cache, sem: make(chan struct{}, FetchConcurrencyMax)}
}

// Cache returns the reader's frame cache.
func (r *Reader) Cache() *FrameCache { return r.cache }

// Filter narrows a query to links from some source collections, source
// DIDs or paths; an empty list does not filter.
type Filter struct {
	Collections []uint64
	DIDs        []uint64
	Paths       []uint64 // location path IDs (Location.PathID)
}

func (f *Filter) empty() bool {
	return len(f.Collections) == 0 && len(f.DIDs) == 0 && len(f.Paths) == 0
}

func (f *Filter) match(l *link.Backlink) bool {
	if len(f.Collections) > 0 && !slices.Contains(f.Collections, l.Source.Collection) {
		return false
	}
	if len(f.DIDs) > 0 && !slices.Contains(f.DIDs, l.Source.DID) {
		return false
	}
	if len(f.Paths) > 0 && !slices.Contains(f.Paths, l.Location.PathID()) {
		return false
	}
	return true
}

// Cursor is a position in one target's links: the source and location of
// the last link returned. Positions are in byte order of (source,
// location), which never changes as links arrive, so a page never repeats
// or skips a link that was live when paging began.
type Cursor struct {
	Source   link.RecordID
	Location link.Location
}

// Query asks for the live links to Target.
type Query struct {
	Target  link.RecordID
	After   *Cursor // exclusive start; nil = from the first (or, Reverse, the last)
	Reverse bool
	Limit   int // 0 = LimitMax
	Filter  Filter
}

// Stats says what a query cost.
type Stats struct {
	TablesConsidered int // tables whose shard or run may hold the key
	TablesFiltered   int // skipped by their filter
	Round1GETs       int // ranged GETs of backlink frames
	Round2GETs       int // ranged GETs of revocation frames
	Round2Passes     int // revocation passes (1 unless a page was mostly revoked)
	Round1MaxPerRun  int // the most GETs any one run needed in round one
	Candidates       int // links read before revocation
	Revoked          int
}

// Result is one page of links.
type Result struct {
	Links      []link.Backlink
	Next       *Cursor // nil when there are no more links
	Generation uint64
	Stats      Stats
}

// Backlinks returns the live links to q.Target in source order (or
// reverse), after q.After, at most q.Limit of them.
//
// Round one reads the target's frames from every run (filters skip tables,
// fences pick frames, adjacent frames come in one ranged GET, runs in
// parallel). Round two reads the revocations of the sources found (filters
// first). If more than three quarters of a page's candidates were revoked,
// round two repeats on the next candidates, a bounded number of times.
func (r *Reader) Backlinks(ctx context.Context, v *View, q Query) (*Result, error) {
	limit := q.Limit
	if limit <= 0 || limit > LimitMax {
		limit = LimitMax
	}
	res := &Result{Generation: v.Generation(), Links: make([]link.Backlink, 0, min(limit, 128))}
	after := q.After
	batch := limit + limit/2 + 16
	for len(res.Links) < limit {
		cands, horizon, err := r.candidates(ctx, v, q.Target, &q.Filter, window{after: after, reverse: q.Reverse, want: batch}, &res.Stats)
		if err != nil {
			return nil, err
		}
		if q.Reverse {
			slices.Reverse(cands)
		}
		// Round two in batches: a page rarely needs the revocations of
		// every candidate.
		rest := false // candidates not returned follow the page's last link
		check := limit + limit/2 + 16
		for len(cands) > 0 && len(res.Links) < limit {
			n := min(check, len(cands))
			live, err := r.live(ctx, v, cands[:n], &res.Stats)
			if err != nil {
				return nil, err
			}
			for i, ok := range live {
				if !ok {
					continue
				}
				if len(res.Links) == limit {
					rest = true
					break
				}
				res.Links = append(res.Links, cands[i])
				if len(res.Links) == limit && i < n-1 {
					rest = true
				}
			}
			cands = cands[n:]
			check *= 4
		}
		if len(cands) > 0 {
			rest = true
		}
		if len(res.Links) == limit {
			if rest || horizon != nil {
				last := res.Links[len(res.Links)-1]
				res.Next = &Cursor{Source: last.Source, Location: last.Location}
			}
			break
		}
		if horizon == nil {
			break // every link of the target was considered
		}
		after = horizon // everything up to the horizon was considered
		batch *= 4
	}
	return res, nil
}

// All returns every live link to target that passes filter, in source
// order (bounded by CandidatesMax).
func (r *Reader) All(ctx context.Context, v *View, target link.RecordID, filter Filter) ([]link.Backlink, Stats, error) {
	var st Stats
	cands, _, err := r.candidates(ctx, v, target, &filter, window{}, &st)
	if err != nil {
		return nil, st, err
	}
	live, err := r.live(ctx, v, cands, &st)
	if err != nil {
		return nil, st, err
	}
	out := cands[:0]
	for i, ok := range live {
		if ok {
			out = append(out, cands[i])
		}
	}
	return out, st, nil
}

// Count returns the number of live links to target that pass filter.
func (r *Reader) Count(ctx context.Context, v *View, target link.RecordID, filter Filter) (uint64, Stats, error) {
	var st Stats
	cands, _, err := r.candidates(ctx, v, target, &filter, window{}, &st)
	if err != nil {
		return 0, st, err
	}
	live, err := r.live(ctx, v, cands, &st)
	if err != nil {
		return 0, st, err
	}
	var n uint64
	for _, ok := range live {
		if ok {
			n++
		}
	}
	return n, st, nil
}

func cmpPos(s1 link.RecordID, l1 link.Location, s2 link.RecordID, l2 link.Location) int {
	if c := s1.Compare(s2); c != 0 {
		return c
	}
	switch {
	case l1 < l2:
		return -1
	case l1 > l2:
		return 1
	}
	return 0
}

// fetchGroup is one ranged GET: frames first..last of one table.
type fetchGroup struct {
	t           *viewTable
	first, last int
	frames      [][]byte // decoded, by frame - first
	err         error
}

// fetch fills g.frames from the cache, or with one ranged GET covering the
// frames the cache lacks.
func (r *Reader) fetch(ctx context.Context, g *fetchGroup) (gets int, err error) {
	g.frames = make([][]byte, g.last-g.first+1)
	lo, hi := -1, -1
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
	if lo < 0 {
		return 0, nil
	}
	off, n := g.t.meta.ByteRange(lo, hi)
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
	if err != nil {
		return 1, fmt.Errorf("table %s: %w", g.t.ref.ID, err)
	}
	for i := lo; i <= hi; i++ {
		if g.frames[i-g.first] != nil {
			continue
		}
		foff, fn := g.t.meta.ByteRange(i, i)
		recs, err := g.t.meta.DecodeFrame(i, buf[foff-off:foff-off+fn], nil)
		if err != nil {
			return 1, fmt.Errorf("table %s frame %d: %w", g.t.ref.ID, i, err)
		}
		r.cache.Put(g.t.ref.ID, i, recs)
		g.frames[i-g.first] = recs
	}
	return 1, nil
}

// fetchAll runs fetches concurrently.
func (r *Reader) fetchAll(ctx context.Context, groups []*fetchGroup) (gets []int, err error) {
	gets = make([]int, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gets[i], g.err = r.fetch(ctx, g)
		}()
	}
	wg.Wait()
	var errs []error
	for _, g := range groups {
		if g.err != nil {
			errs = append(errs, g.err)
		}
	}
	return gets, errors.Join(errs...)
}

// window limits round one to the frames a page needs: the links after
// (or, reverse, before) a cursor, about want of them per run. want 0 reads
// every link of the target.
type window struct {
	after   *Cursor
	reverse bool
	want    int
}

// windowFramesMin: a target spanning at most this many frames of a table
// is read whole (512 KiB of 64 KiB frames, about 8,000 links).
const windowFramesMin = 8

// cursorKey is the 56-byte prefix of a position: target, source, location.
func cursorKey(target link.RecordID, c *Cursor) []byte {
	k := make([]byte, 56)
	target.Put(k[0:24])
	c.Source.Put(k[24:48])
	binary.BigEndian.PutUint64(k[48:56], uint64(c.Location))
	return k
}

// candidates is round one: the links to target in every run, folded
// (identical links keep their newest rev), filtered, in ascending source
// order. With a window it reads only the frames after the cursor that a
// page needs; horizon, when not nil, is the furthest position (in the
// window's direction) up to which every run was read: candidates beyond
// it are dropped, and the caller continues from it.
func (r *Reader) candidates(ctx context.Context, v *View, target link.RecordID, f *Filter, w window, st *Stats) ([]link.Backlink, *Cursor, error) {
	prefix := target.Bytes()
	var groups []*fetchGroup
	var cut []bool
	runOf := make([]int, 0)
	var key []byte
	if w.after != nil {
		key = cursorKey(target, w.after)
	}
	for ri, vr := range v.trees[TreeLinks] {
		t := vr.tableFor(prefix[:])
		if t == nil {
			continue
		}
		st.TablesConsidered++
		if !t.meta.MayContain(prefix[:]) {
			st.TablesFiltered++
			continue
		}
		first, last, ok := t.meta.FramesFor(prefix[:])
		if !ok {
			continue
		}
		lo, hi := first, last
		// Targets of a few frames are read whole (one GET, no second
		// round); a window pays off for popular targets.
		if w.want > 0 && last-first+1 > windowFramesMin {
			need := max(windowFramesMin, w.want/(FrameBytesMax/link.BacklinkSize)+2)
			if !w.reverse {
				if key != nil {
					if fs, _, ok := t.meta.FramesFor(key); ok {
						lo = max(lo, fs)
					} else if bytes.Compare(key, t.meta.MaxKey[:56]) > 0 {
						continue // nothing after the cursor here
					}
				}
				hi = min(last, lo+need-1)
			} else {
				if key != nil {
					if _, fl, ok := t.meta.FramesFor(key); ok {
						hi = min(hi, fl)
					} else if bytes.Compare(key, t.meta.MinKey[:56]) < 0 {
						continue // nothing before the cursor here
					}
				}
				lo = max(first, hi-need+1)
			}
			if lo > hi {
				continue
			}
		}
		groups = append(groups, &fetchGroup{t: t, first: lo, last: hi})
		cut = append(cut, (!w.reverse && hi < last) || (w.reverse && lo > first))
		runOf = append(runOf, ri)
	}
	gets, err := r.fetchAll(ctx, groups)
	perRun := map[int]int{}
	for i, n := range gets {
		st.Round1GETs += n
		perRun[runOf[i]] += n
	}
	for _, n := range perRun {
		st.Round1MaxPerRun = max(st.Round1MaxPerRun, n)
	}
	if err != nil {
		return nil, nil, err
	}
	// The horizon: for each run read only in part, the last position it
	// holds of the target in what was read.
	var horizon *Cursor
	for gi, g := range groups {
		if !cut[gi] {
			continue
		}
		var recs []byte
		var off int
		if !w.reverse {
			recs = g.frames[len(g.frames)-1]
			off = len(recs) - link.BacklinkSize
		} else {
			recs = g.frames[0]
		}
		if len(recs) == 0 || !bytes.Equal(recs[off:off+24], prefix[:]) {
			continue // the target ends (or starts) inside what was read
		}
		l := link.GetBacklink(recs[off:])
		c := Cursor{Source: l.Source, Location: l.Location}
		if horizon == nil || (!w.reverse && cmpPos(c.Source, c.Location, horizon.Source, horizon.Location) < 0) ||
			(w.reverse && cmpPos(c.Source, c.Location, horizon.Source, horizon.Location) > 0) {
			horizon = &c
		}
	}
	inWindow := func(l *link.Backlink) bool {
		if w.after != nil {
			x := cmpPos(l.Source, l.Location, w.after.Source, w.after.Location)
			if (!w.reverse && x <= 0) || (w.reverse && x >= 0) {
				return false
			}
		}
		if horizon != nil {
			x := cmpPos(l.Source, l.Location, horizon.Source, horizon.Location)
			if (!w.reverse && x > 0) || (w.reverse && x < 0) {
				return false
			}
		}
		return true
	}
	// Size the result once for big targets (a popular target's frames
	// hold most of their records); small ones append.
	n := 0
	for _, g := range groups {
		for _, recs := range g.frames {
			lo, hi := prefixRange(recs, link.BacklinkSize, prefix[:])
			n += (hi - lo) / link.BacklinkSize
		}
	}
	if n > CandidatesMax {
		return nil, nil, fmt.Errorf("target %v: more than %d links: %w", target, CandidatesMax, ErrTooBig)
	}
	out := make([]link.Backlink, 0, n)
	all, windowed := f.empty(), w.after != nil || horizon != nil
	for _, g := range groups {
		for _, recs := range g.frames {
			lo, hi := prefixRange(recs, link.BacklinkSize, prefix[:])
			for off := lo; off < hi; off += link.BacklinkSize {
				l := link.GetBacklink(recs[off:])
				if (all || f.match(&l)) && (!windowed || inWindow(&l)) {
					out = append(out, l)
				}
			}
			if len(out) > CandidatesMax {
				return nil, nil, fmt.Errorf("target %v: more than %d links: %w", target, CandidatesMax, ErrTooBig)
			}
		}
	}
	if len(groups) > 1 {
		slices.SortFunc(out, func(a, b link.Backlink) int { return a.Compare(&b) })
	}
	// Fold identical links (same source and location), keeping the newest.
	k := 0
	for i := range out {
		if k > 0 && out[k-1].Source == out[i].Source && out[k-1].Location == out[i].Location {
			out[k-1].SourceRev = max(out[k-1].SourceRev, out[i].SourceRev)
			continue
		}
		out[k] = out[i]
		k++
	}
	out = out[:k]
	st.Candidates += len(out)
	return out, horizon, nil
}

// prefixRange returns the byte offsets [lo, hi) of the records of a sorted
// frame that start with prefix.
func prefixRange(recs []byte, width int, prefix []byte) (int, int) {
	n := len(recs) / width
	i := searchRecs(n, func(i int) bool { return bytes.Compare(recs[i*width:i*width+len(prefix)], prefix) >= 0 })
	j := searchRecs(n, func(i int) bool { return bytes.Compare(recs[i*width:i*width+len(prefix)], prefix) > 0 })
	return i * width, j * width
}

func searchRecs(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// live is round two: for each link, whether it survives the revocations of
// its source record and repository. Keys are kept in sorted slices (no
// maps): repository keys {0,0,did} sort before every record key, so the
// keys are visited in byte order and each table's frame ranges come out
// ascending, ready to merge into one GET per run of adjacent frames.
func (r *Reader) live(ctx context.Context, v *View, links []link.Backlink, st *Stats) ([]bool, error) {
	st.Round2Passes++
	srcKeys := make([]link.RecordID, len(links))
	dids := make([]uint64, len(links))
	for i := range links {
		srcKeys[i] = links[i].Source
		dids[i] = links[i].Source.DID
	}
	if !slices.IsSortedFunc(srcKeys, link.RecordID.Compare) {
		slices.SortFunc(srcKeys, link.RecordID.Compare)
	}
	srcKeys = slices.Compact(srcKeys)
	slices.Sort(dids)
	dids = slices.Compact(dids)
	repoThr := make([]uint64, len(dids))
	srcThr := make([]uint64, len(srcKeys))
	nKeys := len(dids) + len(srcKeys)
	keyAt := func(i int) link.RecordID {
		if i < len(dids) {
			return link.RepoID(dids[i])
		}
		return srcKeys[i-len(dids)]
	}
	thrAt := func(i int) *uint64 {
		if i < len(dids) {
			return &repoThr[i]
		}
		return &srcThr[i-len(dids)]
	}

	type hit struct {
		key         int // index into the key sequence
		first, last int
		group       *fetchGroup
	}
	var groups []*fetchGroup
	var hits []hit
	for _, vr := range v.trees[TreeRevocations] {
		var cur map[*viewTable]*fetchGroup
		if vr.run.Kind == RunCompacted {
			cur = map[*viewTable]*fetchGroup{}
		}
		var single *fetchGroup
		for i := 0; i < nKeys; i++ {
			kb := keyAt(i).Bytes()
			t := vr.tableFor(kb[:])
			if t == nil || !t.meta.MayContain(kb[:]) {
				continue
			}
			first, last, ok := t.meta.FramesFor(kb[:])
			if !ok {
				continue
			}
			g := single
			if cur != nil {
				g = cur[t]
			}
			if g == nil || first > g.last+1 {
				g = &fetchGroup{t: t, first: first, last: last}
				groups = append(groups, g)
				if cur != nil {
					cur[t] = g
				} else {
					single = g
				}
			} else if last > g.last {
				g.last = last
			}
			hits = append(hits, hit{key: i, first: first, last: last, group: g})
		}
	}
	gets, err := r.fetchAll(ctx, groups)
	for _, n := range gets {
		st.Round2GETs += n
	}
	if err != nil {
		return nil, err
	}
	for _, h := range hits {
		kb := keyAt(h.key).Bytes()
		thr := thrAt(h.key)
		for fi := h.first; fi <= h.last; fi++ {
			recs := h.group.frames[fi-h.group.first]
			lo, hi := prefixRange(recs, link.RevocationSize, kb[:])
			for off := lo; off < hi; off += link.RevocationSize {
				if rev := binary.BigEndian.Uint64(recs[off+24 : off+32]); rev > *thr {
					*thr = rev
				}
			}
		}
	}
	out := make([]bool, len(links))
	for i := range links {
		l := &links[i]
		si, _ := slices.BinarySearchFunc(srcKeys, l.Source, link.RecordID.Compare)
		di, _ := slices.BinarySearch(dids, l.Source.DID)
		out[i] = link.Live(l.SourceRev, srcThr[si], repoThr[di])
		if !out[i] {
			st.Revoked++
		}
	}
	return out, nil
}
