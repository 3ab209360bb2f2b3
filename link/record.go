// Package link is Eddy's record model: the fixed-width records every tree of
// the index stores, the encodings that turn DIDs, record keys, collections,
// paths and link targets into those records, and the syntax of link targets.
//
// # RecordID (24 bytes)
//
// A RecordID names one atproto record, one whole repository, or one hashed
// non-record target. Its bytes are three big-endian u64 fields, and RecordIDs
// sort as their bytes:
//
//	offset size field
//	0      8    rkey        record key
//	8      8    collection  collection
//	16     8    did         repository DID
//
// rkey: a TID record key is inline as its 64-bit integer (the top bit of a
// TID is always 0); any other record key is named: bits 63 and 62
// (NamedBit) set, 62 bits from its hash below, the key stored under that
// value in the names tree (Codec.RKey); or, written before names,
// outlined: bit 63 set, the outline counter (>= 1) below.
//
// collection: an outline counter; values below CollectionFirst are reserved:
// CollectionRepo (0) names a whole repository (rkey 0; a bare-DID target, or
// a repository-wide revocation), CollectionHashed (1) names a target that is
// not a DID-authority record URI. Bit 62 (ForwardBit) tags a forward key
// (see Forward entries); no outline counter reaches it. A collection met
// once the outlines were full is named: bit 61 (NamedCollectionBit) set,
// 61 bits of its hash below.
//
// did: a did:plc known to the PLC directory is inline as the sequence number
// of its genesis operation (bits 63 and 62 clear); a DID of another method
// is named (bits 63 and 62 set, as a named rkey); any other DID is
// outlined: bit 63 set, the outline counter below. Bit 62 without bit 63
// is reserved.
//
// A hashed target (an https URL; an at-uri whose authority is a handle, or
// that names only a collection) has collection CollectionHashed and the 128
// bits of its hash split over rkey (high half) and did (low half); see
// HashTarget.
//
// # Backlink (64 bytes)
//
//	offset size field
//	0      24   target     RecordID linked to
//	24     24   source     RecordID of the linking record
//	48     8    location   path of the link inside the source record (see Location)
//	56     8    sourceRev  ingestion stamp at which the source record was written
//
// Backlinks sort as their bytes, so all links to one target are one
// contiguous range, ordered by source.
//
// # Revocation (32 bytes)
//
//	offset size field
//	0      24   source  RecordID of a record, or of a whole repository (CollectionRepo)
//	24     8    rev     ingestion stamp of the delete / update / reset
//
// A backlink is live when its sourceRev is not below the highest revocation
// rev of its source record, nor of its source repository. A delete at stamp
// s writes Revocation{record, s}; an update at stamp s writes the revocation
// and then the new links with sourceRev s, so the new links survive (s is
// not below s) while the old ones (stamped earlier) are revoked.
//
// # Forward entries
//
// The links tree also answers the other direction for records with several
// links ("what else does this record link to?", which Constellation's
// many-to-many queries need). A forward entry of a link S -> T at location
// L stamped rev is the Backlink
//
//	{Target: ForwardKey(S), Source: T, Location: L, SourceRev: rev}
//
// so all the forward entries of S are one contiguous range, keyed by S with
// ForwardBit set in its collection field. Real collection values are outline
// counters (far below 2^62), CollectionRepo is 0 and CollectionHashed 1, so
// a forward key never equals a real target, and no query of a real target
// meets a forward entry.
//
// A forward entry is live exactly when its backlink is: its liveness is
// judged by the revocations of S (the record whose links they are) and of
// S's repository, NOT by those of T, which is what its Source field holds;
// a reader turns it back into the backlink (ForwardSource) before judging.
// The writer adds forward entries only for records with two or more links,
// at the same stamp as the backlinks; a record with at most one live link
// has no live forward entry.
package link

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Record sizes in bytes.
const (
	RecordIDSize   = 24
	BacklinkSize   = 64
	RevocationSize = 32
)

// Compile-time checks that the sizes and layouts agree.
var (
	_ [RecordIDSize]struct{}   = [3 * 8]struct{}{}
	_ [BacklinkSize]struct{}   = [2*RecordIDSize + 2*8]struct{}{}
	_ [RevocationSize]struct{} = [RecordIDSize + 8]struct{}{}
)

// Reserved collection values.
const (
	// CollectionRepo names a whole repository: a bare-DID target, or a
	// repository-wide revocation. Its rkey is always 0.
	CollectionRepo uint64 = 0
	// CollectionHashed names a target that is not a DID-authority record
	// URI; its rkey and did fields hold a 128-bit hash of the target.
	CollectionHashed uint64 = 1
	// CollectionFirst is the first value handed to an interned collection.
	// 2..15 are reserved for future kinds of target.
	CollectionFirst uint64 = 16
)

// Tag bits of the did and rkey fields.
const (
	// OutlinedBit marks an outlined (interned) did or rkey.
	OutlinedBit uint64 = 1 << 63
	// didReservedBit is reserved (seed 000) for future enumerable DID methods.
	didReservedBit uint64 = 1 << 62
	// StrongRefBit marks a location whose link is the uri of a strong
	// reference {uri, cid}; see Location.
	StrongRefBit uint64 = 1 << 63
)

// RecordID names a record, a repository or a hashed target. See the package
// comment for its encoding.
type RecordID struct {
	RKey       uint64
	Collection uint64
	DID        uint64
}

// NamedCollectionBit tags a collection field whose value is a named
// collection's (Codec.Collection): 61 bits of its hash below it, above
// every outline counter, below ForwardBit.
const NamedCollectionBit uint64 = 1 << 61

// ForwardBit tags the collection field of a forward key: the target under
// which a record's forward entries are stored (see Forward entries in the
// package comment).
const ForwardBit uint64 = 1 << 62

// ForwardKey returns the target under which src's forward entries are
// stored: src with ForwardBit set in its collection field.
func ForwardKey(src RecordID) RecordID {
	return RecordID{RKey: src.RKey, Collection: src.Collection | ForwardBit, DID: src.DID}
}

// IsForward reports whether r is a forward key.
func (r RecordID) IsForward() bool { return r.Collection&ForwardBit != 0 }

// ForwardSource returns the record a forward key names (r with ForwardBit
// cleared).
func (r RecordID) ForwardSource() RecordID {
	return RecordID{RKey: r.RKey, Collection: r.Collection &^ ForwardBit, DID: r.DID}
}

// RepoID is the RecordID of a whole repository.
func RepoID(did uint64) RecordID { return RecordID{DID: did} }

// IsRepo reports whether r names a whole repository.
func (r RecordID) IsRepo() bool { return r.Collection == CollectionRepo && r.RKey == 0 }

// IsHashed reports whether r is a hashed (non-record) target.
func (r RecordID) IsHashed() bool { return r.Collection == CollectionHashed }

// Repo returns the RecordID of the repository holding r.
func (r RecordID) Repo() RecordID { return RecordID{DID: r.DID} }

// Put writes r's 24 bytes into b.
func (r RecordID) Put(b []byte) {
	_ = b[RecordIDSize-1]
	binary.BigEndian.PutUint64(b[0:8], r.RKey)
	binary.BigEndian.PutUint64(b[8:16], r.Collection)
	binary.BigEndian.PutUint64(b[16:24], r.DID)
}

// Bytes returns r's encoding.
func (r RecordID) Bytes() [RecordIDSize]byte {
	var b [RecordIDSize]byte
	r.Put(b[:])
	return b
}

// GetRecordID reads a RecordID from the first 24 bytes of b.
func GetRecordID(b []byte) RecordID {
	_ = b[RecordIDSize-1]
	return RecordID{
		RKey:       binary.BigEndian.Uint64(b[0:8]),
		Collection: binary.BigEndian.Uint64(b[8:16]),
		DID:        binary.BigEndian.Uint64(b[16:24]),
	}
}

// Compare orders RecordIDs as their encodings.
func (r RecordID) Compare(o RecordID) int {
	switch {
	case r.RKey != o.RKey:
		return cmpU64(r.RKey, o.RKey)
	case r.Collection != o.Collection:
		return cmpU64(r.Collection, o.Collection)
	default:
		return cmpU64(r.DID, o.DID)
	}
}

func (r RecordID) String() string {
	return fmt.Sprintf("%016x.%016x.%016x", r.RKey, r.Collection, r.DID)
}

func cmpU64(a, b uint64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// Backlink is one link: source links to target at location.
type Backlink struct {
	Target    RecordID
	Source    RecordID
	Location  Location
	SourceRev uint64
}

// Put writes l's 64 bytes into b.
func (l *Backlink) Put(b []byte) {
	_ = b[BacklinkSize-1]
	l.Target.Put(b[0:24])
	l.Source.Put(b[24:48])
	binary.BigEndian.PutUint64(b[48:56], uint64(l.Location))
	binary.BigEndian.PutUint64(b[56:64], l.SourceRev)
}

// GetBacklink reads a Backlink from the first 64 bytes of b.
func GetBacklink(b []byte) Backlink {
	_ = b[BacklinkSize-1]
	return Backlink{
		Target:    GetRecordID(b[0:24]),
		Source:    GetRecordID(b[24:48]),
		Location:  Location(binary.BigEndian.Uint64(b[48:56])),
		SourceRev: binary.BigEndian.Uint64(b[56:64]),
	}
}

// Compare orders Backlinks as their encodings.
func (l *Backlink) Compare(o *Backlink) int {
	if c := l.Target.Compare(o.Target); c != 0 {
		return c
	}
	if c := l.Source.Compare(o.Source); c != 0 {
		return c
	}
	if c := cmpU64(uint64(l.Location), uint64(o.Location)); c != 0 {
		return c
	}
	return cmpU64(l.SourceRev, o.SourceRev)
}

// Revocation revokes every link of Source stamped below Rev.
type Revocation struct {
	Source RecordID
	Rev    uint64
}

// Put writes v's 32 bytes into b.
func (v *Revocation) Put(b []byte) {
	_ = b[RevocationSize-1]
	v.Source.Put(b[0:24])
	binary.BigEndian.PutUint64(b[24:32], v.Rev)
}

// GetRevocation reads a Revocation from the first 32 bytes of b.
func GetRevocation(b []byte) Revocation {
	_ = b[RevocationSize-1]
	return Revocation{Source: GetRecordID(b[0:24]), Rev: binary.BigEndian.Uint64(b[24:32])}
}

// Live reports whether a link stamped rev survives the record-level and
// repository-level revocation thresholds (0 when there is none).
func Live(rev, recordThreshold, repoThreshold uint64) bool {
	return rev >= recordThreshold && rev >= repoThreshold
}

// CompareBytes orders two encoded records of the same width.
func CompareBytes(a, b []byte) int { return bytes.Compare(a, b) }

// Location is where in its source record a link sits: an outlined path
// (Constellation's convention, e.g. ".reply.parent.uri") in the low 63 bits,
// and StrongRefBit set when the link is the uri of a strong reference, so
// that seed 000's convention (the strong ref's own path, "$.reply.parent")
// renders exactly too.
type Location uint64

// PathID is the outline counter of the location's path.
func (l Location) PathID() uint64 { return uint64(l) &^ StrongRefBit }

// StrongRef reports whether the link is the uri of a strong reference.
func (l Location) StrongRef() bool { return uint64(l)&StrongRefBit != 0 }

// MakeLocation builds a Location from a path outline counter.
func MakeLocation(pathID uint64, strongRef bool) Location {
	if strongRef {
		return Location(pathID | StrongRefBit)
	}
	return Location(pathID)
}
