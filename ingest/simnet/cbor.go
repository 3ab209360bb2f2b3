package simnet

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"

	"github.com/ipfs/go-cid"
)

// The blocks simnet writes itself (MST nodes, commits, CAR headers, frame
// headers, PLC operations are left to atdata) are small fixed shapes, so a
// few DAG-CBOR primitives suffice. Maps are written with their keys in
// DAG-CBOR's canonical order (shorter keys first, then bytewise), which each
// caller spells out.

// dagCID is a CIDv1 of a DAG-CBOR block hashed with SHA-256: the only kind of
// CID an atproto repository holds (records, MST nodes, commits). It is
// stored as its digest.
type dagCID [32]byte

// cidPrefix is the binary CIDv1 prefix: version 1, codec dag-cbor (0x71),
// multihash sha2-256 (0x12), 32 bytes.
var cidPrefix = [4]byte{0x01, 0x71, 0x12, 0x20}

// sumCID returns the CID of the DAG-CBOR block b.
func sumCID(b []byte) dagCID { return dagCID(sha256.Sum256(b)) }

// Bytes returns the binary CID (36 bytes).
func (c dagCID) Bytes() []byte {
	out := make([]byte, 0, 36)
	out = append(out, cidPrefix[:]...)
	return append(out, c[:]...)
}

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// String returns the CID's canonical string form ("bafyrei…").
func (c dagCID) String() string {
	var bin [36]byte
	copy(bin[:], cidPrefix[:])
	copy(bin[4:], c[:])
	return "b" + b32.EncodeToString(bin[:])
}

// Cid converts c to a go-cid value.
func (c dagCID) Cid() cid.Cid {
	v, err := cid.Cast(c.Bytes())
	if err != nil {
		panic("simnet: bad CID: " + err.Error()) // cannot happen: the prefix is fixed
	}
	return v
}

// cbor appends DAG-CBOR items to a byte slice.
type cbor []byte

func (b cbor) head(major byte, n uint64) cbor {
	switch {
	case n < 24:
		return append(b, major<<5|byte(n))
	case n <= 0xff:
		return append(b, major<<5|24, byte(n))
	case n <= 0xffff:
		return append(b, major<<5|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, major<<5|26), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, major<<5|27), n)
	}
}

func (b cbor) uint(n uint64) cbor   { return b.head(0, n) }
func (b cbor) bytes(p []byte) cbor  { return append(b.head(2, uint64(len(p))), p...) }
func (b cbor) text(s string) cbor   { return append(b.head(3, uint64(len(s))), s...) }
func (b cbor) array(n int) cbor     { return b.head(4, uint64(n)) }
func (b cbor) mapHeader(n int) cbor { return b.head(5, uint64(n)) }
func (b cbor) null() cbor           { return append(b, 0xf6) }
func (b cbor) int(n int64) cbor {
	if n < 0 {
		return b.head(1, uint64(-1-n))
	}
	return b.head(0, uint64(n))
}

// link appends a CID link: tag 42 over the binary CID with a leading 0x00
// (the identity multibase prefix).
func (b cbor) link(c dagCID) cbor {
	b = append(b, 0xd8, 0x2a, 0x58, 37, 0x00)
	b = append(b, cidPrefix[:]...)
	return append(b, c[:]...)
}

// optLink appends a link or null.
func (b cbor) optLink(c *dagCID) cbor {
	if c == nil {
		return b.null()
	}
	return b.link(*c)
}
