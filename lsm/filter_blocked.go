package lsm

import (
	"encoding/binary"
	"math/bits"
)

// FilterBlocked is the filter kind of a split-block Bloom filter, stored
// where a binary fuse filter stores its fingerprint width (TableOptions.
// FilterBits, the meta's byte 15): from format version 12, the links
// tree's tables in the fast form (a flush's, a merge of flushes'), which
// live minutes before a merge replaces them. Built in one pass that sets
// eight bits in one 32-byte block a key, 11.5-12.5 ns a key where the
// fuse filter's peeling took 54-72 (BenchmarkBuildFilter, one core of this
// machine, 135k-920k keys), and asked in one cache line where the fuse
// filter reads three; at blockedBitsPerKey bits a key its false-positive
// rate is ~0.54% (the 8-bit fuse filter's 0.39%, at 9 bits a key). Tables
// merged into columns, which stay, keep the fuse filter's smaller bytes.
const FilterBlocked = 1

// blockedBitsPerKey is the blocked filter's size: blocks of 256 bits for
// every 256/blockedBitsPerKey keys (rounded up, at least one block).
const blockedBitsPerKey = 12

// blockedHeaderSize: the blocked filter section's header, before its
// blocks (all little-endian):
//
//	0  4     blocks K (>= 1)
//	4  4     zero
//	8  32*K  the blocks: eight 32-bit words each
const blockedHeaderSize = 8

// blockedSalts are the odd multipliers that pick a key's bit in each of a
// block's eight words (those of the split-block Bloom filters of Parquet
// and Impala, a published layout).
var blockedSalts = [8]uint32{0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31}

// blockedBlock is the block of key k among n: the high 64 bits of k*n.
func blockedBlock(k uint64, n int) int {
	hi, _ := bits.Mul64(k, uint64(n))
	return int(hi)
}

// appendBlockedFilter appends the blocked filter section over keys.
func appendBlockedFilter(dst []byte, keys []uint64) []byte {
	n := max((len(keys)*blockedBitsPerKey+255)/256, 1)
	words := make([]uint32, 8*n)
	for _, k := range keys {
		b := words[8*blockedBlock(k, n):][:8]
		x := uint32(k)
		for i := range b {
			b[i] |= 1 << ((x * blockedSalts[i]) >> 27)
		}
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	for _, w := range words {
		dst = binary.LittleEndian.AppendUint32(dst, w)
	}
	return dst
}

// blockedSectionSize returns the size of a blocked filter section whose
// header is h.
func blockedSectionSize(h []byte) (uint64, error) {
	if len(h) < blockedHeaderSize {
		return 0, corruptf("filter header truncated")
	}
	n := binary.LittleEndian.Uint32(h)
	if n == 0 || binary.LittleEndian.Uint32(h[4:]) != 0 {
		return 0, corruptf("blocked filter of %d blocks, reserved %x", n, h[4:8])
	}
	return blockedHeaderSize + 32*uint64(n), nil
}

// blockedContains reports whether key k may be in the blocked filter whose
// blocks are bl (read in place: a mapped meta's bytes).
func blockedContains(bl []byte, k uint64) bool {
	b := bl[32*blockedBlock(k, len(bl)/32):][:32]
	x := uint32(k)
	for i := range blockedSalts {
		if binary.LittleEndian.Uint32(b[4*i:])&(1<<((x*blockedSalts[i])>>27)) == 0 {
			return false
		}
	}
	return true
}
