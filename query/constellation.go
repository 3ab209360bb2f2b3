package query

import (
	"cmp"
	"context"
	"encoding/binary"
	"net/http"
	"slices"
	"sync"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/zeebo/xxh3"
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

func (s *Server) record(ctx context.Context, id link.RecordID) (constellationRecord, error) {
	did, err := s.codec(ctx).RenderDID(id.DID)
	if err != nil {
		return constellationRecord{}, err
	}
	coll, err := s.codec(ctx).RenderCollection(id.Collection)
	if err != nil {
		return constellationRecord{}, err
	}
	rkey, err := s.codec(ctx).RenderRKey(id.RKey)
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
	twins := len(known) > 1 && twoKeys(known)
	for i, sub := range known {
		q := lsm.Query{Target: sub.id, After: resumeAfter(after, sub.id, desc), Reverse: desc, Limit: limit, Filter: lq.filter}
		if twins && after != nil && servedSide(sub.id, after, desc) {
			// The cursor's (source, location) read again under the keys
			// the page before gave it for (dropTwins: not given again),
			// so that a link there under a later key whose subject's other
			// key was given then is known for a twin: one link more.
			q.After, q.Limit = resumeAt(after, desc), limit+1
		}
		qs[i] = q
	}
	results, err := s.backlinksAll(ctx, v, qs)
	if err != nil {
		return nil, nil, err
	}
	var all []link.Backlink
	more := false
	// A key with more links was read up to its lsm cursor: the merged page
	// must stop there, or the next page's cursor would pass links of that
	// key not read yet (a page short of its limit: twins dropped, most of a
	// page revoked).
	var horizon *linkPos
	for i, res := range results {
		all = append(all, res.Links...)
		if res.Next == nil {
			continue
		}
		more = true
		h := linkPos{Source: res.Next.Source, Location: res.Next.Location, Target: qs[i].Target}
		if horizon == nil || (!desc && h.compare(*horizon) < 0) || (desc && h.compare(*horizon) > 0) {
			horizon = &h
		}
	}
	if len(known) > 1 {
		slices.SortFunc(all, func(a, b link.Backlink) int {
			c := posOf(&a).compare(posOf(&b))
			if desc {
				return -c
			}
			return c
		})
		if twins {
			all = dropTwins(all, after, desc, func(a, b link.RecordID) bool { return lq.subjectOfKey(a) == lq.subjectOfKey(b) })
		}
		if horizon != nil {
			all = cutAt(all, *horizon, desc)
		}
	}
	if len(all) > limit {
		p := posOf(&all[limit-1])
		return all[:limit], &p, nil
	}
	if !more {
		return all, nil, nil
	}
	// Every key's links up to the horizon were read (those with more up to
	// their cursors, the others all): the next page goes on from there,
	// even when this one is short or empty.
	return all, horizon, nil
}

// records renders links as Constellation's records, saying which subject
// and source each matched when the query asked about several.
func (s *Server) records(ctx context.Context, lq *linkQuery, links []link.Backlink) ([]constellationRecord, error) {
	out := make([]constellationRecord, 0, len(links))
	for i := range links {
		rec, err := s.record(ctx, links[i].Source)
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
	lq, err := s.parseLinkQuery(ctx, q)
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
	total, err := s.totalOf(ctx, v, known, lq.filter, true)
	if err != nil {
		return nil, 0, nil, err
	}
	links, next, err := s.pageLinks(ctx, v, lq, after, desc, limit)
	if err != nil {
		return nil, 0, nil, err
	}
	recs, err := s.records(ctx, lq, links)
	if err != nil {
		return nil, 0, nil, err
	}
	return recs, total, encodePosCursor(kindLinks, next, desc, sc), nil
}

// Totals of getBacklinks: every page carries the count of the target's
// links that pass its filter, which for a popular target costs far more
// than the page (a count of 100,000 links reads them all, and their
// revocations). A view never changes, so a count is kept per view, target
// and filter (viewCache), and the pages that follow in the same
// generation reuse it.
const (
	// countCacheMin: counts, and folds, of fewer candidates are not kept
	// (cheaper to count again than to churn the cache).
	countCacheMin = 4096
	// countCacheEntriesMax bounds the counts kept for one view.
	countCacheEntriesMax = 1024
)

// filterKey is f's lists, encoded: a part of a cache's key.
func filterKey(b []byte, f *lsm.Filter) []byte {
	pairs := make([]uint64, 0, 2*len(f.Sources))
	for _, p := range f.Sources {
		pairs = append(pairs, p.Collection, p.Path)
	}
	for _, l := range [][]uint64{f.Collections, f.DIDs, f.Paths, pairs} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(l)))
		for _, x := range l {
			b = binary.BigEndian.AppendUint64(b, x)
		}
	}
	return b
}

// appendRecordID appends id's three words.
func appendRecordID(b []byte, id link.RecordID) []byte {
	b = binary.BigEndian.AppendUint64(b, id.DID)
	b = binary.BigEndian.AppendUint64(b, id.Collection)
	return binary.BigEndian.AppendUint64(b, id.RKey)
}

func makeCountKey(target link.RecordID, f *lsm.Filter) string {
	return string(filterKey(appendRecordID(nil, target), f))
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
	if !lq.matchable {
		return 0, nil
	}
	known, err := s.held(ctx, v, lq.known)
	if err != nil {
		return 0, err
	}
	return s.totalOf(ctx, v, known, lq.filter, false)
}

// totalOf is the live links passing f to the subjects of known (byKey
// entries, pruned by held), each counted once: under a subject's one key,
// or under two without the twins (cached: through the count cache).
func (s *Server) totalOf(ctx context.Context, v *lsm.View, known []subject, f lsm.Filter, cached bool) (uint64, error) {
	var n uint64
	for i := 0; i < len(known); {
		j := i + 1
		for j < len(known) && known[j].norm == known[i].norm {
			j++
		}
		for _, e := range known[i:j] {
			var c uint64
			var err error
			if cached {
				c, err = s.total(ctx, v, e.id, f)
			} else {
				c, _, err = s.Reader.Count(ctx, v, e.id, f)
			}
			if err != nil {
				return 0, err
			}
			n += c
		}
		if j-i > 1 {
			t, err := s.twins(ctx, v, known[i].id, known[j-1].id, f)
			if err != nil {
				return 0, err
			}
			n -= t
		}
		i = j
	}
	return n, nil
}

// twins counts the live links passing f stored under both keys of one
// target, enc (its encoding) and hash: one record's link written under
// the hash while a part of the target was unknown, and again under the
// encoding (a create replayed after the target became known: a new
// leader's rewind, a backfill of a repository the live stream already
// wrote). The hash key holds the links written before (usually few): all
// of them are read, then the encoding's links from the same accounts.
//
// In a backfill the hash key of a popular target may hold millions (its
// links written before its author's repository): each position is kept as
// 16 bytes of its hash, sorted (a map of the positions took ~50 bytes a
// link), and the accounts once each.
func (s *Server) twins(ctx context.Context, v *lsm.View, enc, hash link.RecordID, f lsm.Filter) (uint64, error) {
	var at []xxh3.Uint128
	g := f
	g.DIDs = nil
	_, err := s.Reader.Each(ctx, v, hash, f, func(links []link.Backlink) error {
		for i := range links {
			at = append(at, posHash(&links[i]))
			if k := len(g.DIDs); k == 0 || g.DIDs[k-1] != links[i].Source.DID {
				g.DIDs = append(g.DIDs, links[i].Source.DID)
			}
		}
		return nil
	})
	if err != nil || len(at) == 0 {
		return 0, err
	}
	slices.SortFunc(at, cmpUint128)
	slices.Sort(g.DIDs)
	g.DIDs = slices.Compact(g.DIDs)
	// The encoding's links from those accounts, window by window: a
	// popular target's are millions, and this is part of a count.
	var n uint64
	_, err = s.Reader.Each(ctx, v, enc, g, func(links []link.Backlink) error {
		for i := range links {
			if _, ok := slices.BinarySearchFunc(at, posHash(&links[i]), cmpUint128); ok {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// posHash is 128 bits of the hash of a link's (source, location): two
// positions of one target's keys share it by chance with a probability
// of about 2^-128 a pair.
func posHash(l *link.Backlink) xxh3.Uint128 {
	var b [link.RecordIDSize + 8]byte
	l.Source.Put(b[:])
	binary.BigEndian.PutUint64(b[link.RecordIDSize:], uint64(l.Location))
	return xxh3.Hash128(b[:])
}

func cmpUint128(a, b xxh3.Uint128) int {
	if c := cmp.Compare(a.Hi, b.Hi); c != 0 {
		return c
	}
	return cmp.Compare(a.Lo, b.Lo)
}

// cutAt drops the links past h in the page's direction.
func cutAt(links []link.Backlink, h linkPos, desc bool) []link.Backlink {
	for i := range links {
		c := posOf(&links[i]).compare(h)
		if (!desc && c > 0) || (desc && c < 0) {
			return links[:i]
		}
	}
	return links
}

// dropTwins removes from links (sorted by position, in the page's
// direction desc) the second copy of a link one subject has under two keys
// (see twins). At after's (source, location), the position a page ended
// in, the links up to after (read again: pageLinks) were given by the page
// before: they are dropped, and so is a link past after there whose
// subject's link they hold, or after's subject's; sameSubject says whether
// two links go to one subject.
func dropTwins(links []link.Backlink, after *linkPos, desc bool, sameSubject func(a, b link.RecordID) bool) []link.Backlink {
	out := links[:0]
	var given []link.RecordID // targets at after's (source, location) the page before gave
	group := 0                // where in out the links at the current (source, location) start
	for i := range links {
		l := links[i]
		if after != nil && l.Source == after.Source && l.Location == after.Location {
			if servedSide(l.Target, after, desc) {
				given = append(given, l.Target)
				continue
			}
			if sameSubject(l.Target, after.Target) || slices.ContainsFunc(given, func(g link.RecordID) bool { return sameSubject(g, l.Target) }) {
				continue
			}
		}
		if len(out) > 0 && (out[len(out)-1].Source != l.Source || out[len(out)-1].Location != l.Location) {
			group = len(out)
		}
		twin := false
		for j := group; j < len(out); j++ {
			if sameSubject(out[j].Target, l.Target) {
				twin = true
				break
			}
		}
		if !twin {
			out = append(out, l)
		}
	}
	return out
}

type totalOut struct {
	Total uint64 `json:"total"`
}

// getBacklinksCount: GET /xrpc/blue.microcosm.links.getBacklinksCount?subject=&source=&did=
// subject, source and did repeat.
func (s *Server) getBacklinksCount(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	lq, err := s.parseLinkQuery(ctx, r.URL.Query())
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
	// The first failure cancels the reads still going; it is the one
	// returned (not the cancellations it caused).
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	sem := make(chan struct{}, backlinksConcurrency)
	var wg sync.WaitGroup
	for i := range qs {
		select {
		case sem <- struct{}{}:
		case <-rctx.Done():
		}
		if rctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := s.Reader.Backlinks(rctx, v, qs[i])
			if err != nil {
				fail(err)
				return
			}
			out[i] = res
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// backlinksOf is a page of the live links to sub (q.Target unused): a
// page under each of its keys, merged in (source, location) order, twins
// dropped (see twins), with a cursor after the last link returned when
// any key has more.
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
	var horizon *linkPos // as in pageLinks
	for i, res := range results {
		out.Links = append(out.Links, res.Links...)
		out.Generation = res.Generation
		out.Stats.Scanned += res.Stats.Scanned
		if res.Next == nil {
			continue
		}
		more = true
		h := linkPos{Source: res.Next.Source, Location: res.Next.Location, Target: qs[i].Target}
		if horizon == nil || (!q.Reverse && h.compare(*horizon) < 0) || (q.Reverse && h.compare(*horizon) > 0) {
			horizon = &h
		}
	}
	slices.SortFunc(out.Links, func(a, b link.Backlink) int {
		c := posOf(&a).compare(posOf(&b))
		if q.Reverse {
			return -c
		}
		return c
	})
	// The lsm cursor after a page is exclusive of its last (source,
	// location) under both keys, so a twin split by the page's end is
	// never read again.
	out.Links = dropTwins(out.Links, nil, q.Reverse, func(a, b link.RecordID) bool { return true })
	if horizon != nil {
		// Up to the horizon's (source, location) under every key: the lsm
		// cursor after it is exclusive of that position for all of them.
		h := *horizon
		h.Target = maxRecordID
		if q.Reverse {
			h.Target = link.RecordID{}
		}
		out.Links = cutAt(out.Links, h, q.Reverse)
	}
	limit := q.Limit
	if limit <= 0 || limit > lsm.LimitMax {
		limit = lsm.LimitMax
	}
	truncated := len(out.Links) > limit
	if truncated {
		out.Links, more = out.Links[:limit], true
	}
	switch {
	case !more:
	case horizon != nil && !truncated:
		// Every key's links up to the horizon were read and are here (a
		// page short of its limit, even empty): the next goes on from
		// there, not from this page's last link (from which it would
		// read the same stretch again, or nothing new at all).
		out.Next = &lsm.Cursor{Source: horizon.Source, Location: horizon.Location}
	case len(out.Links) > 0:
		last := out.Links[len(out.Links)-1]
		out.Next = &lsm.Cursor{Source: last.Source, Location: last.Location}
	}
	return out, nil
}

// getBacklinkDids: GET /xrpc/blue.microcosm.links.getBacklinkDids?subject=&source=&limit=&cursor=
// The distinct DIDs linking, ordered by their encoding; the cursor is the
// last DID returned. subject and source repeat. It takes no did (nor does
// Constellation's, nor its lexicon): a did given is ignored, as any
// unknown parameter.
func (s *Server) getBacklinkDids(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	delete(q, "did")
	lq, err := s.parseLinkQuery(ctx, q)
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
		d, err := s.codec(ctx).RenderDID(dids[i])
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
