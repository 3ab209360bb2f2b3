package lsm

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/FastFilter/xorfilter"
	"github.com/zeebo/xxh3"
)

// Hash seeds. ShardOf and the filters hash the same key prefixes; with one
// hash, every key of a shard table would share the top bits the filter's
// slot choice also starts from. Distinct seeds make the two independent.
const (
	shardHashSeed  uint64 = 0x5348415244454459 // "SHARDEDY"
	filterHashSeed uint64 = 0x46494c5445524544 // "FILTERED"
)

// ShardOf returns the shard of a key prefix for a given number of shard
// bits: the top bits of the prefix's 64-bit xxh3 (seeded with a seed of its
// own). It is 0 when bits is 0; bits above 32 count as 32.
func ShardOf(prefix []byte, bits uint8) uint32 {
	if bits == 0 {
		return 0
	}
	if bits > 32 {
		bits = 32
	}
	return uint32(xxh3.HashSeed(prefix, shardHashSeed) >> (64 - bits))
}

// filterKey is the 64-bit key a prefix is entered in a table's filter as.
// seed is the table's FilterSeed mixed with filterHashSeed.
func filterKey(prefix []byte, seed uint64) uint64 {
	return xxh3.HashSeed(prefix, seed)
}

// tableFilterSeed is the xxh3 seed a table's filter keys use.
func tableFilterSeed(optSeed uint64) uint64 { return filterHashSeed ^ optSeed }

// Filter fingerprint widths. A binary fuse filter costs about 1.125 slots a
// key; its false-positive rate is 2^-bits. See DefaultFilterBits.
const (
	FilterBits8  = 8
	FilterBits16 = 16
)

// DefaultFilterBits is the fingerprint width BuildTable uses when
// TableOptions.FilterBits is 0: 16 bits (about 18.6 bits per distinct
// prefix, measured false-positive rate 0.0015%) rather than 8 (9.3 bits,
// 0.39%).
//
// Why: a false positive costs an object-store GET (tens of ms, a request
// fee), and the read path asks many filters per query. Round one asks
// every run's table about one target (~10-30 tables: at 8 bits, ~8% of
// queries would fetch one frame for nothing). Round two asks the
// revocation tree about every source found, often thousands per query,
// nearly all absent: 10 000 sources over 20 revocation tables would fetch
// ~780 frames for nothing at 8 bits, ~3 at 16. The price is local disk.
// Measured (TestMeasureFilters, synthetic workload, 1M-link table with
// 188K distinct targets; 512K-revocation table with 448K sources):
//
//	              meta B/record (8 bits)   (16 bits)   data B/record
//	backlinks     0.29                     0.50        14.1
//	revocations   1.01                     1.99         6.5
//
// For revocations the 16-bit filter is worth its size (it is what keeps
// round two off the network). For backlinks the 8-bit filter is: at scale
// the filters were the largest part of a node's local metadata, and a
// false positive in round one is one more GET in the same round, so the
// engine writes the links tree's compacted tables with 8 bits
// (filterBitsOf, in db.go; docs/scale.md has the figures at 10M and 100M
// links), and its tables in the fast form with a blocked filter
// (fastFilterBitsOf, FilterBlocked).
const DefaultFilterBits = FilterBits16

// filter is a binary fuse filter (8- or 16-bit fingerprints): decoded (f8
// or f16), or read in place from a mapped local meta (f8 over the mapping,
// or m16 for 16-bit fingerprints, which a mapping may hold at an odd
// offset); or a blocked filter (bl, filter_blocked.go), read in place.
type filter struct {
	seed uint64 // xxh3 seed of the keys
	f8   *xorfilter.BinaryFuse[uint8]
	f16  *xorfilter.BinaryFuse[uint16]
	m16  *fuse16
	bl   []byte // a blocked filter's blocks (FilterBlocked)
}

func (f *filter) contains(prefix []byte) bool {
	return f.containsKey(filterKey(prefix, f.seed))
}

func (f *filter) containsKey(k uint64) bool {
	switch {
	case f.f8 != nil:
		return f.f8.Contains(k)
	case f.f16 != nil:
		return f.f16.Contains(k)
	case f.bl != nil:
		return blockedContains(f.bl, k)
	}
	return f.m16.contains(k)
}

// fuse16 is a 16-bit binary fuse filter whose fingerprints stay in their
// encoded little-endian bytes (a mapped file): the probe is the binary fuse
// construction's (3-wise, segments of a power-of-two length), read from fps.
type fuse16 struct {
	seed                         uint64
	segLen, segMask, segCountLen uint32
	fps                          []byte // (segment count + 2) * segment length fingerprints, 2 bytes each
}

func (f *fuse16) contains(key uint64) bool {
	h := key + f.seed // the fuse filter's mix of the key with its seed
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	fp := uint16(h ^ h>>32)
	hi, _ := bits.Mul64(h, uint64(f.segCountLen))
	h0 := uint32(hi)
	h1 := h0 + f.segLen
	h2 := h1 + f.segLen
	h1 ^= uint32(h>>18) & f.segMask
	h2 ^= uint32(h) & f.segMask
	fp ^= binary.LittleEndian.Uint16(f.fps[2*h0:]) ^ binary.LittleEndian.Uint16(f.fps[2*h1:]) ^ binary.LittleEndian.Uint16(f.fps[2*h2:])
	return fp == 0
}

// Filter section layout (all little-endian), see the format in doc.go:
//
//	offset size field
//	0      8    fuse seed
//	8      4    segment length (a power of two, <= maxSegmentLength)
//	12     4    segment length mask (segment length - 1)
//	16     4    segment count (>= 1)
//	20     4    segment count length (segment count * segment length)
//	24     n*b  fingerprints: n = (segment count + 2) * segment length,
//	            b = 1 or 2 bytes (little-endian)
const filterHeaderSize = 24

// maxSegmentLength is the largest segment length the fuse library builds.
const maxSegmentLength = 1 << 18

// buildFilter builds the filter over keys (which it may reorder) and
// appends its section to dst.
func buildFilter(dst []byte, keys []uint64, bits int) ([]byte, error) {
	var b xorfilter.BinaryFuseBuilder
	switch bits {
	case FilterBits8:
		f, err := xorfilter.BuildBinaryFuse[uint8](&b, keys)
		if err != nil {
			return nil, fmt.Errorf("lsm: building filter: %w", err)
		}
		dst = appendFilterHeader(dst, f.Seed, f.SegmentLength, f.SegmentLengthMask, f.SegmentCount, f.SegmentCountLength)
		return append(dst, f.Fingerprints...), nil
	case FilterBits16:
		f, err := xorfilter.BuildBinaryFuse[uint16](&b, keys)
		if err != nil {
			return nil, fmt.Errorf("lsm: building filter: %w", err)
		}
		dst = appendFilterHeader(dst, f.Seed, f.SegmentLength, f.SegmentLengthMask, f.SegmentCount, f.SegmentCountLength)
		for _, fp := range f.Fingerprints {
			dst = binary.LittleEndian.AppendUint16(dst, fp)
		}
		return dst, nil
	case FilterBlocked:
		return appendBlockedFilter(dst, keys), nil
	}
	return nil, fmt.Errorf("lsm: filter bits %d not 8 or 16, nor the blocked kind", bits)
}

func appendFilterHeader(dst []byte, seed uint64, segLen, segMask, segCount, segCountLen uint32) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, seed)
	dst = binary.LittleEndian.AppendUint32(dst, segLen)
	dst = binary.LittleEndian.AppendUint32(dst, segMask)
	dst = binary.LittleEndian.AppendUint32(dst, segCount)
	return binary.LittleEndian.AppendUint32(dst, segCountLen)
}

// filterSectionSize returns the byte size of a filter section whose header
// is h, or an error if the header is inconsistent.
func filterSectionSize(h []byte, bits int) (uint64, error) {
	if bits == FilterBlocked {
		return blockedSectionSize(h)
	}
	if len(h) < filterHeaderSize {
		return 0, corruptf("filter header truncated")
	}
	segLen := binary.LittleEndian.Uint32(h[8:])
	segMask := binary.LittleEndian.Uint32(h[12:])
	segCount := binary.LittleEndian.Uint32(h[16:])
	segCountLen := binary.LittleEndian.Uint32(h[20:])
	if segLen == 0 || segLen&(segLen-1) != 0 || segLen > maxSegmentLength || segMask != segLen-1 {
		return 0, corruptf("filter segment length %d mask %#x", segLen, segMask)
	}
	if segCount == 0 || uint64(segCount)*uint64(segLen) != uint64(segCountLen) {
		return 0, corruptf("filter segment count %d length %d", segCount, segCountLen)
	}
	n := (uint64(segCount) + 2) * uint64(segLen)
	return filterHeaderSize + n*uint64(bits/8), nil
}

// mapFilter returns the filter of a section (whose size filterSectionSize
// has checked) that reads b in place: b must outlive the filter.
func mapFilter(b []byte, fbits int, keySeed uint64) *filter {
	if fbits == FilterBits8 || fbits == FilterBlocked {
		return decodeFilter(b, fbits, keySeed) // its fingerprints are b's bytes
	}
	return &filter{seed: keySeed, m16: &fuse16{
		seed:        binary.LittleEndian.Uint64(b[0:]),
		segLen:      binary.LittleEndian.Uint32(b[8:]),
		segMask:     binary.LittleEndian.Uint32(b[12:]),
		segCountLen: binary.LittleEndian.Uint32(b[20:]),
		fps:         b[filterHeaderSize:],
	}}
}

// decodeFilter decodes a filter section (whose size filterSectionSize has
// checked).
func decodeFilter(b []byte, bits int, keySeed uint64) *filter {
	f := &filter{seed: keySeed}
	if bits == FilterBlocked {
		f.bl = b[blockedHeaderSize:] // read in place, as the 8-bit fingerprints
		return f
	}
	seed := binary.LittleEndian.Uint64(b[0:])
	segLen := binary.LittleEndian.Uint32(b[8:])
	segMask := binary.LittleEndian.Uint32(b[12:])
	segCount := binary.LittleEndian.Uint32(b[16:])
	segCountLen := binary.LittleEndian.Uint32(b[20:])
	fps := b[filterHeaderSize:]
	switch bits {
	case FilterBits8:
		f.f8 = &xorfilter.BinaryFuse[uint8]{
			Seed: seed, SegmentLength: segLen, SegmentLengthMask: segMask,
			SegmentCount: segCount, SegmentCountLength: segCountLen,
			Fingerprints: fps,
		}
	default:
		v := make([]uint16, len(fps)/2)
		for i := range v {
			v[i] = binary.LittleEndian.Uint16(fps[2*i:])
		}
		f.f16 = &xorfilter.BinaryFuse[uint16]{
			Seed: seed, SegmentLength: segLen, SegmentLengthMask: segMask,
			SegmentCount: segCount, SegmentCountLength: segCountLen,
			Fingerprints: v,
		}
	}
	return f
}
