package query

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Many-to-many: the records that link to a subject from a source (join
// records: a list item linking a list, a starter pack an account) and what
// else each links to at another path (pathToOther). The other links of a
// record come from its forward entries (lsm.Reader.Forward); a record
// without any has at most one link, the one it was found by.

// Bounds of many-to-many work per request: every join record costs a
// lookup of its forward entries.
const (
	// M2MCountJoinsMax bounds the join records getManyToManyCounts groups
	// (past it: 400 QueryTooBig; a did filter narrows them).
	M2MCountJoinsMax = 100_000
)

// m2mScanMax bounds the join records one getManyToMany page examines: past
// it the page ends with what it found (maybe nothing) and a cursor after
// the last record examined, so a selective filter pages through a popular
// subject instead of running into the timeout. (A variable for tests.)
var m2mScanMax = 10_000

// hashedPrefix names an other subject the index keeps only as a hash (a
// URL or other URI, an at-uri with a handle): its text is not stored, so an
// answer names it by its hash unless the query named it in otherSubject.
// No target is of the scheme "hash" (link's otherScheme), so such a name
// is never also a target's.
const hashedPrefix = "hash:"

// m2mQuery is a parsed many-to-many question.
type m2mQuery struct {
	lq     *linkQuery
	pto    string    // pathToOther, with its leading dot
	other  uint64    // path ID of pathToOther
	others []subject // otherSubject filter, known ones
	known  bool      // something can match
}

func (s *Server) parseM2M(ctx context.Context, q url.Values, didParam string) (*m2mQuery, error) {
	if _, err := one(q, "source"); err != nil { // one source here (sources below parses it)
		return nil, err
	}
	raw, err := one(q, "subject")
	if err != nil {
		return nil, err
	}
	srcs, err := s.sources(ctx, q)
	if err != nil {
		return nil, err
	}
	sub, err := s.parseSubject(ctx, "subject", raw)
	if err != nil {
		return nil, err
	}
	ptoRaw, err := one(q, "pathToOther")
	if err != nil {
		return nil, err
	}
	switch {
	case !q.Has("pathToOther"):
		return nil, badRequest("pathToOther is required: a path, e.g. subject")
	case ptoRaw == "":
		ptoRaw = "." // as Constellation reads it: the dot it puts before a path, alone
	}
	pto, err := parsePath("pathToOther", ptoRaw)
	if err != nil {
		return nil, err
	}
	others, err := s.subjects(ctx, q, "otherSubject", false)
	if err != nil {
		return nil, err
	}
	dids, didsOK, err := s.didFilter(ctx, q, didParam)
	if err != nil {
		return nil, err
	}
	m := &m2mQuery{lq: &linkQuery{subjects: []subject{sub}, sources: srcs}, pto: pto}
	m.lq.known = byKey(m.lq.subjects)
	if srcs[0].known {
		m.lq.filter.Sources = []lsm.SourcePair{srcs[0].pair}
	}
	m.lq.filter.DIDs = dids
	otherID, otherKnown, err := s.pathID(ctx, "pathToOther", pto)
	if err != nil {
		return nil, err
	}
	m.other = otherID
	m.others = others
	m.known = srcs[0].known && didsOK && otherKnown
	m.lq.matchable = m.known
	return m, nil
}

func (m *m2mQuery) scope(endpoint string, q url.Values, didParam string) scope {
	var others []string
	for _, o := range m.others {
		others = append(others, o.norm)
	}
	return m.lq.scope(endpoint, q).add("pathToOther", []string{m.pto}).add("otherSubject", others).add(didParam, q[didParam])
}

// othersOf is what join record b's source links to at pathToOther (passing
// the otherSubject filter), sorted and without repeats: from its forward
// entries fw, or b itself when it has none.
func (m *m2mQuery) othersOf(b *link.Backlink, fw []link.Backlink) []link.RecordID {
	if len(fw) == 0 {
		fw = []link.Backlink{*b}
	}
	var out []link.RecordID
	for i := range fw {
		if fw[i].Location.PathID() != m.other {
			continue
		}
		t := fw[i].Target
		if len(m.others) > 0 && !slices.ContainsFunc(m.others, func(o subject) bool { return o.has(t) }) {
			continue
		}
		if n := m.named(t); n != nil {
			t = n.id // one name for both keys of a subject the query gave
		}
		out = append(out, t)
	}
	slices.SortFunc(out, link.RecordID.Compare)
	return slices.Compact(out)
}

// named is the subject the query gave (an otherSubject, or the subject
// itself) that key t is one of, or nil.
func (m *m2mQuery) named(t link.RecordID) *subject {
	for i := range m.others {
		if m.others[i].has(t) {
			return &m.others[i]
		}
	}
	if m.lq.subjects[0].has(t) {
		return &m.lq.subjects[0]
	}
	return nil
}

// hashKeyOf is the key a link to the target whose encoding is t would
// have been written under while a part of it was unknown (link.Codec
// TargetKey); false for a hashed t, or one that does not render. A failed
// read (link.ErrLookup: the bucket, or the query's time run out) is an
// error: a group missed here would split a target's counts in two.
func (s *Server) hashKeyOf(ctx context.Context, t link.RecordID) (link.RecordID, bool, error) {
	var name string
	var err error
	switch {
	case t.IsHashed():
		return link.RecordID{}, false, nil
	case t.IsRepo():
		name, err = s.codec(ctx).RenderDID(t.DID)
	default:
		name, err = s.codec(ctx).RenderRecord(t)
	}
	if err != nil {
		return link.RecordID{}, false, lookupErr(err)
	}
	tg, err := link.ParseTarget(name)
	if err != nil || tg.IsHashed() {
		return link.RecordID{}, false, nil
	}
	keys, err := s.codec(ctx).TargetKeys(&tg)
	if err != nil || len(keys) == 0 {
		return link.RecordID{}, false, lookupErr(err)
	}
	return keys[len(keys)-1], true, nil
}

// foldTwins drops from ts, one join record's other subjects (sorted, no
// repeats), a hashed key that is the twin of an encoded key in ts: the
// same subject, linked by the record's write while a part of it was
// unknown and again by a write after it was known (a backfill or a stream
// read again), so that the record lists it once. hashKeys remembers
// orderKey's answers within one request (a page examines up to m2mScanMax
// join records, most naming the same others).
func (s *Server) foldTwins(ctx context.Context, ts []link.RecordID, hashKeys map[link.RecordID]link.RecordID) ([]link.RecordID, error) {
	hashed := 0
	for _, t := range ts {
		if t.IsHashed() {
			hashed++
		}
	}
	if hashed == 0 || hashed == len(ts) {
		return ts, nil
	}
	var twins []link.RecordID
	for _, t := range ts {
		if t.IsHashed() {
			continue
		}
		h, err := s.orderKey(ctx, t, hashKeys)
		if err != nil {
			return nil, err
		}
		if h.IsHashed() {
			twins = append(twins, h)
		}
	}
	return slices.DeleteFunc(ts, func(t link.RecordID) bool { return t.IsHashed() && slices.Contains(twins, t) }), nil
}

// orderKey is the key the many-to-many answers order an other subject by
// and name in their cursors: its hash as a target of unknown parts
// (hashKeyOf), whichever key its links are stored under. A subject linked
// while a part of it was unknown is stored under its hash, and under its
// encoding once known; ordered by the key stored, a subject whose links
// moved from one to the other between two pages (a record written again,
// a node at another generation) would move across the cursor: skipped,
// or given twice. An encoded key without a hash orders as itself.
// hashKeys remembers the answers within one request.
func (s *Server) orderKey(ctx context.Context, t link.RecordID, hashKeys map[link.RecordID]link.RecordID) (link.RecordID, error) {
	if t.IsHashed() {
		return t, nil
	}
	if h, seen := hashKeys[t]; seen {
		return h, nil
	}
	h, ok, err := s.hashKeyOf(ctx, t)
	if err != nil {
		return link.RecordID{}, err
	}
	if !ok {
		h = t
	}
	hashKeys[t] = h
	return h, nil
}

// lookupErr is err if it is a failed read (link.ErrLookup), else nil.
func lookupErr(err error) error {
	if errors.Is(err, link.ErrLookup) {
		return err
	}
	return nil
}

// renderOther names an other subject: a DID, an at-uri, or (a hashed
// target) the otherSubject that named it, else the string the names tree
// holds for it (stored with the forward entries: link.Codec.NameTarget),
// else its hash (a link written before targets were named).
func (s *Server) renderOther(ctx context.Context, m *m2mQuery, t link.RecordID) (string, error) {
	switch {
	case t.IsRepo():
		return s.codec(ctx).RenderDID(t.DID)
	case t.IsHashed():
		if n := m.named(t); n != nil {
			return n.name, nil
		}
		name, ok, err := s.codec(ctx).RenderHashedTarget(t)
		if err != nil {
			return "", err
		}
		if ok {
			return name, nil
		}
		b := t.Bytes()
		return hashedPrefix + hex.EncodeToString(b[:8]) + hex.EncodeToString(b[16:]), nil
	}
	return s.codec(ctx).RenderRecord(t)
}

type m2mItem struct {
	LinkRecord   constellationRecord `json:"linkRecord"`
	OtherSubject string              `json:"otherSubject"`
}

type m2mOut struct {
	Items  []m2mItem `json:"items"`
	Cursor *string   `json:"cursor"`
}

// getManyToMany: GET /xrpc/blue.microcosm.links.getManyToMany?subject=&source=&pathToOther=&linkDid=&otherSubject=&limit=&cursor=
// One item per (join record, other subject), newest join record first,
// then by the other subject (orderKey).
func (s *Server) getManyToMany(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	m, err := s.parseM2M(ctx, q, "linkDid")
	if err != nil {
		return nil, err
	}
	limit, err := parseLimit(q)
	if err != nil {
		return nil, err
	}
	out := m2mOut{Items: []m2mItem{}}
	if !m.known {
		return out, noCursorHere(q)
	}
	sc := m.scope("getManyToMany", q, "linkDid")
	cur, aerr := decodePosCursor(q.Get("cursor"), kindItems, true, sc)
	if aerr != nil {
		return nil, aerr
	}
	sub := &m.lq.subjects[0]
	var after *lsm.Cursor
	if cur != nil {
		after = successor(cur.Source, cur.Location) // the cursor's join record again: it may have more items
	}
	type item struct {
		pos   linkPos // join record's source and location, and the other subject
		other link.RecordID
	}
	var items []item
	var stop *linkPos // set when the scan budget ends the page
	// A record's links to the subject come together (a backlink's order:
	// target, source, location), so its second is the one after its first.
	var prevSource link.RecordID
	hashKeys := map[link.RecordID]link.RecordID{}
	batch := min(limit+1, m2mScanMax)
	examined, scanned := 0, 0 // join records given, the subject's links read
	for len(items) <= limit {
		res, err := s.backlinksOf(ctx, v, sub, lsm.Query{After: after, Reverse: true, Limit: batch, Filter: m.lq.filter})
		if err != nil {
			return nil, err
		}
		if len(res.Links) == 0 {
			if res.Next != nil {
				// A page that read its most and found nothing that passed
				// the filter: the budget is spent, the next page goes on.
				stop = &linkPos{Source: res.Next.Source, Location: res.Next.Location, Target: maxRecordID}
			}
			break
		}
		srcs := make([]link.RecordID, len(res.Links))
		for i := range res.Links {
			srcs[i] = res.Links[i].Source
		}
		fw, _, err := s.Reader.Forward(ctx, v, srcs)
		if err != nil {
			return nil, err
		}
		for i := range res.Links {
			b := &res.Links[i]
			if b.Source == prevSource {
				// A record's second link to the subject at this path (a
				// strong reference's uri and a plain string): one join
				// record, its items given with its first.
				continue
			}
			prevSource = b.Source
			others, err := s.foldTwins(ctx, m.othersOf(b, fw[i]), hashKeys)
			if err != nil {
				return nil, err
			}
			first := len(items)
			for _, t := range others {
				o, err := s.orderKey(ctx, t, hashKeys)
				if err != nil {
					return nil, err
				}
				if cur != nil && b.Source == cur.Source && b.Location == cur.Location && o.Compare(cur.Target) <= 0 {
					continue // returned on the cursor's page
				}
				items = append(items, item{pos: linkPos{Source: b.Source, Location: b.Location, Target: o}, other: t})
			}
			slices.SortFunc(items[first:], func(a, b item) int { return a.pos.Target.Compare(b.pos.Target) })
		}
		examined += len(res.Links)
		scanned += res.Stats.Scanned // a filter that passes few links reads many: as many in all as one lsm page
		if res.Next == nil {
			break
		}
		if (examined >= m2mScanMax || scanned >= s.Reader.PageScanLimit()) && len(items) <= limit {
			// Past everything the read considered (its cursor: the last
			// link of a full page, the horizon of a short one), so that
			// the next page moves on even when this one gave only the
			// cursor's own record again.
			stop = &linkPos{Source: res.Next.Source, Location: res.Next.Location, Target: maxRecordID}
			break
		}
		after = res.Next
		batch = min(batch*4, lsm.LimitMax)
	}
	more := len(items) > limit
	if more {
		items = items[:limit]
	}
	for _, it := range items {
		rec, err := s.record(ctx, it.pos.Source)
		if err != nil {
			return nil, err
		}
		name, err := s.renderOther(ctx, m, it.other)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, m2mItem{LinkRecord: rec, OtherSubject: name})
	}
	switch {
	case more:
		out.Cursor = encodePosCursor(kindItems, &items[len(items)-1].pos, true, sc)
	case stop != nil:
		out.Cursor = encodePosCursor(kindItems, stop, true, sc) // past every item of the last record examined
	}
	return out, nil
}

// maxRecordID sorts after every record ID: a position past all of a join
// record's items.
var maxRecordID = link.RecordID{RKey: ^uint64(0), Collection: ^uint64(0), DID: ^uint64(0)}

type m2mCount struct {
	Subject  string `json:"subject"`
	Total    uint64 `json:"total"`
	Distinct uint64 `json:"distinct"`
}

type m2mCountsOut struct {
	CountsByOtherSubject []m2mCount `json:"counts_by_other_subject"`
	Cursor               *string    `json:"cursor"`
}

// getManyToManyCounts: GET /xrpc/blue.microcosm.links.getManyToManyCounts?subject=&source=&pathToOther=&did=&otherSubject=&limit=&cursor=
// Per other subject, the join records linking to it (total) and their
// distinct accounts (distinct), ordered by the other subject (orderKey);
// the cursor is the last group returned.
func (s *Server) getManyToManyCounts(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	m, err := s.parseM2M(ctx, q, "did")
	if err != nil {
		return nil, err
	}
	limit, err := parseLimit(q)
	if err != nil {
		return nil, err
	}
	out := m2mCountsOut{CountsByOtherSubject: []m2mCount{}}
	if !m.known {
		return out, noCursorHere(q)
	}
	sc := m.scope("getManyToManyCounts", q, "did")
	pos, aerr := decodeCursor(q.Get("cursor"), kindGroups, 0, sc)
	if aerr != nil {
		return nil, aerr
	}
	// A record linking the subject twice at the path (a strong
	// reference's uri and a plain string) is one join record; its links
	// come together. The bound is of join records: twice as many links.
	joins, err := s.allOf(ctx, v, &m.lq.subjects[0], m.lq.filter, 2*M2MCountJoinsMax)
	if err == nil {
		joins = slices.CompactFunc(joins, func(a, b link.Backlink) bool { return a.Source == b.Source })
		if len(joins) > M2MCountJoinsMax {
			err = errTooMany
		}
	}
	if errors.Is(err, errTooMany) {
		return nil, &apiError{http.StatusBadRequest, "QueryTooBig", "more than " + strconv.Itoa(M2MCountJoinsMax) +
			" records link to subject from source, more than getManyToManyCounts groups; narrow them with did, or page getManyToMany"}
	}
	if err != nil {
		return nil, err
	}
	srcs := make([]link.RecordID, len(joins))
	for i := range joins {
		srcs[i] = joins[i].Source
	}
	fw, _, err := s.Reader.Forward(ctx, v, srcs)
	if err != nil {
		return nil, err
	}
	type group struct {
		total uint64
		dids  map[uint64]struct{}
	}
	// An other subject linked both before and after it was known is under
	// two keys: its hash's group joins its encoding's (found by rendering
	// each encoded other subject and hashing it as a target of unknown
	// parts would be), one record counted once.
	others := make([][]link.RecordID, len(joins))
	canon := map[link.RecordID]link.RecordID{}
	hashKeys := map[link.RecordID]link.RecordID{} // orderKey's
	for i := range joins {
		others[i] = m.othersOf(&joins[i], fw[i])
		for _, t := range others[i] {
			if _, tried := hashKeys[t]; tried || t.IsHashed() {
				continue
			}
			h, err := s.orderKey(ctx, t, hashKeys)
			if err != nil {
				return nil, err
			}
			if h.IsHashed() {
				canon[h] = t
			}
		}
	}
	groups := map[link.RecordID]*group{}
	for i := range joins {
		ts := others[i]
		if len(canon) > 0 {
			for k, t := range ts {
				if c, ok := canon[t]; ok {
					ts[k] = c
				}
			}
			slices.SortFunc(ts, link.RecordID.Compare)
			ts = slices.Compact(ts)
		}
		for _, t := range ts {
			g := groups[t]
			if g == nil {
				g = &group{dids: map[uint64]struct{}{}}
				groups[t] = g
			}
			g.total++
			g.dids[joins[i].Source.DID] = struct{}{}
		}
	}
	// In orderKey's order, which a subject keeps when its links move from
	// its hash to its encoding between two pages.
	type keyed struct{ t, order link.RecordID }
	keys := make([]keyed, 0, len(groups))
	for t := range groups {
		o, err := s.orderKey(ctx, t, hashKeys)
		if err != nil {
			return nil, err
		}
		if pos == nil || o.Compare(link.GetRecordID(pos)) > 0 {
			keys = append(keys, keyed{t, o})
		}
	}
	slices.SortFunc(keys, func(a, b keyed) int { return a.order.Compare(b.order) })
	more := len(keys) > limit
	if more {
		keys = keys[:limit]
	}
	for _, k := range keys {
		name, err := s.renderOther(ctx, m, k.t)
		if err != nil {
			return nil, err
		}
		out.CountsByOtherSubject = append(out.CountsByOtherSubject, m2mCount{Subject: name, Total: groups[k.t].total, Distinct: uint64(len(groups[k.t].dids))})
	}
	if more {
		b := keys[len(keys)-1].order.Bytes()
		out.Cursor = encodeCursor(kindGroups, 0, b[:], sc)
	}
	return out, nil
}
