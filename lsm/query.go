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
	s := getQueryScratch()
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
	s := getQueryScratch()
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
	segs   []int  // the end in out of each group's candidates
	out    []link.Backlink
	tmp    []link.Backlink // merge buffer

	// Round two.
	srcKeys         []link.RecordID
	dids            []uint64
	repoThr, srcThr []uint64
	rgroups         []fetchGroup
	hits            []revHit
	live            []bool
	byTable         map[*viewTable]int // compacted run: each table's open group
}

// queryScratchLinksMax: buffers of more links than this (4 MiB of candidates,
// a count of a popular target) are dropped rather than kept for reuse.
const queryScratchLinksMax = 1 << 16

var queryScratchPool = sync.Pool{New: func() any { return new(queryScratch) }}

func getQueryScratch() *queryScratch { return queryScratchPool.Get().(*queryScratch) }

func putQueryScratch(s *queryScratch) {
	// Keep no frame (the cache may have evicted it) and no table alive.
	clearGroups(s.groups)
	clearGroups(s.rgroups)
	s.groups, s.rgroups = s.groups[:0], s.rgroups[:0]
	clear(s.byTable)
	if cap(s.out) > queryScratchLinksMax || cap(s.tmp) > queryScratchLinksMax {
		s.out, s.tmp, s.spans = nil, nil, nil
	}
	if cap(s.srcKeys) > queryScratchLinksMax || cap(s.dids) > queryScratchLinksMax || cap(s.live) > queryScratchLinksMax || cap(s.hits) > queryScratchLinksMax {
		s.srcKeys, s.dids, s.repoThr, s.srcThr, s.hits, s.live = nil, nil, nil, nil, nil, nil
	}
	if len(s.byTable) > 1024 {
		s.byTable = nil
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
	s.segs = s.segs[:0]
	all, windowed := f.empty(), w.after != nil || horizon != nil
	k := 0
	for gi := range groups {
		for _, recs := range groups[gi].frames {
			lo, hi := s.spans[k], s.spans[k+1]
			k += 2
			if all && !windowed {
				for off := lo; off < hi; off += link.BacklinkSize {
					out = append(out, link.GetBacklink(recs[off:]))
				}
				continue
			}
			for off := lo; off < hi; off += link.BacklinkSize {
				l := link.GetBacklink(recs[off:])
				if (all || f.match(&l)) && (!windowed || inWindow(&l)) {
					out = append(out, l)
				}
			}
		}
		s.segs = append(s.segs, len(out))
	}
	s.out = out
	// Each group's links are sorted (a table is): runs are merged, or,
	// past mergeLinksMax, sorted in place to bound the memory.
	if len(groups) > 1 {
		if len(out) <= mergeLinksMax {
			out = s.merge(out)
		} else {
			slices.SortFunc(out, func(a, b link.Backlink) int { return a.Compare(&b) })
		}
	}
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

// mergeLinksMax bounds the candidates merged through a second buffer
// (64 MiB, a count of a target with a million links).
const mergeLinksMax = 1 << 20

// merge sorts out, made of sorted segments ending at s.segs, by merging
// them pairwise; the result is in s.out (s.tmp holds the other buffer).
func (s *queryScratch) merge(out []link.Backlink) []link.Backlink {
	// Drop empty segments.
	ends := s.segs[:0]
	prev := 0
	for _, e := range s.segs {
		if e > prev {
			ends = append(ends, e)
		}
		prev = e
	}
	if len(ends) <= 1 {
		return out
	}
	src, dst := out, reuseSlice(s.tmp, len(out))
	for len(ends) > 1 {
		next := ends[:0]
		start := 0
		for i := 0; i < len(ends); i += 2 {
			if i+1 == len(ends) {
				end := ends[i]
				copy(dst[start:end], src[start:end])
				next = append(next, end)
				break
			}
			mid, end := ends[i], ends[i+1]
			mergeLinks(dst[start:end], src[start:mid], src[mid:end])
			next = append(next, end)
			start = end
		}
		ends = next
		src, dst = dst, src
	}
	s.out, s.tmp = src, dst
	return src
}

// mergeLinks merges the sorted links of a and b (one target) into dst.
func mergeLinks(dst, a, b []link.Backlink) {
	i, j, k := 0, 0, 0
	for i < len(a) && j < len(b) {
		if linkLess(&b[j], &a[i]) {
			dst[k] = b[j]
			j++
		} else {
			dst[k] = a[i]
			i++
		}
		k++
	}
	k += copy(dst[k:], a[i:])
	copy(dst[k:], b[j:])
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

// live is round two: for each link, whether it survives the revocations of
// its source record and repository. Keys are kept in sorted slices (no
// maps): repository keys {0,0,did} sort before every record key, so the
// keys are visited in byte order and each table's frame ranges come out
// ascending, ready to merge into one GET per run of adjacent frames. The
// answer lives in s until its next use.
func (r *Reader) live(ctx context.Context, v *View, links []link.Backlink, s *queryScratch, st *Stats) ([]bool, error) {
	st.Round2Passes++
	srcKeys := reuseSlice(s.srcKeys, len(links))
	dids := reuseSlice(s.dids, len(links))
	for i := range links {
		srcKeys[i] = links[i].Source
		dids[i] = links[i].Source.DID
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
	slices.Sort(dids)
	dids = slices.Compact(dids)
	repoThr := reuseSlice(s.repoThr, len(dids))
	srcThr := reuseSlice(s.srcThr, len(srcKeys))
	clear(repoThr)
	clear(srcThr)
	s.srcKeys, s.dids, s.repoThr, s.srcThr = srcKeys, dids, repoThr, srcThr
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

	s.rgroups = s.rgroups[:0]
	hits := s.hits[:0]
	for _, vr := range v.trees[TreeRevocations] {
		compacted := vr.run.Kind == RunCompacted
		if compacted {
			if s.byTable == nil {
				s.byTable = make(map[*viewTable]int)
			}
			clear(s.byTable)
		}
		single := -1
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
			hits = append(hits, revHit{key: i, first: first, last: last, group: gi})
		}
	}
	s.hits = hits
	err := r.fetchAll(ctx, s.rgroups)
	for i := range s.rgroups {
		st.Round2GETs += s.rgroups[i].gets
	}
	if err != nil {
		return nil, err
	}
	for _, h := range hits {
		kb := keyAt(h.key).Bytes()
		thr := thrAt(h.key)
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
	out := reuseSlice(s.live, len(links))
	s.live = out
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
		di, _ := slices.BinarySearch(dids, l.Source.DID)
		out[i] = link.Live(l.SourceRev, srcThr[si], repoThr[di])
		if !out[i] {
			st.Revoked++
		}
	}
	return out, nil
}
