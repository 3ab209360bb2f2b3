package bench

import (
	"fmt"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// peerNames renders a stream's links as the strings a store keyed by
// text holds (Constellation's keys, seed 002's columns): DIDs, NSIDs,
// paths, record keys, at-URIs and URLs.
//
// The stream encodes did:plc DIDs as PLC sequence numbers without the
// directory that maps them back, so a did:plc is rendered as "did:plc:"
// and 24 base32 characters derived from its number (the length and
// alphabet of a real one; distinct numbers give distinct strings);
// did:web DIDs, collections, paths and record keys render as written.
// URL targets are hashed in the links: their text comes from the
// stream's URL pool (a map built once, its bytes in the peers' RSS).
type peerNames struct {
	codec *link.Codec
	urls  map[link.RecordID]string
	buf   []byte
}

func newPeerNames(st *workload.Stream) *peerNames {
	n := &peerNames{codec: st.Codec, urls: map[link.RecordID]string{}}
	st.URLs(func(id link.RecordID, text string) { n.urls[id] = text })
	return n
}

const base32Sortable = "234567abcdefghijklmnopqrstuvwxyz"

// did renders a DID field.
func (n *peerNames) did(v uint64) (string, error) {
	if v&link.OutlinedBit != 0 {
		return n.codec.RenderDID(v)
	}
	var b [8 + 24]byte
	copy(b[:], "did:plc:")
	h := v
	for i := range 24 {
		if i%12 == 0 {
			h = splitmix(v + uint64(i))
		}
		b[8+i] = base32Sortable[h&31]
		h >>= 5
	}
	return string(b[:]), nil
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// record renders a record as its at-URI.
func (n *peerNames) record(r link.RecordID) (string, error) {
	did, err := n.did(r.DID)
	if err != nil {
		return "", err
	}
	col, err := n.codec.RenderCollection(r.Collection)
	if err != nil {
		return "", err
	}
	rkey, err := n.codec.RenderRKey(r.RKey)
	if err != nil {
		return "", err
	}
	return "at://" + did + "/" + col + "/" + rkey, nil
}

// target renders a link's target: an at-URI, a DID or a URL.
func (n *peerNames) target(t link.RecordID) (string, error) {
	switch {
	case t.IsRepo():
		return n.did(t.DID)
	case t.IsHashed():
		s, ok := n.urls[t]
		if !ok {
			return "", fmt.Errorf("hashed target %v is not a URL of the pool", t)
		}
		return s, nil
	default:
		return n.record(t)
	}
}

// textLink is a link as strings.
type textLink struct {
	target, collection, path, did, rkey string
}

func (n *peerNames) link(l *link.Backlink) (textLink, error) {
	var tl textLink
	var err error
	if tl.target, err = n.target(l.Target); err != nil {
		return tl, err
	}
	if tl.collection, err = n.codec.RenderCollection(l.Source.Collection); err != nil {
		return tl, err
	}
	if tl.path, err = n.codec.RenderLocation(l.Location, link.StyleConstellation); err != nil {
		return tl, err
	}
	if tl.did, err = n.did(l.Source.DID); err != nil {
		return tl, err
	}
	tl.rkey, err = n.codec.RenderRKey(l.Source.RKey)
	return tl, err
}

// sourceURI is the at-URI of the link's source record.
func (tl *textLink) sourceURI() string {
	return "at://" + tl.did + "/" + tl.collection + "/" + tl.rkey
}
