package query

import (
	"context"
	"encoding/binary"
	"net/http"
	"slices"
	"sync"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// The Constellation-compatible API (same parameter names and response
// shapes as constellation.microcosm.blue), so existing clients switch by
// changing a host name. Paths are in Constellation's convention
// (".subject.uri"); a `source` is "collection:path", the path with or
// without its leading dot.

type constellationRecord struct {
	DID        string `json:"did"`
	Collection string `json:"collection"`
	RKey       string `json:"rkey"`
	// Subject and Source say which subject and source the link matched,
	// when the query asked about more than one (Eddy's extension).
	Subject string `json:"subject,omitempty"`
	Source  string `json:"source,omitempty"`
}

type getBacklinksOut struct {
	Total   uint64                `json:"total"`
	Records []constellationRecord `json:"records"`
	Cursor  *string               `json:"cursor"`
}

func (s *Server) record(id link.RecordID) (constellationRecord, error) {
	did, err := s.Codec.RenderDID(id.DID)
	if err != nil {
		return constellationRecord{}, err
	}
	coll, err := s.Codec.RenderCollection(id.Collection)
	if err != nil {
		return constellationRecord{}, err
	}
	rkey, err := s.Codec.RenderRKey(id.RKey)
	if err != nil {
		return constellationRecord{}, err
	}
	return constellationRecord{DID: did, Collection: coll, RKey: rkey}, nil
}

// pageLinks returns a page of the links lq asks about, after a position,
// newest first (desc) or oldest first: one page of each subject, merged
// in (source, location, target) order. next is the position to continue
// from, nil on the last page.
func (s *Server) pageLinks(ctx context.Context, v *lsm.View, lq *linkQuery, after *linkPos, desc bool, limit int) ([]link.Backlink, *linkPos, error) {
	known, err := s.held(ctx, v, lq.known)
	if err != nil {
		return nil, nil, err
	}
	if len(known) == 0 {
		return nil, nil, nil
	}
	qs := make([]lsm.Query, len(known))
	for i, sub := range known {
		qs[i] = lsm.Query{Target: sub.id, After: resumeAfter(after, sub.id, desc), Reverse: desc, Limit: limit, Filter: lq.filter}
	}
	results, err := s.backlinksAll(ctx, v, qs)
	if err != nil {
		return nil, nil, err
	}
	var all []link.Backlink
	more := false
	for _, res := range results {
		all = append(all, res.Links...)
		more = more || res.Next != nil
	}
	if len(known) > 1 {
		slices.SortFunc(all, func(a, b link.Backlink) int {
			c := posOf(&a).compare(posOf(&b))
			if desc {
				return -c
			}
			return c
		})
	}
	if len(all) > limit {
		all, more = all[:limit], true
	}
	if !more || len(all) == 0 {
		return all, nil, nil
	}
	p := posOf(&all[len(all)-1])
	return all, &p, nil
}

// records renders links as Constellation's records, saying which subject
// and source each matched when the query asked about several.
func (s *Server) records(lq *linkQuery, links []link.Backlink) ([]constellationRecord, error) {
	out := make([]constellationRecord, 0, len(links))
	for i := range links {
		rec, err := s.record(links[i].Source)
		if err != nil {
			return nil, err
		}
		if lq.multi {
			rec.Subject, rec.Source = lq.subjectOf(&links[i]), lq.sourceOf(&links[i])
		}
		out = append(out, rec)
	}
	return out, nil
}

// getBacklinks: GET /xrpc/blue.microcosm.links.getBacklinks?subject=&source=&did=&limit=&cursor=&reverse=
// subject, source and did repeat. Newest first (reverse=true: oldest).
func (s *Server) getBacklinks(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	lq, err := s.parseLinkQuery(q)
	if err != nil {
		return nil, err
	}
	recs, total, next, err := s.linksPage(ctx, r, v, lq, "getBacklinks")
	if err != nil {
		return nil, err
	}
	return getBacklinksOut{Total: total, Records: recs, Cursor: next}, nil
}

// linksPage answers getBacklinks and /links: the total, a page of records
// and the next cursor.
func (s *Server) linksPage(ctx context.Context, r *http.Request, v *lsm.View, lq *linkQuery, endpoint string) ([]constellationRecord, uint64, *string, error) {
	q := r.URL.Query()
	limit, err := parseLimit(q)
	if err != nil {
		return nil, 0, nil, err
	}
	reverse, err := parseReverse(q)
	if err != nil {
		return nil, 0, nil, err
	}
	desc := !reverse
	if !lq.matchable {
		return []constellationRecord{}, 0, nil, noCursorHere(q)
	}
	sc := lq.scope(endpoint, q)
	after, aerr := decodePosCursor(q.Get("cursor"), kindLinks, desc, sc)
	if aerr != nil {
		return nil, 0, nil, aerr
	}
	known, err := s.held(ctx, v, lq.known)
	if err != nil {
		return nil, 0, nil, err
	}
	var total uint64
	for _, sub := range known {
		n, err := s.total(ctx, v, sub.id, lq.filter)
		if err != nil {
			return nil, 0, nil, err
		}
		total += n
	}
	links, next, err := s.pageLinks(ctx, v, lq, after, desc, limit)
	if err != nil {
		return nil, 0, nil, err
	}
	recs, err := s.records(lq, links)
	if err != nil {
		return nil, 0, nil, err
	}
	return recs, total, encodePosCursor(kindLinks, next, desc, sc), nil
}

// Totals of getBacklinks: every page carries the count of the target's
// links that pass its filter, which for a popular target costs far more
// than the page (a count of 100,000 links reads them all, and their
// revocations). A view never changes, so a count is kept per view, target
// and filter, and the pages that follow in the same generation reuse it.
const (
	// countCacheMin: counts of fewer candidates are not kept (cheaper to
	// count again than to churn the cache).
	countCacheMin = 4096
	// countCacheEntriesMax bounds the counts kept for one view.
	countCacheEntriesMax = 1024
)

// countCache holds counts of one view: the newest it was given.
type countCache struct {
	mu     sync.Mutex
	view   *lsm.View
	counts map[countKey]uint64
}

type countKey struct {
	target link.RecordID
	filter string // the filter's lists, encoded
}

func makeCountKey(target link.RecordID, f *lsm.Filter) countKey {
	pairs := make([]uint64, 0, 2*len(f.Sources))
	for _, p := range f.Sources {
		pairs = append(pairs, p.Collection, p.Path)
	}
	b := make([]byte, 0, 8*(4+len(f.Collections)+len(f.DIDs)+len(f.Paths)+len(pairs)))
	for _, l := range [][]uint64{f.Collections, f.DIDs, f.Paths, pairs} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(l)))
		for _, x := range l {
			b = binary.BigEndian.AppendUint64(b, x)
		}
	}
	return countKey{target: target, filter: string(b)}
}

func (c *countCache) get(v *lsm.View, k countKey) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != v {
		return 0, false
	}
	n, ok := c.counts[k]
	return n, ok
}

// put keeps a count of view v, forgetting those of an older view; a count
// of an older view than the one held is dropped.
func (c *countCache) put(v *lsm.View, k countKey, n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != v {
		if c.view != nil && v.Generation() < c.view.Generation() {
			return
		}
		c.view, c.counts = v, make(map[countKey]uint64)
	}
	if len(c.counts) >= countCacheEntriesMax {
		clear(c.counts)
	}
	c.counts[k] = n
}

// total is getBacklinks' total: the count of the links to tgt that pass f
// in view v, from the cache when a page of the same view asked it before.
func (s *Server) total(ctx context.Context, v *lsm.View, tgt link.RecordID, f lsm.Filter) (uint64, error) {
	k := makeCountKey(tgt, &f)
	if n, ok := s.totals.get(v, k); ok {
		return n, nil
	}
	n, st, err := s.Reader.Count(ctx, v, tgt, f)
	if err != nil {
		return 0, err
	}
	if st.Candidates >= countCacheMin {
		s.totals.put(v, k, n)
	}
	return n, nil
}

// count is the live links lq asks about, over every subject.
func (s *Server) count(ctx context.Context, v *lsm.View, lq *linkQuery) (uint64, error) {
	var n uint64
	if !lq.matchable {
		return 0, nil
	}
	known, err := s.held(ctx, v, lq.known)
	if err != nil {
		return 0, err
	}
	for _, sub := range known {
		c, _, err := s.Reader.Count(ctx, v, sub.id, lq.filter)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

type totalOut struct {
	Total uint64 `json:"total"`
}

// getBacklinksCount: GET /xrpc/blue.microcosm.links.getBacklinksCount?subject=&source=&did=
// subject, source and did repeat.
func (s *Server) getBacklinksCount(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	lq, err := s.parseLinkQuery(r.URL.Query())
	if err != nil {
		return nil, err
	}
	n, err := s.count(ctx, v, lq)
	return totalOut{n}, err
}

type backlinkDidsOut struct {
	Total       int      `json:"total"`
	LinkingDids []string `json:"linking_dids"`
	Cursor      *string  `json:"cursor"`
}

// distinctDIDs is the sorted did fields of the accounts with a live link
// lq asks about.
func (s *Server) distinctDIDs(ctx context.Context, v *lsm.View, lq *linkQuery) ([]uint64, error) {
	if !lq.matchable {
		return nil, nil
	}
	known, err := s.held(ctx, v, lq.known)
	if err != nil {
		return nil, err
	}
	var dids []uint64
	for _, sub := range known {
		links, _, err := s.Reader.All(ctx, v, sub.id, lq.filter)
		if err != nil {
			return nil, err
		}
		for i := range links {
			dids = append(dids, links[i].Source.DID)
		}
	}
	slices.Sort(dids)
	return slices.Compact(dids), nil
}

// backlinksConcurrency bounds the pages of one answer read at once.
const backlinksConcurrency = 8

// backlinksAll reads the pages qs ask, at once (up to
// backlinksConcurrency): a subject read under two keys, or several
// subjects, still costs the round trips of one page.
func (s *Server) backlinksAll(ctx context.Context, v *lsm.View, qs []lsm.Query) ([]*lsm.Result, error) {
	out := make([]*lsm.Result, len(qs))
	if len(qs) == 1 {
		res, err := s.Reader.Backlinks(ctx, v, qs[0])
		out[0] = res
		return out, err
	}
	errs := make([]error, len(qs))
	sem := make(chan struct{}, backlinksConcurrency)
	var wg sync.WaitGroup
	for i := range qs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i], errs[i] = s.Reader.Backlinks(ctx, v, qs[i])
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// allOf is every live link to sub passing f, under each of its keys, in
// (source, location) order.
func (s *Server) allOf(ctx context.Context, v *lsm.View, sub *subject, f lsm.Filter) ([]link.Backlink, error) {
	sub, err := s.heldKeys(ctx, v, sub)
	if err != nil {
		return nil, err
	}
	var all []link.Backlink
	for _, k := range sub.keys {
		links, _, err := s.Reader.All(ctx, v, k, f)
		if err != nil {
			return nil, err
		}
		all = append(all, links...)
	}
	if len(sub.keys) > 1 {
		slices.SortFunc(all, func(a, b link.Backlink) int { return posOf(&a).compare(posOf(&b)) })
	}
	return all, nil
}

// backlinksOf is a page of the live links to sub (q.Target unused): a
// page under each of its keys, merged in (source, location) order, with a
// cursor after the last link returned when any key has more. Links of two
// keys at one (source, location) would be one record naming the target in
// both forms at one place, which an update revokes whole: they never
// overlap, so the lsm cursor needs no target.
func (s *Server) backlinksOf(ctx context.Context, v *lsm.View, sub *subject, q lsm.Query) (*lsm.Result, error) {
	sub, err := s.heldKeys(ctx, v, sub)
	if err != nil {
		return nil, err
	}
	switch len(sub.keys) {
	case 0:
		return &lsm.Result{Generation: v.Generation()}, nil
	case 1:
		q.Target = sub.keys[0]
		return s.Reader.Backlinks(ctx, v, q)
	}
	qs := make([]lsm.Query, len(sub.keys))
	for i, k := range sub.keys {
		qs[i] = q
		qs[i].Target = k
	}
	results, err := s.backlinksAll(ctx, v, qs)
	if err != nil {
		return nil, err
	}
	out := &lsm.Result{}
	more := false
	for _, res := range results {
		out.Links = append(out.Links, res.Links...)
		out.Generation = res.Generation
		more = more || res.Next != nil
	}
	slices.SortFunc(out.Links, func(a, b link.Backlink) int {
		c := posOf(&a).compare(posOf(&b))
		if q.Reverse {
			return -c
		}
		return c
	})
	limit := q.Limit
	if limit <= 0 || limit > lsm.LimitMax {
		limit = lsm.LimitMax
	}
	if len(out.Links) > limit {
		out.Links, more = out.Links[:limit], true
	}
	if more && len(out.Links) > 0 {
		last := out.Links[len(out.Links)-1]
		out.Next = &lsm.Cursor{Source: last.Source, Location: last.Location}
	}
	return out, nil
}

// getBacklinkDids: GET /xrpc/blue.microcosm.links.getBacklinkDids?subject=&source=&limit=&cursor=
// The distinct DIDs linking, ordered by their encoding; the cursor is the
// last DID returned. subject and source repeat.
func (s *Server) getBacklinkDids(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	lq, err := s.parseLinkQuery(r.URL.Query())
	if err != nil {
		return nil, err
	}
	return s.didsPage(ctx, r, v, lq, "getBacklinkDids")
}

// didsPage answers getBacklinkDids and /links/distinct-dids.
func (s *Server) didsPage(ctx context.Context, r *http.Request, v *lsm.View, lq *linkQuery, endpoint string) (any, error) {
	q := r.URL.Query()
	limit, err := parseLimit(q)
	if err != nil {
		return nil, err
	}
	out := backlinkDidsOut{LinkingDids: []string{}}
	if !lq.matchable {
		return out, noCursorHere(q)
	}
	sc := lq.scope(endpoint, q)
	pos, aerr := decodeCursor(q.Get("cursor"), kindDIDs, 0, sc)
	if aerr != nil {
		return nil, aerr
	}
	dids, err := s.distinctDIDs(ctx, v, lq)
	if err != nil {
		return nil, err
	}
	out.Total = len(dids)
	i := 0
	if pos != nil {
		var found bool
		i, found = slices.BinarySearch(dids, binary.BigEndian.Uint64(pos))
		if found {
			i++
		}
	}
	for ; i < len(dids) && len(out.LinkingDids) < limit; i++ {
		d, err := s.Codec.RenderDID(dids[i])
		if err != nil {
			return nil, err
		}
		out.LinkingDids = append(out.LinkingDids, d)
	}
	if i < len(dids) {
		out.Cursor = encodeCursor(kindDIDs, 0, binary.BigEndian.AppendUint64(nil, dids[i-1]), sc)
	}
	return out, nil
}
