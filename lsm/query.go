package lsm

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

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
)

// ErrTooBig: a query would consider more than CandidatesMax links.
var ErrTooBig = errors.New("query too big")

// Reader answers queries from views; it fetches frames from the object
// store into a shared cache. Safe for concurrent use.
type Reader struct {
	store objstore.Store
	cache *FrameCache
	sem   chan struct{}
	// large bounds the memory of reads of large targets (large_read.go);
	// nil: unbounded.
	large    *semaphore.Weighted
	largeCap int64
	// What large reads hold of it, and how many wait (LargeReadStats).
	largeHeld, largeWaiting atomic.Int64
	// PageScanMax bounds the links in the frames one page reads
	// (Backlinks); 0 is DefaultPageScanMax.
	PageScanMax int
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
	Limit   int // 0 = LimitMax; at most LimitMax+1 (a page and the link a caller reads again)
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
	Scanned          int // the target's links round one considered in its windows: a window merged whole counts all it held, one a page stopped merging what it merged
	Revoked          int
	CountWindows     int // Count: the windows the target was read in
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
//
// A page whose filter passes few links, or whose links are mostly revoked,
// reads on in windows of at most pageWindowMax links a run, and at most
// r.PageScanMax in all: then it ends short (even empty), its Next at what
// it read, so that one page never reads a popular target whole.
func (r *Reader) Backlinks(ctx context.Context, v *View, q Query) (*Result, error) {
	limit := q.Limit
	if limit <= 0 || limit > LimitMax+1 {
		limit = LimitMax
	}
	s := getQueryScratch()
	defer putQueryScratch(s)
	res := &Result{Generation: v.Generation()}
	after := q.After
	batch := limit + limit/2 + 16
	scanMax := r.PageScanLimit()
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
		if res.Stats.Scanned >= scanMax {
			res.Next = horizon // a short page: the next goes on from there
			break
		}
		batch = min(batch*4, max(pageWindowMax, batch))
	}
	return res, nil
}

// PageScanLimit is the links one page reads at most: PageScanMax, or
// DefaultPageScanMax.
func (r *Reader) PageScanLimit() int {
	if r.PageScanMax > 0 {
		return r.PageScanMax
	}
	return DefaultPageScanMax
}

// pageWindowMax bounds the links one window of a page asks of each run
// (a variable for the tests).
var pageWindowMax = 8192

// DefaultPageScanMax is the links in the frames one page reads at most
// (Reader.PageScanMax): ~64 MB of records, a popular target's whole in a
// few windows of at most ~0.5-1 MB a run.
const DefaultPageScanMax = 1 << 20

// MayHold reports whether any run of v may hold links to target: the
// filters and fences of the tables round one would read, no I/O but
// loading a table's metadata from local disk. False means a query of
// target would find nothing; a query layer reading a target under
// several keys skips those for which it is false.
func (r *Reader) MayHold(ctx context.Context, v *View, target link.RecordID) (bool, error) {
	prefix := target.Bytes()
	for _, vr := range v.trees[TreeLinks] {
		t := vr.tableFor(prefix[:])
		if t == nil {
			continue
		}
		m, err := t.load(ctx)
		if err != nil {
			return false, err
		}
		if !m.MayContain(prefix[:]) {
			continue
		}
		if _, _, ok := m.FramesFor(prefix[:]); ok {
			return true, nil
		}
	}
	return false, nil
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

// Count returns the number of live links to target that pass filter. A
// popular target is counted window by window, in source order (about
// countWindowLinks links at a time, shared among the runs by what each
// has left of the target, so that they end near one another; the runs
// read up to a common horizon as for a page), so a count holds a window's links, not the
// target's: a count of a ten-million-link target needs ~150 MB, not ~1.5 GB.
func (r *Reader) Count(ctx context.Context, v *View, target link.RecordID, filter Filter) (uint64, Stats, error) {
	var n uint64
	st, err := r.windows(ctx, v, target, filter, func(_ []link.Backlink, live []bool) error {
		for _, ok := range live {
			if ok {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, st, err
	}
	return n, st, nil
}

// Each calls fn with the live links to target that pass filter, in source
// order, a window at a time (as Count reads them: about countWindowLinks
// links), so an answer that folds every link of a popular target (its
// distinct accounts, its links per collection and path) holds a window
// of them, not all. links is valid during the call only; fn is never
// called with none, nor concurrently with itself. Its first error stops
// the reading and is returned; so does ErrTooBig past CandidatesMax
// links considered, as for All.
func (r *Reader) Each(ctx context.Context, v *View, target link.RecordID, filter Filter, fn func(links []link.Backlink) error) (Stats, error) {
	read := 0
	return r.windows(ctx, v, target, filter, func(cands []link.Backlink, live []bool) error {
		// As All, at most CandidatesMax links considered.
		if read += len(cands); read > CandidatesMax {
			return fmt.Errorf("target %v: more than %d links: %w", target, CandidatesMax, ErrTooBig)
		}
		// The live ones moved to the front, in place: the window's
		// candidates are its scratch's, read again by no one.
		n := 0
		for i, ok := range live {
			if ok {
				cands[n] = cands[i]
				n++
			}
		}
		if n == 0 {
			return nil
		}
		return fn(cands[:n])
	})
}

// windows reads the links to target that pass filter window by window
// (Count) and calls fn with each window's candidates and their liveness,
// in order, one window at a time.
func (r *Reader) windows(ctx context.Context, v *View, target link.RecordID, filter Filter, fn func(cands []link.Backlink, live []bool) error) (Stats, error) {
	var st Stats
	// Two scratches, alternating: window k's liveness (round two, on its
	// scratch and candidates) runs while window k+1 is read and merged
	// (round one, on the other), so a count of many windows keeps two
	// cores busy. A target of one window uses one.
	var sc [2]*queryScratch
	sc[0] = getBigQueryScratch()
	defer func() {
		for _, s := range sc {
			if s != nil {
				putQueryScratch(s)
			}
		}
	}()
	lr := &largeRead{}
	defer r.releaseLarge(lr)
	// Cancelled when a window's check or callback fails, so that the
	// next window's reads, going on meanwhile, stop too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := window{want: countWindowLinks, spread: true, large: lr}
	cands, horizon, err := r.candidates(ctx, v, target, &filter, w, sc[0], &st)
	if err != nil {
		return st, err
	}
	for k := 0; ; k++ {
		st.CountWindows++
		cur := sc[k%2]
		type liveResult struct {
			st  Stats
			err error
		}
		done := make(chan liveResult, 1)
		windowLive := func() {
			var res liveResult
			defer func() {
				// On its own goroutine (every window but the last), a
				// panic of the check or of fn (the caller's) would end
				// the process: it is this read's error instead.
				if p := recover(); p != nil {
					res.err = fmt.Errorf("lsm: a read of %v panicked in window %d: %v\n%s", target, k, p, debug.Stack())
				}
				if res.err != nil {
					cancel()
				}
				done <- res
			}()
			if len(cands) > 0 {
				var live []bool
				live, res.err = r.live(ctx, v, cands, cur, &res.st)
				if res.err == nil {
					res.err = fn(cands, live)
				}
			}
		}
		var next []link.Backlink
		var nextHorizon *Cursor
		var nextErr error
		if horizon == nil {
			windowLive()
		} else {
			go windowLive()
			if err := ctx.Err(); err != nil {
				nextErr = err
			} else {
				if sc[(k+1)%2] == nil {
					sc[(k+1)%2] = getQueryScratch()
				}
				after := *horizon
				w.after = &after
				next, nextHorizon, nextErr = r.nextWindow(ctx, v, target, &filter, w, sc[(k+1)%2], &st, k+1)
				if nextErr != nil {
					cancel() // window k's check stops too
				}
			}
		}
		res := <-done
		addStats(&st, &res.st)
		if nextErr != nil && (res.err == nil || errors.Is(res.err, context.Canceled)) {
			// The next window failed (and cancelled this one's check,
			// which then failed for that alone): its error is the read's.
			return st, nextErr
		}
		if res.err != nil {
			return st, res.err
		}
		if horizon == nil {
			return st, nil
		}
		cands, horizon = next, nextHorizon
	}
}

// nextWindow reads window k's candidates while the previous window's
// check runs on its goroutine with the other scratch: a panic here is the
// read's error, so that windows waits for that goroutine before its
// scratches go back to the pool (where another query would take one still
// in use).
func (r *Reader) nextWindow(ctx context.Context, v *View, target link.RecordID, f *Filter, w window, s *queryScratch, st *Stats, k int) (cands []link.Backlink, horizon *Cursor, err error) {
	defer func() {
		if p := recover(); p != nil {
			cands, horizon = nil, nil
			err = fmt.Errorf("lsm: a read of %v panicked reading window %d: %v\n%s", target, k, p, debug.Stack())
		}
	}()
	if nextWindowHook != nil {
		nextWindowHook(ctx, k)
	}
	return r.candidates(ctx, v, target, f, w, s, st)
}

// nextWindowHook, when set (by tests), is called before window k > 0 of a
// windowed read is read, with the context it is read in.
var nextWindowHook func(ctx context.Context, k int)

// countWindowLinks is about how many links one window of a count reads
// (a variable for the tests).
var countWindowLinks = 1 << 20

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
	segs2  []mergeSeg // the upper half of a count's window (mergeHalves)
	spans2 []int
	out    []link.Backlink
	plan   []planEntry

	// Round two.
	srcKeys         []link.RecordID
	dids            []uint64
	repoThr, srcThr []uint64
	repoRevs        []didRev
	fhash, shash    []uint64     // filter and shard hashes of the keys
	probeShard      []probeKinds // the keys each table of a run is asked about through its filter
	tableMetas      []*TableMeta // the metas of a run's tables (planRevocationRun)
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
	clear(s.plan[:cap(s.plan)]) // its tables and metas (an error may leave them planned)
	clear(s.tableMetas[:cap(s.tableMetas)])
	s.plan, s.tableMetas = s.plan[:0], s.tableMetas[:0]
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
		s.out, s.spans, s.spans2 = nil, nil, nil
		s.srcKeys, s.dids, s.repoThr, s.srcThr, s.hits, s.live = nil, nil, nil, nil, nil, nil
		s.repoRevs, s.fhash, s.shash = nil, nil, nil
	}
	queryScratchPool.Put(s)
}

func clearGroups(gs []fetchGroup) {
	gs = gs[:cap(gs)]
	for i := range gs {
		clear(gs[i].frames[:cap(gs[i].frames)])
		gs[i].t, gs[i].meta, gs[i].err = nil, nil, nil
		gs[i].own = nil // a count's window of decoded frames: tens of MiB
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
