package query

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/url"
	"slices"
	"strings"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Cursors are opaque: base64url of a version byte, flags (bit 0: reverse;
// bit 1: a DID cursor), the position after which the next page starts (the
// source RecordID and location of the last link returned, or the last DID)
// and 8 bytes of SHA-256 over all that and the query it pages (endpoint,
// target, source, dids). A corrupt cursor, or one of another query or
// endpoint, is refused with 400. A check, not a signature: a hand-built
// cursor that passes it only names a position in the same query.
const (
	cursorVersion    = 2
	cursorReverse    = 1
	cursorDIDs       = 2
	cursorCheckBytes = 8
	linkPosBytes     = link.RecordIDSize + 8
	didPosBytes      = 8
)

// cursorScope names the query a cursor pages: the endpoint, the encoded
// target and the source and did parameters as given (normalised).
func cursorScope(endpoint string, tgt link.RecordID, q url.Values) []byte {
	var t [link.RecordIDSize]byte
	tgt.Put(t[:])
	b := append([]byte(endpoint), 0)
	b = append(b, t[:]...)
	if src := q.Get("source"); src != "" {
		coll, path, _ := strings.Cut(src, ":")
		if !strings.HasPrefix(path, ".") {
			path = "." + path
		}
		b = append(b, coll+":"+path...)
	}
	dids := slices.Clone(q["did"])
	slices.Sort(dids)
	for _, d := range slices.Compact(dids) {
		b = append(append(b, 0), d...)
	}
	return b
}

func cursorCheck(head []byte, scope []byte) []byte {
	h := sha256.New()
	h.Write(head)
	h.Write(scope)
	return h.Sum(nil)[:cursorCheckBytes]
}

func encodeCursor(flags byte, pos []byte, scope []byte) *string {
	b := append([]byte{cursorVersion, flags}, pos...)
	b = append(b, cursorCheck(b, scope)...)
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

// decodeCursor returns the position of a cursor of this query, nil for
// none.
func decodeCursor(s string, flags byte, posBytes int, scope []byte) ([]byte, *apiError) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 2+posBytes+cursorCheckBytes || b[0] != cursorVersion {
		return nil, badRequest("cursor is not one this service returned")
	}
	if b[1]&cursorDIDs != flags&cursorDIDs {
		return nil, badRequest("cursor was returned by another endpoint")
	}
	if b[1] != flags {
		return nil, badRequest("cursor was returned for the other direction")
	}
	n := 2 + posBytes
	if !bytes.Equal(b[n:], cursorCheck(b[:n], scope)) {
		return nil, badRequest("cursor is corrupt, or was returned for another query (target, source or did)")
	}
	return b[2:n], nil
}

func encodeLinkCursor(c *lsm.Cursor, reverse bool, scope []byte) *string {
	if c == nil {
		return nil
	}
	var pos [linkPosBytes]byte
	c.Source.Put(pos[:link.RecordIDSize])
	binary.BigEndian.PutUint64(pos[link.RecordIDSize:], uint64(c.Location))
	var flags byte
	if reverse {
		flags = cursorReverse
	}
	return encodeCursor(flags, pos[:], scope)
}

func decodeLinkCursor(s string, reverse bool, scope []byte) (*lsm.Cursor, *apiError) {
	var flags byte
	if reverse {
		flags = cursorReverse
	}
	pos, err := decodeCursor(s, flags, linkPosBytes, scope)
	if pos == nil || err != nil {
		return nil, err
	}
	return &lsm.Cursor{Source: link.GetRecordID(pos[:link.RecordIDSize]), Location: link.Location(binary.BigEndian.Uint64(pos[link.RecordIDSize:]))}, nil
}

// noCursorHere answers a cursor given for a target or filter that matches
// nothing: no page of it ever returned one.
func noCursorHere(q url.Values) error {
	if q.Get("cursor") != "" {
		return badRequest("cursor is not one this service returned for this query")
	}
	return nil
}
