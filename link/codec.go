package link

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// PLC maps did:plc identifiers to the sequence number of their genesis
// operation in the PLC directory, and back. A nil PLC (the "plc: off" mode)
// outlines every DID.
type PLC interface {
	Seq(did string) (uint64, bool)
	DID(seq uint64) (string, bool)
}

// plcSeqMax is the largest sequence number that can be inline: bits 63 and
// 62 of the did field are tags.
const plcSeqMax = 1<<62 - 1

// ErrUnknown is returned by read-only encodings (queries) when a component
// has never been seen: no link can refer to it.
var ErrUnknown = errors.New("unknown to the index")

// ErrLookup wraps a failed read of the PLC map or the names tree (the
// bucket unreachable, a table gone, a timeout): the string's encoding is
// not known, which is neither "unknown" nor a bad string, so the writer
// must not skip the operation but fail it, to be applied again.
var ErrLookup = errors.New("lookup failed")

// Codec encodes strings into record fields and renders them back.
//
// Encoding rules, which must never change for data already written:
//   - a DID that has an outline keeps it (so a did:plc outlined before the
//     PLC directory knew it stays outlined); otherwise a did:plc the PLC map
//     knows is inline; otherwise, with Names, a DID of another method, or a
//     did:plc that is not well formed (never in the map), is named;
//     otherwise it is outlined;
//   - a record key that is a TID is inline; otherwise, one that has an
//     outline keeps it; otherwise, with Names, it is named (NamedBit);
//     without, it is outlined;
//   - collections and paths are outlined, and named past
//     CollectionOutlinesMax and PathOutlinesMax (with Names).
type Codec struct {
	Outlines Outlines
	PLC      PLC // nil: every DID is outlined
	// Names holds the strings of named record keys and DIDs; nil: they
	// are outlined (the tests' and benchmarks' codecs).
	Names Names
	// TargetDIDOutlines: a target's DID that has no encoding yet is
	// outlined, as a source's is (the PLC map off: every DID is an outline
	// anyway, and links to accounts render); otherwise such a target is
	// written under its hash (TargetKey). Also true when PLC is nil.
	TargetDIDOutlines bool
	// CollectionOutlinesMax bounds the collections outlined as
	// PathOutlinesMax does paths (0: none): a record may be in any
	// collection its author makes up.
	CollectionOutlinesMax int
	// PathOutlinesMax bounds the paths outlined (0: none): past it, with
	// Names set and Outlines counting (OutlineCounter), a new path is
	// named instead (Location). A path is any string a record's field
	// names make, so records of made-up field names could otherwise grow
	// every node's memory and every Raft snapshot without end.
	PathOutlinesMax int
}

// OutlineCounter is the Outlines that say how many strings of a kind
// they hold (committed and pending): the bound of Codec.PathOutlinesMax.
type OutlineCounter interface {
	Len(kind OutlineKind) int
}

// DID encodes a DID. With assign false, an unknown DID gives ErrUnknown.
func (c *Codec) DID(did string, assign bool) (uint64, error) {
	if id, ok := c.Outlines.Lookup(OutlineDID, did); ok {
		return OutlinedBit | id, nil
	}
	plc := IsPLCID(did) // a malformed did:plc is never in the map: named, as any other DID
	if c.PLC != nil && plc {
		var seq uint64
		var ok bool
		var err error
		if p, peek := c.PLC.(PLCPeek); peek && !assign {
			seq, ok, err = p.PeekSeq(did) // a target's: never waits
		} else {
			seq, ok, err = plcSeq(c.PLC, did)
		}
		if err != nil {
			return 0, fmt.Errorf("did %q: plc map: %w: %w", did, ErrLookup, err)
		}
		if ok && seq <= plcSeqMax {
			return seq, nil
		}
	}
	if c.Names != nil && !plc {
		return c.named(NameDID, did, assign)
	}
	return c.outline(OutlineDID, did, assign, OutlinedBit)
}

// RKey encodes a record key.
func (c *Codec) RKey(rkey string, assign bool) (uint64, error) {
	if v, ok := TIDValue(rkey); ok {
		return v, nil
	}
	if c.Names == nil {
		return c.outline(OutlineRKey, rkey, assign, OutlinedBit)
	}
	if id, ok := c.Outlines.Lookup(OutlineRKey, rkey); ok {
		return OutlinedBit | id, nil // outlined before names: kept
	}
	return c.named(NameRKey, rkey, assign)
}

// Named values: a record key that is not a TID can be anything its
// application picks (a feed's name, a hash of what the record is about),
// and anyone can make DIDs of methods other than did:plc (did:web, one a
// domain name), so there can be millions of either, and an outline of
// each in every node's memory and in every Raft snapshot would grow with
// the network. Instead the field holds OutlinedBit, NamedBit and 62 bits
// from the string's hash, and the string is stored under that value in
// the names tree (package lsm), in the bucket, written with the flush of
// the first link that uses it. The value is the first of
// SHA-256(domain + s)'s first 62 bits plus i, i = 0, 1, ..., that does not
// hold another string of its kind: the leader reads a value before it
// gives it out and names are never deleted, so every node finds a
// string's value by the same probe. (With 62 bits and millions of strings
// a probe past i = 0 is a one-in-billions event; the bound below is never
// met but by a broken names tree.) A did:plc the PLC map does not know
// (yet) stays outlined: the map may know it later, and an outline is
// looked up before the map, from memory, on every encoding of a did:plc.

// NamedBit tags an outlined rkey or did field (OutlinedBit set) whose
// value is a named string's, not an outline counter (which never reaches
// 2^62).
const NamedBit uint64 = 1 << 62

// namedProbes bounds the values a string is looked for at.
const namedProbes = 64

// nameHash is the first value a named string of kind is looked for at.
func nameHash(kind NameKind, s string) uint64 {
	domain := "eddy/did/v1\x00"
	switch kind {
	case NameRKey:
		domain = "eddy/rkey/v1\x00"
	case NamePath:
		domain = "eddy/path/v1\x00"
	case NameCollection:
		domain = "eddy/collection/v1\x00"
	}
	var buf [64]byte
	b := append(append(buf[:0], domain...), s...) // on the stack for the usual short strings
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

func (c *Codec) named(kind NameKind, s string, assign bool) (uint64, error) {
	return c.namedIn(kind, s, assign, OutlinedBit|NamedBit, NamedBit-1)
}

// namedIn is named with the value's tag bits and the hash's bits under
// mask: OutlinedBit and NamedBit over 62 bits for a record key or a DID,
// NamedBit alone for a path (a location's top bit is its StrongRefBit),
// NamedCollectionBit over 61 bits for a collection (whose field's bit 62
// marks a forward key).
func (c *Codec) namedIn(kind NameKind, s string, assign bool, tag, mask uint64) (uint64, error) {
	if s == "" || len(s) > OutlineBytesMax {
		return 0, fmt.Errorf("%s: length %d out of range", kind, len(s))
	}
	h := nameHash(kind, s)
	for i := uint64(0); i < namedProbes; i++ {
		v := tag | (h+i)&mask
		held, ok, err := c.Names.Name(kind, v)
		if err != nil {
			return 0, fmt.Errorf("%s %q: names: %w: %w", kind, s, ErrLookup, err)
		}
		if !ok {
			if !assign {
				return 0, fmt.Errorf("%s %q: %w", kind, s, ErrUnknown)
			}
			held = c.Names.AddName(kind, v, s)
		}
		if held == s {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s %q: %d values in a row hold other strings: the names tree is broken", kind, s, namedProbes)
}

// renderNamed returns the string a named value stands for.
func (c *Codec) renderNamed(kind NameKind, v uint64) (string, error) {
	if c.Names == nil {
		return "", fmt.Errorf("named %s %#x: no names: %w", kind, v, ErrOutlineMissing)
	}
	s, ok, err := c.Names.Name(kind, v)
	if err != nil {
		return "", fmt.Errorf("named %s %#x: %w: %w", kind, v, ErrLookup, err)
	}
	if !ok {
		return "", fmt.Errorf("named %s %#x: %w", kind, v, ErrOutlineMissing)
	}
	return s, nil
}

// Collection encodes a collection NSID: an outline counter (from
// CollectionFirst), or, for a collection first met once
// CollectionOutlinesMax collections were outlined, a named value
// (NamedCollectionBit and 61 bits of its hash; outlineOrName).
func (c *Codec) Collection(nsid string, assign bool) (uint64, error) {
	v, named, err := c.outlineOrName(OutlineCollection, NameCollection, nsid, assign, c.CollectionOutlinesMax, NamedCollectionBit, NamedCollectionBit-1)
	if err != nil || named {
		return v, err
	}
	return v + CollectionFirst - 1, nil
}

// Location encodes a link path (Constellation's convention): an outline
// counter, or, for a path first met once PathOutlinesMax paths were
// outlined, a named value (NamedBit and 62 bits of its hash;
// outlineOrName).
func (c *Codec) Location(path string, strongRef bool, assign bool) (Location, error) {
	v, _, err := c.outlineOrName(OutlinePath, NamePath, path, assign, c.PathOutlinesMax, NamedBit, NamedBit-1)
	if err != nil {
		return 0, err
	}
	return MakeLocation(v, strongRef), nil
}

// outlineOrName encodes s, of a kind that is outlined until max strings
// of it are (0: no bound) and named past them (tag and the hash's bits
// under mask, its string in the names tree), as a record's fields may
// hold made-up strings: its outline counter (named false), or the value
// it was named, or is named now. With Names nil it is outlined.
func (c *Codec) outlineOrName(kind OutlineKind, nk NameKind, s string, assign bool, max int, tag, mask uint64) (v uint64, named bool, err error) {
	if s == "" {
		return 0, false, fmt.Errorf("encode %s: empty", kind)
	}
	if id, ok := c.Outlines.Lookup(kind, s); ok {
		return id, false, nil
	}
	if c.Names != nil {
		// Named once the outlines were full, or to be named now.
		full := false
		if n, ok := c.Outlines.(OutlineCounter); ok && max > 0 {
			full = n.Len(kind) >= max
		}
		v, err := c.namedIn(nk, s, assign && full, tag, mask)
		if err == nil {
			return v, true, nil
		}
		if !errors.Is(err, ErrUnknown) || !assign {
			return 0, false, err
		}
	}
	id, err := c.outline(kind, s, assign, 0)
	return id, false, err
}

func (c *Codec) outline(kind OutlineKind, s string, assign bool, tag uint64) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("encode %s: empty", kind)
	}
	if id, ok := c.Outlines.Lookup(kind, s); ok {
		return tag | id, nil
	}
	if !assign {
		return 0, fmt.Errorf("%s %q: %w", kind, s, ErrUnknown)
	}
	id, err := c.Outlines.Assign(kind, s)
	if err != nil {
		return 0, err
	}
	return tag | id, nil
}

// Record encodes the RecordID of a record.
func (c *Codec) Record(did, collection, rkey string, assign bool) (RecordID, error) {
	d, err := c.DID(did, assign)
	if err != nil {
		return RecordID{}, err
	}
	col, err := c.Collection(collection, assign)
	if err != nil {
		return RecordID{}, err
	}
	rk, err := c.RKey(rkey, assign)
	if err != nil {
		return RecordID{}, err
	}
	return RecordID{RKey: rk, Collection: col, DID: d}, nil
}

// Targets: a link is written under one key of its target (TargetKey), and
// a query asks every key the target's links may be under (TargetKeys).
//
// A target never assigns an outline (but a DID with the PLC map off, below):
// a target is a string some record names, so a single record of a stranger
// could otherwise add hundreds of lasting entries to every node's memory and
// to every Raft snapshot (random DIDs, collections, record keys). A target
// the index can encode from what it already knows (outlines the sources
// assigned, the PLC map, TIDs) is written in that form, which renders back
// (many-to-many names other subjects by it); any other is written under its
// hash, as URLs are. Which form a target gets can change over time (the
// first like of a post may come before any record of its collection, the
// first follow of an account before the PLC map knows it), so a query reads
// both forms and merges them; the hashed key of a target that was always
// known is absent from every table's filter and costs a filter probe a
// run.
//
// With the PLC map off every DID is an outline anyway (the operator chose
// it: docs/operations.md), so a target's DID is outlined as before and its
// links to accounts render (TargetDIDOutlines, or a nil PLC).

// TargetKey is the key a link to t is written under: t's encoding if every
// part of it is known (with TargetDIDOutlines, once its DID is outlined),
// else t's hash. It never fails: a part that cannot be looked up (the PLC
// map unreadable) gives the hash too, which TargetKeys also asks.
func (c *Codec) TargetKey(t *Target) RecordID {
	if t.IsHashed() {
		return HashTarget(t.Norm)
	}
	if id, err := c.targetKnown(t, c.TargetDIDOutlines || c.PLC == nil); err == nil {
		return id
	}
	return HashTarget(t.hashName())
}

// TargetKeys returns the keys links to t may be under: its encoding when
// every part of it is known (first), and its hash. An error is a failed
// lookup (the PLC map unreadable), never an unknown part.
func (c *Codec) TargetKeys(t *Target) ([]RecordID, error) {
	if t.IsHashed() {
		return []RecordID{HashTarget(t.Norm)}, nil
	}
	h := HashTarget(t.hashName())
	id, err := c.targetKnown(t, false)
	switch {
	case err == nil:
		return []RecordID{id, h}, nil
	case errors.Is(err, ErrUnknown):
		return []RecordID{h}, nil
	}
	return nil, err
}

// targetKnown encodes a repository or record target from outlines that
// exist (assignDID: the DID's is assigned if missing) and the PLC map;
// ErrUnknown when a part has none.
func (c *Codec) targetKnown(t *Target, assignDID bool) (RecordID, error) {
	if t.IsRepo() {
		d, err := c.DID(t.DID, assignDID)
		if err != nil {
			return RecordID{}, err
		}
		return RepoID(d), nil
	}
	// The collection and record key first: a record target that ends up
	// hashed assigns no DID outline either.
	col, err := c.Collection(t.Collection, false)
	if err != nil {
		return RecordID{}, err
	}
	rk, err := c.RKey(t.RKey, false)
	if err != nil {
		return RecordID{}, err
	}
	d, err := c.DID(t.DID, assignDID)
	if err != nil {
		return RecordID{}, err
	}
	return RecordID{RKey: rk, Collection: col, DID: d}, nil
}

// NameTarget stores the string of t, a target whose key (TargetKey's) is
// its hash, in the names tree, so that an answer that meets the key where
// no question named it (many-to-many's other subjects, read from forward
// entries) can render it (RenderHashedTarget). The value is the key's
// rkey field (the hash's high half), or the next free one should another
// string hold it; a hash's string is never another's, so the probe stops
// at the first value whose string hashes to key. Nothing is stored for a
// key that is not a hash, or without names. An error wrapping ErrLookup
// is a failed read of the names tree.
func (c *Codec) NameTarget(t *Target, key RecordID) error {
	if key.Collection != CollectionHashed || c.Names == nil {
		return nil
	}
	s := t.Norm
	if !t.IsHashed() {
		s = t.hashName()
	}
	if HashTarget(s) != key {
		return fmt.Errorf("target %q: key %v is not its hash", s, key)
	}
	for i := range uint64(namedProbes) {
		v := key.RKey + i
		held, ok, err := c.Names.Name(NameTarget, v)
		if err != nil {
			return fmt.Errorf("target %q: names: %w: %w", s, ErrLookup, err)
		}
		if !ok {
			held = c.Names.AddName(NameTarget, v, s)
		}
		if held == s {
			return nil
		}
	}
	return fmt.Errorf("target %q: %d values in a row hold other strings: the names tree is broken", s, namedProbes)
}

// RenderHashedTarget returns the string NameTarget stored for a hashed
// target's key: a URL or other URI, an at-uri, or a DID; false if none was
// stored (the target was never named, or the codec has no names).
func (c *Codec) RenderHashedTarget(key RecordID) (string, bool, error) {
	if key.Collection != CollectionHashed || c.Names == nil {
		return "", false, nil
	}
	for i := range uint64(namedProbes) {
		s, ok, err := c.Names.Name(NameTarget, key.RKey+i)
		if err != nil {
			return "", false, fmt.Errorf("hashed target: names: %w: %w", ErrLookup, err)
		}
		if !ok {
			return "", false, nil
		}
		if HashTarget(s) == key {
			return s, true, nil
		}
	}
	return "", false, nil
}

// HashTarget is the RecordID of a target that is not a DID-authority record
// URI: collection CollectionHashed, and the first 128 bits of
// SHA-256("eddy/target/v1\x00" + norm) in rkey (high half) and did (low
// half). A cryptographic hash, so nobody can craft a URL whose links show up
// under another URL.
func HashTarget(norm string) RecordID {
	h := sha256.New()
	h.Write([]byte("eddy/target/v1\x00"))
	h.Write([]byte(norm))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return RecordID{
		RKey:       binary.BigEndian.Uint64(sum[0:8]),
		Collection: CollectionHashed,
		DID:        binary.BigEndian.Uint64(sum[8:16]),
	}
}

// TIDValue returns the integer of a TID record key, or false if rkey is not
// a TID. TIDs are canonical: the integer renders back to the same string.
func TIDValue(rkey string) (uint64, bool) {
	return tidValue(rkey)
}

// RenderDID turns a did field back into the DID string.
func (c *Codec) RenderDID(v uint64) (string, error) {
	if v&(OutlinedBit|NamedBit) == OutlinedBit|NamedBit {
		return c.renderNamed(NameDID, v)
	}
	if v&OutlinedBit != 0 {
		if s, ok := c.Outlines.Name(OutlineDID, v&^OutlinedBit); ok {
			return s, nil
		}
		return "", fmt.Errorf("did outline %d: %w", v&^OutlinedBit, ErrOutlineMissing)
	}
	if v&didReservedBit != 0 {
		return "", fmt.Errorf("did field %#x: reserved tag", v)
	}
	if c.PLC != nil {
		s, ok, err := plcDID(c.PLC, v)
		if err != nil {
			return "", fmt.Errorf("plc seq %d: %w: %w", v, ErrLookup, err)
		}
		if ok {
			return s, nil
		}
	}
	return "", fmt.Errorf("plc seq %d: %w", v, ErrOutlineMissing)
}

// RenderRKey turns an rkey field back into the record key.
func (c *Codec) RenderRKey(v uint64) (string, error) {
	if v&(OutlinedBit|NamedBit) == OutlinedBit|NamedBit {
		return c.renderNamed(NameRKey, v)
	}
	if v&OutlinedBit != 0 {
		if s, ok := c.Outlines.Name(OutlineRKey, v&^OutlinedBit); ok {
			return s, nil
		}
		return "", fmt.Errorf("rkey outline %d: %w", v&^OutlinedBit, ErrOutlineMissing)
	}
	return syntax.NewTIDFromInteger(v).String(), nil
}

// RenderCollection turns a collection field back into the NSID.
func (c *Codec) RenderCollection(v uint64) (string, error) {
	if v < CollectionFirst {
		return "", fmt.Errorf("collection %d is reserved", v)
	}
	if v&NamedCollectionBit != 0 {
		return c.renderNamed(NameCollection, v)
	}
	if s, ok := c.Outlines.Name(OutlineCollection, v-CollectionFirst+1); ok {
		return s, nil
	}
	return "", fmt.Errorf("collection outline %d: %w", v, ErrOutlineMissing)
}

// RenderRecord renders a record's at-uri.
func (c *Codec) RenderRecord(r RecordID) (string, error) {
	did, err := c.RenderDID(r.DID)
	if err != nil {
		return "", err
	}
	if r.IsRepo() {
		return "at://" + did, nil
	}
	col, err := c.RenderCollection(r.Collection)
	if err != nil {
		return "", err
	}
	rkey, err := c.RenderRKey(r.RKey)
	if err != nil {
		return "", err
	}
	return "at://" + did + "/" + col + "/" + rkey, nil
}

// PathStyle selects how a location is rendered.
type PathStyle uint8

const (
	// StyleConstellation: ".reply.parent.uri", array elements "[]" or
	// "[<$type>]".
	StyleConstellation PathStyle = iota
	// StyleDollar is seed 000's: "$" then the path, a strong reference
	// reported at its own path ("$.reply.parent").
	StyleDollar
)

// RenderLocation renders a location in a style.
func (c *Codec) RenderLocation(l Location, style PathStyle) (string, error) {
	if id := l.PathID(); id&NamedBit != 0 {
		p, err := c.renderNamed(NamePath, id)
		if err != nil {
			return "", err
		}
		return RenderPath(p, l.StrongRef(), style), nil
	}
	p, ok := c.Outlines.Name(OutlinePath, l.PathID())
	if !ok {
		return "", fmt.Errorf("path outline %d: %w", l.PathID(), ErrOutlineMissing)
	}
	return RenderPath(p, l.StrongRef(), style), nil
}

// RenderPath renders a path string in a style.
func RenderPath(path string, strongRef bool, style PathStyle) string {
	if style == StyleConstellation {
		return path
	}
	if strongRef {
		path = strings.TrimSuffix(path, ".uri")
	}
	return "$" + path
}
