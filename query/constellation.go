package query

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// The Constellation-compatible API (same parameter names and response
// shapes as constellation.microcosm.blue), so existing clients switch by
// changing a host name. Paths are in Constellation's convention
// (".subject.uri"); a `source` is "collection:path", the path with or
// without its leading dot.

// Constellation's page limits.
const (
	ConstellationDefaultLimit = 16
	ConstellationLimitMax     = 100
)

type constellationRecord struct {
	DID        string `json:"did"`
	Collection string `json:"collection"`
	RKey       string `json:"rkey"`
}

type getBacklinksOut struct {
	Total   uint64                `json:"total"`
	Records []constellationRecord `json:"records"`
	Cursor  *string               `json:"cursor"`
}

// sourceFilter parses source ("collection:path") and repeated did
// parameters into a filter; ok is false when something in it was never
// indexed (so nothing can match).
func (s *Server) sourceFilter(q map[string][]string, requireSource bool) (lsm.Filter, bool, error) {
	var f lsm.Filter
	src := first(q["source"])
	if src == "" && requireSource {
		return f, false, badRequest("source is required: collection:path, e.g. app.bsky.feed.like:subject.uri")
	}
	if src != "" {
		coll, path, ok := strings.Cut(src, ":")
		if !ok || !link.ValidCollection(coll) || path == "" || path == "." {
			return f, false, badRequest("source must be collection:path, e.g. app.bsky.feed.like:subject.uri")
		}
		if len(path) > extract.PathBytesMax {
			return f, false, badRequest("source: a path is at most " + strconv.Itoa(extract.PathBytesMax) + " bytes")
		}
		known, err := s.collectionPathFilter(&f, coll, path)
		if err != nil || !known {
			return f, known, err
		}
	}
	for _, d := range q["did"] {
		if !link.ValidDID(d) {
			return f, false, badRequest("did must be a DID")
		}
		v, err := s.Codec.DID(d, false)
		if errors.Is(err, link.ErrUnknown) {
			continue // this DID never linked anything
		}
		if err != nil {
			return f, false, badRequest("did: " + err.Error())
		}
		f.DIDs = append(f.DIDs, v)
	}
	if len(q["did"]) > 0 && len(f.DIDs) == 0 {
		return f, false, nil
	}
	return f, true, nil
}

func (s *Server) collectionPathFilter(f *lsm.Filter, coll, path string) (bool, error) {
	if !strings.HasPrefix(path, ".") {
		path = "." + path
	}
	c, err := s.Codec.Collection(coll, false)
	if errors.Is(err, link.ErrUnknown) {
		return false, nil
	}
	if err != nil {
		return false, badRequest("collection: " + err.Error())
	}
	loc, err := s.Codec.Location(path, false, false)
	if errors.Is(err, link.ErrUnknown) {
		return false, nil
	}
	if err != nil {
		return false, badRequest("path: " + err.Error())
	}
	f.Collections = []uint64{c}
	f.Paths = []uint64{loc.PathID()}
	return true, nil
}

// subjectAndSource parses what the Constellation endpoints share: the
// required source (collection:path) with any did filters, then the
// subject. known is false when either names nothing ever indexed (so
// nothing can match).
func (s *Server) subjectAndSource(q map[string][]string) (tgt link.RecordID, f lsm.Filter, known bool, err error) {
	f, fknown, err := s.sourceFilter(q, true)
	if err != nil {
		return tgt, f, false, err
	}
	tgt, tknown, err := s.target("subject", first(q["subject"]))
	if err != nil {
		return tgt, f, false, err
	}
	return tgt, f, fknown && tknown, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func constellationLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return ConstellationDefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > ConstellationLimitMax {
		return 0, badRequest("limit must be an integer from 1 to " + strconv.Itoa(ConstellationLimitMax))
	}
	return n, nil
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

// getBacklinks: GET /xrpc/blue.microcosm.links.getBacklinks?subject=&source=&did=&limit=&cursor=&reverse=
func (s *Server) getBacklinks(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	limit, err := constellationLimit(r)
	if err != nil {
		return nil, err
	}
	reverse := q.Get("reverse") == "true"
	if rv := q.Get("reverse"); rv != "" && rv != "true" && rv != "false" {
		return nil, badRequest("reverse must be true or false")
	}
	out := getBacklinksOut{Records: []constellationRecord{}}
	tgt, f, known, err := s.subjectAndSource(q)
	if err != nil {
		return nil, err
	}
	if !known {
		return out, noCursorHere(q)
	}
	scope := cursorScope("getBacklinks", tgt, q)
	after, aerr := decodeLinkCursor(q.Get("cursor"), reverse, scope)
	if aerr != nil {
		return nil, aerr
	}
	total, err := s.total(ctx, v, tgt, f)
	if err != nil {
		return nil, err
	}
	res, err := s.Reader.Backlinks(ctx, v, lsm.Query{Target: tgt, After: after, Reverse: reverse, Limit: limit, Filter: f})
	if err != nil {
		return nil, err
	}
	out.Total = total
	for _, l := range res.Links {
		rec, err := s.record(l.Source)
		if err != nil {
			return nil, err
		}
		out.Records = append(out.Records, rec)
	}
	out.Cursor = encodeLinkCursor(res.Next, reverse, scope)
	return out, nil
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
	b := make([]byte, 0, 8*(3+len(f.Collections)+len(f.DIDs)+len(f.Paths)))
	for _, l := range [][]uint64{f.Collections, f.DIDs, f.Paths} {
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

// getBacklinksCount: GET /xrpc/blue.microcosm.links.getBacklinksCount?subject=&source=
func (s *Server) getBacklinksCount(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	tgt, f, known, err := s.subjectAndSource(q)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{"total": 0}
	if !known {
		return out, nil
	}
	n, _, err := s.Reader.Count(ctx, v, tgt, f)
	if err != nil {
		return nil, err
	}
	out["total"] = n
	return out, nil
}

type backlinkDidsOut struct {
	Total       int      `json:"total"`
	LinkingDids []string `json:"linking_dids"`
	Cursor      *string  `json:"cursor"`
}

// getBacklinkDids: GET /xrpc/blue.microcosm.links.getBacklinkDids?subject=&source=&limit=&cursor=
// The distinct DIDs linking, ordered by their encoding; the cursor is the
// last DID returned.
func (s *Server) getBacklinkDids(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	limit, err := constellationLimit(r)
	if err != nil {
		return nil, err
	}
	out := backlinkDidsOut{LinkingDids: []string{}}
	tgt, f, known, err := s.subjectAndSource(q)
	if err != nil {
		return nil, err
	}
	if !known {
		return out, noCursorHere(q)
	}
	scope := cursorScope("getBacklinkDids", tgt, q)
	pos, aerr := decodeCursor(q.Get("cursor"), cursorDIDs, didPosBytes, scope)
	if aerr != nil {
		return nil, aerr
	}
	var after uint64
	hasAfter := pos != nil
	if hasAfter {
		after = binary.BigEndian.Uint64(pos)
	}
	links, _, err := s.Reader.All(ctx, v, tgt, f)
	if err != nil {
		return nil, err
	}
	dids := make([]uint64, 0, len(links))
	for _, l := range links {
		dids = append(dids, l.Source.DID)
	}
	slices.Sort(dids)
	dids = slices.Compact(dids)
	out.Total = len(dids)
	i := 0
	if hasAfter {
		var found bool
		i, found = slices.BinarySearch(dids, after)
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
		out.Cursor = encodeCursor(cursorDIDs, binary.BigEndian.AppendUint64(nil, dids[i-1]), scope)
	}
	return out, nil
}

type pathCounts struct {
	Records      int `json:"records"`
	DistinctDids int `json:"distinct_dids"`
}

// linksAll: GET /links/all?target= — per collection and path, the live
// links and distinct DIDs.
func (s *Server) linksAll(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	out := map[string]map[string]map[string]pathCounts{"links": {}}
	tgt, known, err := s.target("target", q.Get("target"))
	if err != nil || !known {
		return out, err
	}
	links, _, err := s.Reader.All(ctx, v, tgt, lsm.Filter{})
	if err != nil {
		return nil, err
	}
	type key struct{ coll, path uint64 }
	records := map[key]int{}
	dids := map[key]map[uint64]bool{}
	for _, l := range links {
		k := key{l.Source.Collection, l.Location.PathID()}
		records[k]++
		if dids[k] == nil {
			dids[k] = map[uint64]bool{}
		}
		dids[k][l.Source.DID] = true
	}
	if len(records) > LinksAllEntriesMax {
		return nil, &apiError{http.StatusBadRequest, "QueryTooBig", "links from more than " + strconv.Itoa(LinksAllEntriesMax) + " collection and path pairs; ask getBacklinksCount per source"}
	}
	for k, n := range records {
		coll, err := s.Codec.RenderCollection(k.coll)
		if err != nil {
			return nil, err
		}
		path, err := s.Codec.RenderLocation(link.MakeLocation(k.path, false), link.StyleConstellation)
		if err != nil {
			return nil, err
		}
		if out["links"][coll] == nil {
			out["links"][coll] = map[string]pathCounts{}
		}
		out["links"][coll][path] = pathCounts{Records: n, DistinctDids: len(dids[k])}
	}
	return out, nil
}
