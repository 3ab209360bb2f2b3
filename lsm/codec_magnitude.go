package lsm

import (
	"encoding/binary"
	"math/bits"
)

// The magnitude form of a column (table format version 10, for the time
// differences, account ranks, target rkey differences, target DID ranks
// and first times of groups).
//
// A column of values is two streams: its classes, one byte a value, the
// value's bit length (0 for 0, 1 for 1, k for 2^(k-1) <= v < 2^k), which
// the frame entropy-codes as any stream; and its mantissas, the k-1 bits
// below each value's leading one (none for classes 0 and 1), packed least
// significant bit first from bit 0 of byte 0 on, the last byte's unused
// high bits 0, stored as they are. Byte planes spent a Huffman code on
// each byte of a value whatever its size: a time difference of 2^24 to
// 2^32 microseconds filled four planes, the low ones near uniform, and where
// the value's size crossed a byte the planes split its leading bits from
// the rest. Here the class carries the value's size, what entropy coding
// can shrink, and the bits below its leading one (near uniform in every
// column of the scale workload's index) are paid once, bit for bit. Where
// they are not (a real TID's microseconds below its millisecond:
// planesOrMagnitudes), a time column stays in planes. On the merged 100M-link
// backfill (TestMeasureTimeCoding) this took the time differences from
// 4.19 bytes a record to 4.00, the account ranks from 2.04 to 1.95, the
// first times of groups from 0.41 (as planes) to 0.395, the target rkey
// differences from 0.40 to 0.38 and the target DID ranks from 0.156 to
// 0.142. Conditioning the class on the group's previous class measured
// 0.016 a record better for the time differences, and was left out.

// magnitudes appends vals in their magnitude form to cls (the classes)
// and mant (the mantissas) and returns them.
func magnitudes[T uint32 | uint64](cls, mant []byte, vals []T) ([]byte, []byte) {
	var acc uint64 // bits not yet written, from bit 0
	var nacc uint  // how many (< 64)
	for _, v := range vals {
		c := bits.Len64(uint64(v))
		cls = append(cls, byte(c))
		if c < 2 {
			continue
		}
		k := uint(c - 1)
		m := uint64(v) &^ (1 << k)
		acc |= m << nacc
		if nacc+k < 64 {
			nacc += k
			continue
		}
		// acc is full; the bits of m that did not fit (nacc > 0 here,
		// since k < 64) start the next word.
		mant = binary.LittleEndian.AppendUint64(mant, acc)
		acc = m >> (64 - nacc)
		nacc = nacc + k - 64
	}
	for ; nacc > 0; nacc -= min(nacc, 8) {
		mant = append(mant, byte(acc))
		acc >>= 8
	}
	return cls, mant
}

// readMagnitudes returns the n values of the magnitude form (cls, mant)
// in w's memory if it is large enough; every class at most maxClass (<=
// 64), every mantissa bit consumed and the unused ones 0.
func readMagnitudes(w []uint64, n int, cls, mant []byte, maxClass int, what string) ([]uint64, error) {
	if len(cls) != n {
		return nil, colErr("%s: %d classes for %d values", what, len(cls), n)
	}
	total := 0
	for _, c := range cls {
		if int(c) > maxClass {
			return nil, colErr("%s: class %d above %d", what, c, maxClass)
		}
		if c >= 2 {
			total += int(c) - 1
		}
	}
	if len(mant) != (total+7)/8 {
		return nil, colErr("%s: %d mantissa bytes for %d bits", what, len(mant), total)
	}
	if r := total % 8; r != 0 && mant[len(mant)-1]>>r != 0 {
		return nil, colErr("%s: mantissa padding", what)
	}
	if cap(w) < n {
		w = make([]uint64, n)
	}
	w = w[:n]
	pos := uint(0)
	for i, c := range cls {
		if c < 2 {
			w[i] = uint64(c)
			continue
		}
		k := uint(c - 1)
		w[i] = 1<<k | mantissaBits(mant, pos, k)
		pos += k
	}
	return w, nil
}

// mantissaBits returns the k (1..63) bits of b from bit pos on (least
// significant first), which b holds.
func mantissaBits(b []byte, pos, k uint) uint64 {
	i, sh := pos>>3, pos&7
	var x uint64
	if i+8 <= uint(len(b)) {
		x = binary.LittleEndian.Uint64(b[i:]) >> sh
	} else {
		for j := uint(0); i+j < uint(len(b)); j++ {
			x |= uint64(b[i+j]) << (8 * j)
		}
		x >>= sh
	}
	if sh+k > 64 { // the value's last bits are in byte i+8
		x |= uint64(b[i+8]) << (64 - sh)
	}
	return x & (1<<k - 1)
}
