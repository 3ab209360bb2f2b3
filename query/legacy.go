package query

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Constellation's older paths (/links…): a target with a collection and a
// path given apart instead of subject and source, and the same answers
// under their older field names. The path is Constellation's, its leading
// dot optional here as in source.

// legacyQuery reads target, collection, path and the DID filters (did,
// repeatable, or from_dids, comma-separated: Constellation's older
// spelling; not both).
func (s *Server) legacyQuery(ctx context.Context, q url.Values, withDIDs bool) (*linkQuery, error) {
	raw, err := one(q, "target")
	if err != nil {
		return nil, err
	}
	sub, err := s.parseSubject(ctx, "target", raw)
	if err != nil {
		return nil, err
	}
	coll, err := one(q, "collection")
	if err != nil {
		return nil, err
	}
	if coll == "" {
		return nil, badRequest("collection is required")
	}
	path, err := one(q, "path")
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, badRequest("path is required")
	}
	src, err := s.parseSource(ctx, "path", coll, path)
	if err != nil {
		return nil, err
	}
	lq := &linkQuery{subjects: []subject{sub}, sources: []source{src}}
	lq.known = byKey(lq.subjects)
	if src.known {
		lq.filter.Sources = []lsm.SourcePair{src.pair}
	}
	didsOK := true
	if withDIDs {
		// Present but empty, from_dids names nobody (as in Constellation,
		// where it is the set of one empty name): an empty follow list
		// gets no links, not every link.
		if fds, given := q["from_dids"]; given {
			fd := strings.Join(fds, ",")
			if len(q["did"]) > 0 {
				return nil, badRequest("give did (repeated) or from_dids (comma-separated), not both")
			}
			var dids []string
			for _, d := range strings.Split(fd, ",") {
				// Trimmed, an empty entry dropped: "a,b," and "a, b" are
				// both the two DIDs a and b. (Constellation takes each
				// entry as it is: " b" is an unknown name there, matching
				// nothing.)
				if d = strings.TrimSpace(d); d != "" {
					dids = append(dids, d)
				}
			}
			if len(dids) == 0 {
				didsOK = false // only empty names: nobody
			}
			if len(dids) > DIDsMax {
				return nil, badRequest("from_dids names " + strconv.Itoa(len(dids)) + " DIDs; at most " + strconv.Itoa(DIDsMax))
			}
			q = url.Values{"did": dids}
		}
		var ok bool
		lq.didNames = q["did"]
		lq.filter.DIDs, ok, err = s.didFilter(ctx, q, "did")
		if err != nil {
			return nil, err
		}
		didsOK = didsOK && ok
	}
	lq.matchable = len(lq.known) > 0 && src.known && didsOK
	return lq, nil
}

type linksOut struct {
	Total          uint64                `json:"total"`
	LinkingRecords []constellationRecord `json:"linking_records"`
	Cursor         *string               `json:"cursor"`
}

// links: GET /links?target=&collection=&path=&did=&from_dids=&limit=&cursor=&reverse=
func (s *Server) links(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	lq, err := s.legacyQuery(ctx, r.URL.Query(), true)
	if err != nil {
		return nil, err
	}
	recs, total, next, err := s.linksPage(ctx, r, v, lq, "links")
	if err != nil {
		return nil, err
	}
	return linksOut{Total: total, LinkingRecords: recs, Cursor: next}, nil
}

// linksCount: GET /links/count?target=&collection=&path=
func (s *Server) linksCount(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	lq, err := s.legacyQuery(ctx, r.URL.Query(), false)
	if err != nil {
		return nil, err
	}
	n, err := s.count(ctx, v, lq)
	return totalOut{n}, err
}

// linksCountDistinctDids: GET /links/count/distinct-dids?target=&collection=&path=
func (s *Server) linksCountDistinctDids(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	lq, err := s.legacyQuery(ctx, r.URL.Query(), false)
	if err != nil {
		return nil, err
	}
	dids, err := s.distinctDIDs(ctx, v, lq)
	return totalOut{uint64(len(dids))}, err
}

// linksDistinctDids: GET /links/distinct-dids?target=&collection=&path=&limit=&cursor=
func (s *Server) linksDistinctDids(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	lq, err := s.legacyQuery(ctx, r.URL.Query(), false)
	if err != nil {
		return nil, err
	}
	return s.didsPage(ctx, r, v, lq, "links/distinct-dids")
}

type pathCounts struct {
	Records      int `json:"records"`
	DistinctDids int `json:"distinct_dids"`
}

type sourceKey struct{ coll, path uint64 }

// allCounts is, per collection and path, the live links to target and the
// distinct accounts they come from.
func (s *Server) allCounts(ctx context.Context, r *http.Request, v *lsm.View) (map[sourceKey]*pathCounts, error) {
	raw, err := one(r.URL.Query(), "target")
	if err != nil {
		return nil, err
	}
	sub, err := s.parseSubject(ctx, "target", raw)
	if err != nil {
		return nil, err
	}
	// Window by window (a popular account's followers are millions of
	// links): each pair's accounts are held, 8 bytes each, not the links.
	out := map[sourceKey]*pathCounts{}
	dids := map[sourceKey]*didSet{}
	tooBig := &apiError{http.StatusBadRequest, "QueryTooBig", "links from more than " + strconv.Itoa(LinksAllEntriesMax) + " collection and path pairs; ask getBacklinksCount per source"}
	err = s.eachOf(ctx, v, &sub, lsm.Filter{}, func(links []link.Backlink) error {
		for i := range links {
			l := &links[i]
			k := sourceKey{l.Source.Collection, l.Location.PathID()}
			c := out[k]
			if c == nil {
				if len(out) == LinksAllEntriesMax {
					return tooBig
				}
				c = &pathCounts{}
				out[k], dids[k] = c, &didSet{}
			}
			c.Records++
			dids[k].add(l.Source.DID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k, c := range out {
		c.DistinctDids = dids[k].len()
	}
	return out, nil
}

// byCollectionPath renders counts as {"links": {collection: {path: value}}}.
func byCollectionPath[T any](ctx context.Context, s *Server, counts map[sourceKey]*pathCounts, value func(*pathCounts) T) (map[string]map[string]map[string]T, error) {
	out := map[string]map[string]map[string]T{"links": {}}
	for k, c := range counts {
		coll, err := s.codec(ctx).RenderCollection(k.coll)
		if err != nil {
			return nil, err
		}
		path, err := s.codec(ctx).RenderLocation(link.MakeLocation(k.path, false), link.StyleConstellation)
		if err != nil {
			return nil, err
		}
		if out["links"][coll] == nil {
			out["links"][coll] = map[string]T{}
		}
		out["links"][coll][path] = value(c)
	}
	return out, nil
}

// linksAll: GET /links/all?target= — per collection and path, the live
// links and distinct DIDs.
func (s *Server) linksAll(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	counts, err := s.allCounts(ctx, r, v)
	if err != nil {
		return nil, err
	}
	return byCollectionPath(ctx, s, counts, func(c *pathCounts) pathCounts { return *c })
}

// linksAllCount: GET /links/all/count?target= — per collection and path,
// the live links.
func (s *Server) linksAllCount(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	counts, err := s.allCounts(ctx, r, v)
	if err != nil {
		return nil, err
	}
	return byCollectionPath(ctx, s, counts, func(c *pathCounts) int { return c.Records })
}
