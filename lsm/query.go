package lsm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

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
// DIDs or paths, or (collection, path) pairs; an empty list does not
// filter, and every non-empty list must match.
type Filter struct {
	Collections []uint64
	DIDs        []uint64     // sorted ascending
	Paths       []uint64     // location path IDs (Location.PathID)
	Sources     []SourcePair // the link is from one of these collection and path pairs
}

// SourcePair is a collection and a location path ID: where a link sits.
type SourcePair struct {
	Collection uint64
	Path       uint64
}

func (f *Filter) empty() bool {
	return len(f.Collections) == 0 && len(f.DIDs) == 0 && len(f.Paths) == 0 && len(f.Sources) == 0
}

func (f *Filter) match(l *link.Backlink) bool {
	if len(f.Sources) > 0 && !slices.Contains(f.Sources, SourcePair{l.Source.Collection, l.Location.PathID()}) {
		return false
	}
	if len(f.Collections) > 0 && !slices.Contains(f.Collections, l.Source.Collection) {
		return false
	}
	if _, ok := slices.BinarySearch(f.DIDs, l.Source.DID); len(f.DIDs) > 0 && !ok {
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
	Round2Scans      int // revocation tables walked from the cache, not asked through their filters
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
	s := getQueryScratch()
	defer putQueryScratch(s)
	res := &Result{Generation: v.Generation()}
	after := q.After
	batch := limit + limit/2 + 16
	for len(res.Links) < limit {
		cands, horizon, err := r.candidates(ctx, v, q.Target, &q.Filter, window{after: after, reverse: q.Reverse, want: batch}, s, &res.Stats)
		if err != nil {
			return nil, err
		}
		if res.Links == nil {
			// The page's one allocation: at most limit links, at most
			// the candidates when every link was read.
			n := limit
			if horizon == nil {
				n = min(n, len(cands))
			}
			res.Links = make([]link.Backlink, 0, n)
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
			live, err := r.live(ctx, v, cands[:n], s, &res.Stats)
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
	s := getBigQueryScratch()
	defer putQueryScratch(s)
	cands, _, err := r.candidates(ctx, v, target, &filter, window{}, s, &st)
	if err != nil {
		return nil, st, err
	}
	live, err := r.live(ctx, v, cands, s, &st)
	if err != nil {
		return nil, st, err
	}
	out := make([]link.Backlink, 0, len(cands)-st.Revoked)
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
	s := getBigQueryScratch()
	defer putQueryScratch(s)
	cands, _, err := r.candidates(ctx, v, target, &filter, window{}, s, &st)
	if err != nil {
		return 0, st, err
	}
	live, err := r.live(ctx, v, cands, s, &st)
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

// queryScratch is the working memory of one query, kept in a pool so that a
// warm query allocates little more than its page: fresh memory costs page
// faults and garbage collection, which used to be most of a small query's
// time. Only the query that took a scratch uses it.
type queryScratch struct {
	// Round one.
	groups []fetchGroup
	cut    []bool // group read in part (the window stopped before the target's end)
	runOf  []int  // the run of each group
	spans  []int  // the target's byte range [lo, hi) in each frame read, in order
	segs   []mergeSeg
	out    []link.Backlink

	// Round two.
	srcKeys         []link.RecordID
	dids            []uint64
	repoThr, srcThr []uint64
	repoRevs        []didRev
	fhash, shash    []uint64 // filter and shard hashes of the keys
	probeShard      []bool   // the tables of a run asked through filters
	scanFrames      [][]byte
	rgroups         []fetchGroup
	hits            []revHit
	live            []bool
	byTable         map[*viewTable]int // compacted run: each table's open group
}

// queryScratchLinksMax: the pool keeps buffers of at most this many links
// (4 MiB of candidates).
const queryScratchLinksMax = 1 << 16

// queryScratchBigMax: one scratch whose buffers grew past
// queryScratchLinksMax, up to this many links (a count of a popular
// target), is kept aside for the next read of a whole target (Count, All)
// rather than dropped: a warm count of 100,000 links otherwise clears
// about 11 MiB of fresh memory, a third of its cost. One at most (about 30
// MiB at this bound); larger buffers are dropped.
const queryScratchBigMax = 1 << 18

var queryScratchPool = sync.Pool{New: func() any { return new(queryScratch) }}

var bigQueryScratch atomic.Pointer[queryScratch]

func getQueryScratch() *queryScratch { return queryScratchPool.Get().(*queryScratch) }

// getBigQueryScratch returns the scratch kept aside by a large query if
// there is one (for reads of a whole target), else one from the pool.
func getBigQueryScratch() *queryScratch {
	if s := bigQueryScratch.Swap(nil); s != nil {
		return s
	}
	return getQueryScratch()
}

// linksCap is the capacity, in links, of the scratch's largest buffer.
func (s *queryScratch) linksCap() int {
	return max(cap(s.out), cap(s.srcKeys), cap(s.dids), cap(s.live), cap(s.hits), cap(s.repoRevs), cap(s.fhash), cap(s.shash))
}

func putQueryScratch(s *queryScratch) {
	// Keep no frame (the cache may have evicted it) and no table alive.
	clearGroups(s.groups)
	clearGroups(s.rgroups)
	s.groups, s.rgroups = s.groups[:0], s.rgroups[:0]
	clear(s.byTable)
	clear(s.scanFrames[:cap(s.scanFrames)])
	if len(s.byTable) > 1024 {
		s.byTable = nil
	}
	switch n := s.linksCap(); {
	case n <= queryScratchLinksMax:
	case n <= queryScratchBigMax:
		bigQueryScratch.Store(s) // the one it replaces, if any, is dropped
		return
	default:
		s.out, s.spans = nil, nil
		s.srcKeys, s.dids, s.repoThr, s.srcThr, s.hits, s.live = nil, nil, nil, nil, nil, nil
		s.repoRevs, s.fhash, s.shash = nil, nil, nil
	}
	queryScratchPool.Put(s)
}

func clearGroups(gs []fetchGroup) {
	gs = gs[:cap(gs)]
	for i := range gs {
		clear(gs[i].frames[:cap(gs[i].frames)])
		gs[i].t, gs[i].err = nil, nil
	}
}

// reuseSlice returns b with length n, reusing its array when it is big enough
// (the contents are then stale).
func reuseSlice[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// fetchGroup is one ranged GET: frames first..last of one table.
type fetchGroup struct {
	t           *viewTable
	first, last int
	frames      [][]byte // decoded, by frame - first
	lo, hi      int      // the frames the cache lacked (lo < 0: none)
	gets        int
	err         error
}

// addGroup appends a group for frames first..last of t, reusing the frame
// slice of a group that was there before.
func addGroup(gs []fetchGroup, t *viewTable, first, last int) []fetchGroup {
	if len(gs) < cap(gs) {
		gs = gs[:len(gs)+1]
		g := &gs[len(gs)-1]
		*g = fetchGroup{t: t, first: first, last: last, frames: g.frames[:0]}
		return gs
	}
	return append(gs, fetchGroup{t: t, first: first, last: last})
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

// cursorKey writes the 56-byte prefix of a position (target, source,
// location) into k and returns it.
func cursorKey(k *[56]byte, target link.RecordID, c *Cursor) []byte {
	target.Put(k[0:24])
	c.Source.Put(k[24:48])
	binary.BigEndian.PutUint64(k[48:56], uint64(c.Location))
	return k[:]
}

// candidates is round one: the links to target in every run, folded
// (identical links keep their newest rev), filtered, in ascending source
// order. With a window it reads only the frames after the cursor that a
// page needs; horizon, when not nil, is the furthest position (in the
// window's direction) up to which every run was read: candidates beyond
// it are dropped, and the caller continues from it. The links returned
// live in s until its next use.
func (r *Reader) candidates(ctx context.Context, v *View, target link.RecordID, f *Filter, w window, s *queryScratch, st *Stats) ([]link.Backlink, *Cursor, error) {
	prefix := target.Bytes()
	s.groups, s.cut, s.runOf = s.groups[:0], s.cut[:0], s.runOf[:0]
	var keyBuf [56]byte
	var key []byte
	if w.after != nil {
		key = cursorKey(&keyBuf, target, w.after)
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
		s.groups = addGroup(s.groups, t, lo, hi)
		s.cut = append(s.cut, (!w.reverse && hi < last) || (w.reverse && lo > first))
		s.runOf = append(s.runOf, ri)
	}
	groups := s.groups
	err := r.fetchAll(ctx, groups)
	// Groups come in run order.
	perRun := 0
	for i := range groups {
		if i == 0 || s.runOf[i] != s.runOf[i-1] {
			perRun = 0
		}
		perRun += groups[i].gets
		st.Round1GETs += groups[i].gets
		st.Round1MaxPerRun = max(st.Round1MaxPerRun, perRun)
	}
	if err != nil {
		return nil, nil, err
	}
	// The horizon: for each run read only in part, the last position it
	// holds of the target in what was read.
	var horizon *Cursor
	for gi := range groups {
		if !s.cut[gi] {
			continue
		}
		g := &groups[gi]
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
	// The target's records in each frame, then the result sized once.
	n := 0
	s.spans = s.spans[:0]
	for gi := range groups {
		for _, recs := range groups[gi].frames {
			lo, hi := prefixRange(recs, link.BacklinkSize, prefix[:])
			s.spans = append(s.spans, lo, hi)
			n += (hi - lo) / link.BacklinkSize
		}
	}
	if n > CandidatesMax {
		return nil, nil, fmt.Errorf("target %v: more than %d links: %w", target, CandidatesMax, ErrTooBig)
	}
	out := s.out[:0]
	if cap(out) < n {
		out = make([]link.Backlink, 0, n)
	}
	all, windowed := f.empty(), w.after != nil || horizon != nil
	var keep func(*link.Backlink) bool
	if !all || windowed {
		keep = func(l *link.Backlink) bool { return (all || f.match(l)) && (!windowed || inWindow(l)) }
	}
	// Each group's links are sorted (a table is): one group is copied,
	// several are merged as they are read (one pass, no second buffer).
	s.segs = s.segs[:0]
	k := 0
	for gi := range groups {
		fs := groups[gi].frames
		s.segs = append(s.segs, mergeSeg{frames: fs, spans: s.spans[k : k+2*len(fs)]})
		k += 2 * len(fs)
	}
	out = mergeSegs(out, s.segs, keep)
	clear(s.segs)
	s.out = out
	// Fold identical links (same source and location), keeping the newest.
	k = 0
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

// mergeSeg is one group's links in round one: the target's records of
// each frame (spans holds [lo, hi) byte offsets per frame), read in order;
// head is the next link.
type mergeSeg struct {
	head   link.Backlink
	frames [][]byte
	spans  []int
	fi     int // the frame of the next record
	off    int // its offset
}

// next reads the segment's next link that keep accepts (nil: every link)
// into head, and reports whether there was one.
func (m *mergeSeg) next(keep func(*link.Backlink) bool) bool {
	for m.fi < len(m.frames) {
		recs, hi := m.frames[m.fi], m.spans[2*m.fi+1]
		for m.off < hi {
			m.head = link.GetBacklink(recs[m.off:])
			m.off += link.BacklinkSize
			if keep == nil || keep(&m.head) {
				return true
			}
		}
		m.fi++
		if m.fi < len(m.frames) {
			m.off = m.spans[2*m.fi]
		}
	}
	return false
}

// mergeSegs appends the links of the sorted segments that keep accepts to
// out, in order (linkLess): a single segment is copied; several are merged
// through a binary heap of their indexes, ordered by their heads.
func mergeSegs(out []link.Backlink, segs []mergeSeg, keep func(*link.Backlink) bool) []link.Backlink {
	var hbuf [64]int32
	h := hbuf[:0]
	for i := range segs {
		m := &segs[i]
		if len(m.frames) == 0 {
			continue
		}
		m.fi, m.off = 0, m.spans[0]
		if m.next(keep) {
			h = append(h, int32(i))
		}
	}
	if len(h) == 1 {
		m := &segs[h[0]]
		for {
			out = append(out, m.head)
			if !m.next(keep) {
				return out
			}
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(segs, h, i)
	}
	for len(h) > 0 {
		m := &segs[h[0]]
		out = append(out, m.head)
		if !m.next(keep) {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		siftDown(segs, h, 0)
	}
	return out
}

// siftDown restores the order of the heap h (of indexes into segs, by
// their heads) below i.
func siftDown(segs []mergeSeg, h []int32, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && linkLess(&segs[h[c+1]].head, &segs[h[c]].head) {
			c++
		}
		if !linkLess(&segs[h[c]].head, &segs[h[i]].head) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// linkLess orders two links of one target as their encodings.
func linkLess(a, b *link.Backlink) bool {
	if c := cmpPos(a.Source, a.Location, b.Source, b.Location); c != 0 {
		return c < 0
	}
	return a.SourceRev < b.SourceRev
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

// revHit is a key of round two that a revocation table may hold: frames
// first..last of group (an index into queryScratch.rgroups).
type revHit struct {
	key         int // index into the key sequence
	first, last int
	group       int
}

// didRev is a repository's revocation threshold.
type didRev struct{ did, rev uint64 }

// scanKeysPerFrame: round two scans a revocation table's frames (instead of
// asking its filter about every key) when the cache holds all the frames
// the keys span and there are at least this many keys per frame. A scan
// walks the frames and the sorted keys together, each side skipping ahead
// by galloping, so it costs about the smaller of the two sides; asking the
// filter costs a hash and three random reads per key and table, which for
// a popular target (100,000 keys) over a node's dozen or more revocation
// runs was most of a count.
const scanKeysPerFrame = 8

// live is round two: for each link, whether it survives the revocations of
// its source record and repository. Keys are kept in sorted slices (no
// maps): repository keys {0,0,did} sort before every record key, so the
// keys are visited in byte order and each table's frame ranges come out
// ascending, ready to merge into one GET per run of adjacent frames.
//
// A revocation table whose frames over the keys' range are all in the
// cache, and few against the keys, is scanned instead (see
// scanKeysPerFrame): a warm count of a popular target then costs about
// the keys plus the revocations it meets, not the keys times the runs.
// Tables the cache lacks are asked through their filters, as a cold query
// must (it fetches only the frames a key may be in). The answer lives in s
// until its next use.
func (r *Reader) live(ctx context.Context, v *View, links []link.Backlink, s *queryScratch, st *Stats) ([]bool, error) {
	st.Round2Passes++
	out := reuseSlice(s.live, len(links))
	s.live = out
	if len(links) == 0 {
		return out, nil
	}
	srcKeys := reuseSlice(s.srcKeys, len(links))
	minDID, maxDID := links[0].Source.DID, links[0].Source.DID
	for i := range links {
		srcKeys[i] = links[i].Source
		minDID, maxDID = min(minDID, links[i].Source.DID), max(maxDID, links[i].Source.DID)
	}
	// Candidates come in source order, or reversed for a reverse page.
	asc := slices.IsSortedFunc(srcKeys, link.RecordID.Compare)
	desc := !asc && slices.IsSortedFunc(srcKeys, func(a, b link.RecordID) int { return b.Compare(a) })
	switch {
	case desc:
		slices.Reverse(srcKeys)
	case !asc:
		slices.SortFunc(srcKeys, link.RecordID.Compare)
	}
	srcKeys = slices.Compact(srcKeys)
	srcThr := reuseSlice(s.srcThr, len(srcKeys))
	clear(srcThr)
	s.srcKeys, s.srcThr = srcKeys, srcThr
	s.repoRevs = s.repoRevs[:0]
	p := revProbe{links: links, s: s}

	s.rgroups = s.rgroups[:0]
	s.hits = s.hits[:0]
	for _, vr := range v.trees[TreeRevocations] {
		compacted := vr.run.Kind == RunCompacted
		// Scan what the cache holds; the rest is asked key by key.
		keysPer := len(srcKeys)
		if compacted {
			keysPer >>= vr.shardBits
		}
		s.probeShard = reuseSlice(s.probeShard, len(vr.tables))
		probe := false
		for ti, t := range vr.tables {
			s.probeShard[ti] = false
			if t == nil {
				continue
			}
			switch r.scanRevocations(t, s, minDID, maxDID, keysPer) {
			case scanned:
				st.Round2Scans++
			case notScanned:
				s.probeShard[ti], probe = true, true
			}
		}
		if !probe {
			continue
		}
		p.prepare()
		if compacted {
			if s.byTable == nil {
				s.byTable = make(map[*viewTable]int)
			}
			clear(s.byTable)
		}
		single := -1
		for i := 0; i < p.nKeys; i++ {
			var t *viewTable
			if compacted {
				sh := p.shard(i, vr.shardBits)
				if int(sh) >= len(vr.tables) || !s.probeShard[sh] {
					continue
				}
				t = vr.tables[sh]
			} else {
				t = vr.tables[0]
			}
			if !p.mayContain(t, i) {
				continue
			}
			kb := p.keyAt(i).Bytes()
			first, last, ok := t.meta.FramesFor(kb[:])
			if !ok {
				continue
			}
			gi := single
			if compacted {
				if x, ok := s.byTable[t]; ok {
					gi = x
				} else {
					gi = -1
				}
			}
			if gi < 0 || first > s.rgroups[gi].last+1 {
				s.rgroups = addGroup(s.rgroups, t, first, last)
				gi = len(s.rgroups) - 1
				if compacted {
					s.byTable[t] = gi
				} else {
					single = gi
				}
			} else if last > s.rgroups[gi].last {
				s.rgroups[gi].last = last
			}
			s.hits = append(s.hits, revHit{key: i, first: first, last: last, group: gi})
		}
	}
	if len(s.rgroups) > 0 {
		err := r.fetchAll(ctx, s.rgroups)
		for i := range s.rgroups {
			st.Round2GETs += s.rgroups[i].gets
		}
		if err != nil {
			return nil, err
		}
		for _, h := range s.hits {
			kb := p.keyAt(h.key).Bytes()
			thr := p.thrAt(h.key)
			g := &s.rgroups[h.group]
			for fi := h.first; fi <= h.last; fi++ {
				recs := g.frames[fi-g.first]
				lo, hi := prefixRange(recs, link.RevocationSize, kb[:])
				for off := lo; off < hi; off += link.RevocationSize {
					if rev := binary.BigEndian.Uint64(recs[off+24 : off+32]); rev > *thr {
						*thr = rev
					}
				}
			}
		}
		for i, thr := range s.repoThr {
			if thr > 0 {
				s.repoRevs = append(s.repoRevs, didRev{s.dids[i], thr})
			}
		}
	}
	// The repositories' thresholds, by DID (most often none).
	repo := s.repoRevs
	if len(repo) > 1 {
		slices.SortFunc(repo, func(a, b didRev) int {
			if a.did != b.did {
				return cmp.Compare(a.did, b.did)
			}
			return cmp.Compare(b.rev, a.rev)
		})
		repo = slices.CompactFunc(repo, func(a, b didRev) bool { return a.did == b.did }) // keeps the highest
		s.repoRevs = repo
	}
	si := 0 // sorted candidates find their source key by walking
	if desc {
		si = len(srcKeys) - 1
	}
	for i := range links {
		l := &links[i]
		switch {
		case asc:
			for srcKeys[si] != l.Source {
				si++
			}
		case desc:
			for srcKeys[si] != l.Source {
				si--
			}
		default:
			si, _ = slices.BinarySearchFunc(srcKeys, l.Source, link.RecordID.Compare)
		}
		var repoThr uint64
		if len(repo) > 0 {
			if j, ok := slices.BinarySearchFunc(repo, l.Source.DID, func(e didRev, d uint64) int { return cmp.Compare(e.did, d) }); ok {
				repoThr = repo[j].rev
			}
		}
		out[i] = link.Live(l.SourceRev, srcThr[si], repoThr)
		if !out[i] {
			st.Revoked++
		}
	}
	return out, nil
}

// revProbe is the key sequence round two asks filters about: the
// repositories of the links (sorted DIDs), then their source records
// (s.srcKeys), with each key's hashes computed once for every table.
// Built only when some table is not scanned.
type revProbe struct {
	links   []link.Backlink
	s       *queryScratch
	ready   bool
	nKeys   int
	fseed   uint64 // the seed of s.fhash (0 before computed)
	hashed  bool
	sharded bool
}

// prepare builds the DIDs and thresholds of the repository keys.
func (p *revProbe) prepare() {
	if p.ready {
		return
	}
	p.ready = true
	s := p.s
	dids := reuseSlice(s.dids, len(p.links))
	for i := range p.links {
		dids[i] = p.links[i].Source.DID
	}
	slices.Sort(dids)
	dids = slices.Compact(dids)
	s.dids = dids
	s.repoThr = reuseSlice(s.repoThr, len(dids))
	clear(s.repoThr)
	p.nKeys = len(dids) + len(s.srcKeys)
}

func (p *revProbe) keyAt(i int) link.RecordID {
	if i < len(p.s.dids) {
		return link.RepoID(p.s.dids[i])
	}
	return p.s.srcKeys[i-len(p.s.dids)]
}

func (p *revProbe) thrAt(i int) *uint64 {
	if i < len(p.s.dids) {
		return &p.s.repoThr[i]
	}
	return &p.s.srcThr[i-len(p.s.dids)]
}

// mayContain asks t's filter about key i, hashing each key once for every
// table that shares a filter seed.
func (p *revProbe) mayContain(t *viewTable, i int) bool {
	m := t.meta
	if m.filter == nil || m.Format.PrefixLen != link.RecordIDSize {
		kb := p.keyAt(i).Bytes()
		return m.MayContain(kb[:])
	}
	if !p.hashed || m.filter.seed != p.fseed {
		if p.hashed {
			// Another seed than the cached hashes' (tables written with
			// other options): hash this key alone.
			kb := p.keyAt(i).Bytes()
			return m.filter.containsKey(filterKey(kb[:], m.filter.seed))
		}
		p.hashed, p.fseed = true, m.filter.seed
		p.s.fhash = reuseSlice(p.s.fhash, p.nKeys)
		for k := range p.nKeys {
			kb := p.keyAt(k).Bytes()
			p.s.fhash[k] = filterKey(kb[:], p.fseed)
		}
	}
	return m.filter.containsKey(p.s.fhash[i])
}

// shard is ShardOf(key i, bits), the key hashed once for every run.
func (p *revProbe) shard(i int, bits uint8) uint32 {
	if bits == 0 {
		return 0
	}
	if !p.sharded {
		p.sharded = true
		p.s.shash = reuseSlice(p.s.shash, p.nKeys)
		for k := range p.nKeys {
			kb := p.keyAt(k).Bytes()
			p.s.shash[k] = xxh3.HashSeed(kb[:], shardHashSeed)
		}
	}
	return shardOfHash(p.s.shash[i], bits)
}

// shardOfHash is ShardOf given the prefix's xxh3 hash with shardHashSeed.
func shardOfHash(h uint64, bits uint8) uint32 {
	if bits == 0 {
		return 0
	}
	bits = min(bits, 32)
	return uint32(h >> (64 - bits))
}

// scanResult says what scanRevocations did with a table.
type scanResult uint8

const (
	notScanned scanResult = iota // round two asks the table's filter
	scanned
	outOfRange // no key is in the table's range: nothing to read
)

// scanRevocations folds the revocations of t that the links' keys meet
// into the thresholds (s.srcThr, s.repoRevs) by walking t's frames over
// the keys' range and the sorted source keys together, when the cache
// holds all those frames and they are few against keys (the keys of t's
// shard).
func (r *Reader) scanRevocations(t *viewTable, s *queryScratch, minDID, maxDID uint64, keys int) scanResult {
	m := t.meta
	srcKeys, srcThr := s.srcKeys, s.srcThr
	rlo, rhi := link.RepoID(minDID).Bytes(), link.RepoID(maxDID).Bytes()
	klo, khi := srcKeys[0].Bytes(), srcKeys[len(srcKeys)-1].Bytes()
	a1, b1, ok1 := m.FramesForRange(rlo[:], rhi[:])
	a2, b2, ok2 := m.FramesForRange(klo[:], khi[:])
	switch {
	case !ok1 && !ok2:
		return outOfRange
	case !ok1:
		a1, b1 = a2, b2
		ok2 = false
	case ok2 && a2 <= b1+1:
		b1 = max(b1, b2)
		ok2 = false
	}
	frames := b1 - a1 + 1
	if ok2 {
		frames += b2 - a2 + 1
	}
	if frames*scanKeysPerFrame > keys {
		return notScanned
	}
	var ok bool
	fs := s.scanFrames[:0]
	if fs, ok = r.cache.cachedRange(t.ref.ID, a1, b1, fs); ok && ok2 {
		fs, ok = r.cache.cachedRange(t.ref.ID, a2, b2, fs)
	}
	s.scanFrames = fs
	defer clear(fs)
	if !ok {
		return notScanned
	}
	const w = link.RevocationSize
	j := 0 // the first source key not below the records walked
	for _, recs := range fs {
		n := len(recs) / w
		for i := 0; i < n && j < len(srcKeys); {
			rk := link.GetRecordID(recs[i*w:])
			if rk.IsRepo() {
				if rk.DID >= minDID && rk.DID <= maxDID {
					s.repoRevs = append(s.repoRevs, didRev{rk.DID, binary.BigEndian.Uint64(recs[i*w+24:])})
				}
				i++
				continue
			}
			switch c := rk.Compare(srcKeys[j]); {
			case c == 0:
				srcThr[j] = max(srcThr[j], binary.BigEndian.Uint64(recs[i*w+24:]))
				i++
			case c < 0:
				i = gallopRecs(recs, w, i, n, srcKeys[j])
			default:
				j = gallopKeys(srcKeys, j, rk)
			}
		}
	}
	return scanned
}

// gallopRecs returns the index of the first record after i (whose key is
// below k) of the n records of width w in recs whose key is not below k,
// or n: an exponential search, then a binary one.
func gallopRecs(recs []byte, w, i, n int, k link.RecordID) int {
	below := func(x int) bool { return link.GetRecordID(recs[x*w:]).Compare(k) < 0 }
	lo, step := i, 1 // recs[lo] is below k
	hi := lo + step
	for hi < n && below(hi) {
		lo, step = hi, step*2
		hi = lo + step
	}
	hi = min(hi, n)
	return lo + 1 + searchRecs(hi-lo-1, func(x int) bool { return !below(lo + 1 + x) })
}

// gallopKeys returns the index of the first key after j (which is below
// k) not below k, or len(keys).
func gallopKeys(keys []link.RecordID, j int, k link.RecordID) int {
	lo, step := j, 1
	hi := lo + step
	for hi < len(keys) && keys[hi].Compare(k) < 0 {
		lo, step = hi, step*2
		hi = lo + step
	}
	hi = min(hi, len(keys))
	return lo + 1 + searchRecs(hi-lo-1, func(x int) bool { return keys[lo+1+x].Compare(k) >= 0 })
}

// cachedRange appends frames first..last of a table to dst when the cache
// holds every one of them (counting them as hits and as just used), and
// reports whether it did; it counts no miss: asking only chooses how round
// two reads a table, and a table it then asks through its filter fetches
// what it needs the usual way.
func (c *FrameCache) cachedRange(table string, first, last int, dst [][]byte) ([][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(dst)
	for i := first; i <= last; i++ {
		el, ok := c.mu.items[frameKey{table, i}]
		if !ok {
			clear(dst[n:])
			return dst[:n], false
		}
		dst = append(dst, el.Value.(*cacheEntry).recs)
	}
	for i := first; i <= last; i++ {
		c.mu.ll.MoveToFront(c.mu.items[frameKey{table, i}])
	}
	c.hits.Add(uint64(last - first + 1))
	return dst, true
}
