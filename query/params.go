package query

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Limits of repeatable parameters: how many values one query may give.
const (
	// SubjectsMax bounds subject (and otherSubject): one question about a
	// few spellings or copies of a thing, not a batch API.
	SubjectsMax = 16
	// SourcesMax bounds source: a URL shared as an embed and as a facet
	// link, a post quoted and replied to, is a few sources.
	SourcesMax = 16
	// DIDsMax bounds did (and linkDid): "likes from the accounts I follow"
	// names many accounts; a page's filter is a sorted list.
	DIDsMax = 1000
)

// subject is a parsed target parameter.
type subject struct {
	norm string // normalised (a repository by its DID): cursors check it
	name string // as answers name it: norm, or as asked if norm is too long to ask with
	// keys are every key links to it may be stored under
	// (link.Codec.TargetKeys): its encoding when the index knows every
	// part of it, and its hash. A query reads them all.
	keys  []link.RecordID
	id    link.RecordID // keys[0]; in linkQuery.known, the one key of the entry
	known bool          // it has keys (every valid target has its hash)
}

// has reports whether links stored under key k go to sub.
func (sub *subject) has(k link.RecordID) bool { return slices.Contains(sub.keys, k) }

// held keeps the entries of lq.known (byKey) whose key some run of v may
// hold, when a subject has more than one: the hashed key of a target that
// was always known is in no table, and a filter probe a run costs less
// than a second page read and the merge.
func (s *Server) held(ctx context.Context, v *lsm.View, known []subject) ([]subject, error) {
	if len(known) < 2 {
		return known, nil
	}
	out := make([]subject, 0, len(known))
	for _, e := range known {
		if len(e.keys) > 1 {
			ok, err := s.Reader.MayHold(ctx, v, e.id)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// heldKeys is sub with only the keys some run of v may hold (all of them
// when it has one).
func (s *Server) heldKeys(ctx context.Context, v *lsm.View, sub *subject) (*subject, error) {
	if len(sub.keys) < 2 {
		return sub, nil
	}
	keys := make([]link.RecordID, 0, len(sub.keys))
	for _, k := range sub.keys {
		ok, err := s.Reader.MayHold(ctx, v, k)
		if err != nil {
			return nil, err
		}
		if ok {
			keys = append(keys, k)
		}
	}
	c := *sub
	c.keys = keys
	return &c, nil
}

// byKey returns one entry per key of each subject (id the key, norm the
// subject's), as the queries read them: a subject whose links are under
// two keys is read twice and merged.
func byKey(subs []subject) []subject {
	var out []subject
	for _, sub := range subs {
		for _, k := range sub.keys {
			e := sub
			e.id = k
			out = append(out, e)
		}
	}
	return out
}

// source is a parsed "collection:path".
type source struct {
	coll, path string // path with its leading dot
	pair       lsm.SourcePair
	known      bool
}

// name is the source as Constellation spells it: the path without its dot.
func (s *source) name() string { return s.coll + ":" + s.path[1:] }

// one returns a parameter that may be given at most once ("" when absent).
func one(q url.Values, name string) (string, error) {
	switch vs := q[name]; len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	default:
		return "", badRequest("parameter " + name + " is given " + strconv.Itoa(len(vs)) + " times; at most once")
	}
}

// many returns a repeatable parameter's values, at most max of them.
func many(q url.Values, name string, max int, required bool) ([]string, error) {
	vs := q[name]
	if len(vs) == 0 && required {
		return nil, badRequest(name + " is required")
	}
	if len(vs) > max {
		return nil, badRequest("parameter " + name + " is given " + strconv.Itoa(len(vs)) + " times; at most " + strconv.Itoa(max))
	}
	return vs, nil
}

// parseSubject parses and encodes one target.
func (s *Server) parseSubject(ctx context.Context, param, raw string) (subject, error) {
	if raw == "" {
		return subject{}, badRequest(param + " is required")
	}
	t, err := link.ParseNormalTarget(raw)
	if errors.Is(err, link.ErrTooLong) {
		return subject{}, badRequest(param + " is too long: a target is at most " + strconv.Itoa(link.TargetBytesMax) + " bytes, or " + strconv.Itoa(link.NormBytesMax) + " in its normalised form")
	}
	if err != nil {
		return subject{}, badRequest(param + " must be an at-uri, a DID, an http(s) URL or a URI of another scheme")
	}
	keys, err := s.codec(ctx).TargetKeys(&t)
	if err != nil {
		return subject{}, err // the PLC map could not be read: a server error, not the caller's
	}
	norm := t.Norm
	if t.IsRepo() {
		norm = t.DID // at://did:x is did:x: one spelling in cursors
	}
	name := t.Norm // answers name it as asked (normalised): a client matches what it asked
	if len(name) > link.NormBytesMax {
		// An internationalised host's ASCII form can be longer than any
		// question may be (link.NormBytesMax): the answer names the
		// target as it was asked, which can be asked again.
		name = raw
	}
	return subject{norm: norm, name: name, keys: keys, id: keys[0], known: true}, nil
}

// subjects parses a repeatable target parameter: every target given, in
// order, without repeats (did:x and at://did:x are one).
func (s *Server) subjects(ctx context.Context, q url.Values, param string, required bool) ([]subject, error) {
	raws, err := many(q, param, SubjectsMax, required)
	if err != nil {
		return nil, err
	}
	var out []subject
	for _, raw := range raws {
		sub, err := s.parseSubject(ctx, param, raw)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(out, func(o subject) bool { return o.norm == sub.norm || o.id == sub.id }) {
			out = append(out, sub)
		}
	}
	return out, nil
}

// parsePath checks a path parameter (the leading dot optional) against the
// limits ingest applies, so any path that can be indexed can be asked about:
// "." too, where a record's top-level key "" holds a link.
func parsePath(param, path string) (string, error) {
	if path == "" {
		return "", badRequest(param + " must be a path, e.g. subject.uri")
	}
	if !strings.HasPrefix(path, ".") {
		path = "." + path
	}
	switch extract.CheckPath(path) {
	case extract.ErrPathTooLong:
		return "", badRequest(param + ": a path is at most " + strconv.Itoa(extract.PathBytesMax) + " bytes (the longest ingest indexes)")
	case extract.ErrPathTooDeep:
		return "", badRequest(param + ": a path has at most " + strconv.Itoa(extract.DepthMax) + " levels (the deepest ingest indexes)")
	}
	return path, nil
}

// pathID encodes a path; ok is false when no link was ever indexed there.
func (s *Server) pathID(ctx context.Context, param, path string) (uint64, bool, error) {
	loc, err := s.codec(ctx).Location(path, false, false)
	if errors.Is(err, link.ErrUnknown) {
		return 0, false, nil
	}
	if errors.Is(err, link.ErrLookup) {
		return 0, false, err // a path past the outlines is named: the names tree could not be read
	}
	if err != nil {
		return 0, false, badRequest(param + ": " + err.Error())
	}
	return loc.PathID(), true, nil
}

const sourceSyntax = "source must be collection:path, e.g. app.bsky.feed.like:subject.uri"

// parseSource parses one "collection:path" (or a collection and a path
// given apart, as the /links paths do).
func (s *Server) parseSource(ctx context.Context, param, coll, path string) (source, error) {
	if !link.ValidCollection(coll) {
		if param == "source" {
			return source{}, badRequest(sourceSyntax)
		}
		return source{}, badRequest("collection must be an NSID, e.g. app.bsky.feed.like")
	}
	if param == "source" && path == "" {
		path = "." // "collection:" as Constellation reads it: the dot it puts before a path, alone
	}
	p, err := parsePath(param, path)
	if err != nil {
		return source{}, err
	}
	src := source{coll: coll, path: p}
	c, err := s.codec(ctx).Collection(coll, false)
	if errors.Is(err, link.ErrUnknown) {
		return src, nil
	}
	if errors.Is(err, link.ErrLookup) {
		return source{}, err // a collection past the outlines is named: the names tree could not be read
	}
	if err != nil {
		return source{}, badRequest("collection: " + err.Error())
	}
	pid, ok, err := s.pathID(ctx, param, p)
	if err != nil || !ok {
		return src, err
	}
	src.pair, src.known = lsm.SourcePair{Collection: c, Path: pid}, true
	return src, nil
}

// sources parses the repeatable source parameter: all of them (known or
// not: answers name them) in the order given, without repeats.
func (s *Server) sources(ctx context.Context, q url.Values) ([]source, error) {
	raws, err := many(q, "source", SourcesMax, true)
	if err != nil {
		return nil, err
	}
	var out []source
	for _, raw := range raws {
		coll, path, ok := strings.Cut(raw, ":")
		if !ok {
			return nil, badRequest(sourceSyntax)
		}
		src, err := s.parseSource(ctx, "source", coll, path)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(out, func(o source) bool { return o.coll == src.coll && o.path == src.path }) {
			out = append(out, src)
		}
	}
	return out, nil
}

// didFilter parses a repeatable DID parameter into sorted did fields; ok
// is false when DIDs were given but none ever linked anything (so nothing
// can match). A value that is not a DID is one that never linked anything,
// as in Constellation, where it is an unknown name: one bad entry of a
// follow list does not fail the request.
func (s *Server) didFilter(ctx context.Context, q url.Values, param string) (dids []uint64, ok bool, err error) {
	raws, err := many(q, param, DIDsMax, false)
	if err != nil {
		return nil, false, err
	}
	for _, d := range raws {
		if !link.ValidDID(d) {
			continue // matches no link
		}
		v, err := s.codec(ctx).DID(d, false)
		if errors.Is(err, link.ErrUnknown) {
			continue // this DID never linked anything
		}
		if errors.Is(err, link.ErrLookup) {
			return nil, false, err // the bucket could not be read: a server error, not the caller's
		}
		if err != nil {
			return nil, false, badRequest(param + ": " + err.Error())
		}
		dids = append(dids, v)
	}
	slices.Sort(dids)
	dids = slices.Compact(dids)
	return dids, len(raws) == 0 || len(dids) > 0, nil
}

// linkQuery is a parsed question "which links go to these subjects from
// these sources (from these accounts)": the part getBacklinks, the counts
// and the DID lists share.
type linkQuery struct {
	subjects  []subject // as asked, distinct
	known     []subject // one entry per key of each subject (byKey)
	sources   []source  // as asked, distinct
	filter    lsm.Filter
	didNames  []string // the DIDs asked, as given (did, or from_dids split): cursors check them
	matchable bool     // some subject, source and did is known: something can match
	multi     bool     // more than one subject or source was asked: answers say which each link matched
}

// parseLinkQuery reads subject, source and did, each repeatable.
func (s *Server) parseLinkQuery(ctx context.Context, q url.Values) (*linkQuery, error) {
	srcs, err := s.sources(ctx, q)
	if err != nil {
		return nil, err
	}
	subs, err := s.subjects(ctx, q, "subject", true)
	if err != nil {
		return nil, err
	}
	dids, didsOK, err := s.didFilter(ctx, q, "did")
	if err != nil {
		return nil, err
	}
	lq := &linkQuery{subjects: subs, sources: srcs, multi: len(subs) > 1 || len(srcs) > 1}
	lq.known = byKey(subs)
	for i := range srcs {
		if srcs[i].known {
			lq.filter.Sources = append(lq.filter.Sources, srcs[i].pair)
		}
	}
	lq.filter.DIDs, lq.didNames = dids, q["did"]
	lq.matchable = len(lq.known) > 0 && len(lq.filter.Sources) > 0 && didsOK
	return lq, nil
}

// scope names the query for its cursors.
func (lq *linkQuery) scope(endpoint string, q url.Values) scope {
	sc := newScope(endpoint)
	var subs, srcs []string
	for _, sub := range lq.subjects {
		subs = append(subs, sub.norm)
	}
	for i := range lq.sources {
		srcs = append(srcs, lq.sources[i].coll+":"+lq.sources[i].path)
	}
	return sc.add("subject", subs).add("source", srcs).add("did", lq.didNames)
}

// sourceOf names the source a link matched.
func (lq *linkQuery) sourceOf(l *link.Backlink) string {
	p := lsm.SourcePair{Collection: l.Source.Collection, Path: l.Location.PathID()}
	for i := range lq.sources {
		if lq.sources[i].known && lq.sources[i].pair == p {
			return lq.sources[i].name()
		}
	}
	return ""
}

// subjectOfKey names the subject whose key k is ("": none).
func (lq *linkQuery) subjectOfKey(k link.RecordID) string {
	for _, sub := range lq.known {
		if sub.has(k) {
			return sub.norm
		}
	}
	return ""
}

// twoKeys reports whether some subject is read under two keys in known
// (byKey entries: a subject's are adjacent).
func twoKeys(known []subject) bool {
	for i := 1; i < len(known); i++ {
		if known[i].norm == known[i-1].norm {
			return true
		}
	}
	return false
}

// subjectOf names the subject a link goes to.
func (lq *linkQuery) subjectOf(l *link.Backlink) string {
	for _, sub := range lq.known {
		if sub.has(l.Target) {
			return sub.name
		}
	}
	return ""
}

// parseLimit reads limit with a default and the maximum.
func parseLimit(q url.Values) (int, error) {
	s, err := one(q, "limit")
	if err != nil || s == "" {
		return DefaultLimit, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > LimitMax {
		return 0, badRequest("limit must be an integer from 1 to " + strconv.Itoa(LimitMax))
	}
	return n, nil
}

// parseReverse reads reverse: "true" (oldest first) or "false" (the
// default: newest first).
func parseReverse(q url.Values) (bool, error) {
	switch rv, err := one(q, "reverse"); {
	case err != nil:
		return false, err
	case rv == "" || rv == "false":
		return false, nil
	case rv == "true":
		return true, nil
	}
	return false, badRequest("reverse must be true or false")
}
