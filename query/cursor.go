package query

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/url"
	"slices"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Cursors are opaque: base64url of a version byte, the cursor's kind, its
// flags (bit 0: the page runs in descending source order), the position
// after which the next page starts, and 8 bytes of SHA-256 over all that
// and the query it pages (endpoint and every parameter that selects links:
// subjects, sources, dids, pathToOther, otherSubjects). A corrupt cursor,
// one of another query, endpoint, kind or direction, is refused with 400.
// A check, not a signature: a hand-built cursor that passes it only names
// a position in the same query.
//
// Positions, by kind:
//
//	links  source RecordID, location, target RecordID (56 bytes): the last
//	       link returned; links are ordered by (source, location, target)
//	dids   did field (8 bytes): the last DID returned
//	groups other target RecordID (24 bytes): the last group returned
//	items  source RecordID, location, other target RecordID (56 bytes)
const (
	cursorVersion    = 3
	cursorCheckBytes = 8
	cursorDescending = 1
)

type cursorKind byte

const (
	kindLinks cursorKind = iota
	kindDIDs
	kindGroups
	kindItems
)

func (k cursorKind) posBytes() int {
	switch k {
	case kindDIDs:
		return 8
	case kindGroups:
		return link.RecordIDSize
	default:
		return 2*link.RecordIDSize + 8
	}
}

// scope names the query a cursor pages.
type scope []byte

// newScope starts a scope for an endpoint; add the query's parameters.
func newScope(endpoint string) scope { return append(scope(endpoint), 0) }

// add appends a parameter's values, sorted and without repeats, so the
// same question asked in another order is the same query.
func (s scope) add(name string, values []string) scope {
	vs := slices.Clone(values)
	slices.Sort(vs)
	s = append(append(s, name...), 0)
	for _, v := range slices.Compact(vs) {
		s = append(append(s, v...), 0)
	}
	return append(s, 1)
}

func cursorCheck(head []byte, sc scope) []byte {
	h := sha256.New()
	h.Write(head)
	h.Write(sc)
	return h.Sum(nil)[:cursorCheckBytes]
}

func encodeCursor(kind cursorKind, flags byte, pos []byte, sc scope) *string {
	b := append([]byte{cursorVersion, byte(kind), flags}, pos...)
	b = append(b, cursorCheck(b, sc)...)
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

// decodeCursor returns the position of a cursor of this query, nil for
// none.
func decodeCursor(s string, kind cursorKind, flags byte, sc scope) ([]byte, *apiError) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 3 || b[0] != cursorVersion || len(b) != 3+cursorKind(b[1]).posBytes()+cursorCheckBytes {
		return nil, badRequest("cursor is not one this service returned")
	}
	n := 3 + cursorKind(b[1]).posBytes()
	if !bytes.Equal(b[n:], cursorCheck(b[:n], sc)) {
		return nil, badRequest("cursor is corrupt, or was returned for another query (endpoint, subjects, sources or filters)")
	}
	if cursorKind(b[1]) != kind {
		return nil, badRequest("cursor was returned by another endpoint")
	}
	if b[2] != flags {
		return nil, badRequest("cursor was returned for the other direction")
	}
	return b[3:n], nil
}

// linkPos is a position in an order of links: (source, location, target).
type linkPos struct {
	Source   link.RecordID
	Location link.Location
	Target   link.RecordID
}

func (p linkPos) compare(o linkPos) int {
	if c := p.Source.Compare(o.Source); c != 0 {
		return c
	}
	if p.Location != o.Location {
		if p.Location < o.Location {
			return -1
		}
		return 1
	}
	return p.Target.Compare(o.Target)
}

func posOf(l *link.Backlink) linkPos {
	return linkPos{Source: l.Source, Location: l.Location, Target: l.Target}
}

func (p linkPos) bytes() []byte {
	b := make([]byte, 2*link.RecordIDSize+8)
	p.Source.Put(b[:link.RecordIDSize])
	binary.BigEndian.PutUint64(b[link.RecordIDSize:], uint64(p.Location))
	p.Target.Put(b[link.RecordIDSize+8:])
	return b
}

func getLinkPos(b []byte) linkPos {
	return linkPos{
		Source:   link.GetRecordID(b[:link.RecordIDSize]),
		Location: link.Location(binary.BigEndian.Uint64(b[link.RecordIDSize:])),
		Target:   link.GetRecordID(b[link.RecordIDSize+8:]),
	}
}

func descFlags(desc bool) byte {
	if desc {
		return cursorDescending
	}
	return 0
}

func encodePosCursor(kind cursorKind, p *linkPos, desc bool, sc scope) *string {
	if p == nil {
		return nil
	}
	return encodeCursor(kind, descFlags(desc), p.bytes(), sc)
}

func decodePosCursor(s string, kind cursorKind, desc bool, sc scope) (*linkPos, *apiError) {
	b, err := decodeCursor(s, kind, descFlags(desc), sc)
	if b == nil || err != nil {
		return nil, err
	}
	p := getLinkPos(b)
	return &p, nil
}

// resumeAfter is the lsm cursor that pages one target's links from a
// position in the (source, location, target) order: links of tgt strictly
// after p in the page's direction. For the target of p itself, or one
// that sorts before it (after it, descending), that is strictly after p's
// (source, location); for the others, p's (source, location) itself is
// still ahead, so the lsm cursor is the position just before it.
func resumeAfter(p *linkPos, tgt link.RecordID, desc bool) *lsm.Cursor {
	if p == nil {
		return nil
	}
	if servedSide(tgt, p, desc) {
		return &lsm.Cursor{Source: p.Source, Location: p.Location}
	}
	return resumeAt(p, desc)
}

// servedSide reports whether a link to tgt at p's (source, location) is
// at or before p in the page's direction (desc): one the page that ended
// at p gave.
func servedSide(tgt link.RecordID, p *linkPos, desc bool) bool {
	c := tgt.Compare(p.Target)
	return (!desc && c <= 0) || (desc && c >= 0)
}

// resumeAt is the lsm cursor that pages a target's links from p's
// (source, location) itself, in the page's direction desc.
func resumeAt(p *linkPos, desc bool) *lsm.Cursor {
	if !desc {
		return predecessor(p.Source, p.Location)
	}
	return successor(p.Source, p.Location)
}

// predecessor and successor are the positions just before and after
// (source, location) in byte order, as lsm cursors; the ends of the order
// have none (nil: from the start).
func predecessor(s link.RecordID, l link.Location) *lsm.Cursor {
	if l > 0 {
		return &lsm.Cursor{Source: s, Location: l - 1}
	}
	b := s.Bytes()
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] > 0 {
			b[i]--
			return &lsm.Cursor{Source: link.GetRecordID(b[:]), Location: ^link.Location(0)}
		}
		b[i] = 0xff
	}
	return nil
}

func successor(s link.RecordID, l link.Location) *lsm.Cursor {
	if l < ^link.Location(0) {
		return &lsm.Cursor{Source: s, Location: l + 1}
	}
	b := s.Bytes()
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return &lsm.Cursor{Source: link.GetRecordID(b[:]), Location: 0}
		}
		b[i] = 0
	}
	return nil
}

// noCursorHere answers a cursor given for a query that matches nothing:
// no page of it ever returned one.
func noCursorHere(q url.Values) error {
	if q.Get("cursor") != "" {
		return badRequest("cursor is not one this service returned for this query")
	}
	return nil
}
