package lsm

import (
	"encoding/binary"
	"math"
)

// The revs of format version 8 (revChain).
//
// Up to version 7 a record's rev is predicted from the previous record's
// rev and time, unless its account's dictionary entry has a rev (version
// 3), when it is stored as its difference from that rev. A merged table
// holds both kinds of record side by side: the backfill's, whose revs are
// their accounts' (a repository written whole at one stamp), and the live
// tail's, stamped as they arrive, whose revs follow their time. A live
// record of a dictionary account paid its rev's whole distance from the
// account's backfill stamp (about five varint bytes), and a live record
// after a backfill record was predicted from a rev that does not follow
// time: at 1B links merged into one run, revs took 0.31 bytes a link,
// against 0.03 in the runs as written, where the live tail's records sit
// in tables of their own.
//
// Version 8 predicts along a chain: the records whose rev is not their
// account's (every record of an account without a rev in the dictionary,
// and the others whose rev differs from it). A chained record's rev is
// predicted from the previous chained record's rev and the time between
// them, at the frame's rate; the rate is measured along the chain too.
// The revs stream holds, per record:
//
//   - an account with a rev v in the dictionary: 0 when the record's rev
//     is v; else, with s = zigzag(rev - prediction) and e = zigzag(v -
//     prediction) (s != e): s+1 when s < e, s when s > e;
//   - any other record: zigzag(rev - prediction).
//
// The prediction is 0 for the frame's first chained record. Tables
// without dictionary revs (revocations; version 2) chain every record and
// store what version 7 stores, but for the rate, which version 7 measured
// within groups only.

// revChainCode is what a chained record of a dictionary account with rev
// v (v != its rev) stores, from its residual s and e = zigzag(v -
// prediction): the codes skip e, and 0 is v.
func revChainCode(s, e uint64) uint64 {
	if s < e {
		return s + 1
	}
	return s
}

// revChainResidual inverts revChainCode for a code c >= 1.
func revChainResidual(c, e uint64) uint64 {
	if c <= e {
		return c - 1
	}
	return c
}

// revStreamChain is revStream for version 8 (see above): it writes the
// revs stream, predicted at the rate (0: the previous chained rev) that
// gives the fewer bytes, and returns the rate.
func (e *colEncoder) revStreamChain(recs []byte, w int, dictRevs []uint64) uint64 {
	n := len(recs) / w
	rev := func(i int) uint64 { return binary.BigEndian.Uint64(recs[i*w+w-8:]) }
	// acct returns the record's account rev plus 1 (0: none).
	acct := func(i int) uint64 {
		if r := e.ranks[i]; dictRevs != nil && r > 0 {
			return dictRevs[r-1]
		}
		return 0
	}
	var sumD, sumRev float64
	var lastHi, lastRev uint64
	chained := false
	for i := range n {
		r := rev(i)
		if v := acct(i); v != 0 && r == v-1 {
			continue
		}
		if chained && e.hi[i] > lastHi {
			sumD += float64(e.hi[i] - lastHi)
			sumRev += float64(int64(r - lastRev))
		}
		lastHi, lastRev, chained = e.hi[i], r, true
	}
	rate := uint64(0)
	if sumD > 0 && sumRev > 0 {
		if r := sumRev / sumD * (1 << 32); r < math.MaxUint64/2 {
			rate = uint64(r)
		}
	}
	write := func(dst []byte, rate uint64) []byte {
		var lastHi, lastRev uint64
		chained := false
		for i := range n {
			r := rev(i)
			v := acct(i)
			if v != 0 && r == v-1 {
				dst = append(dst, 0)
				continue
			}
			var pred uint64
			if chained {
				pred = lastRev + scaleRate(e.hi[i]-lastHi, rate)
			}
			s := zigzag(r - pred)
			if v != 0 {
				s = revChainCode(s, zigzag(v-1-pred))
			}
			dst = binary.AppendUvarint(dst, s)
			lastHi, lastRev, chained = e.hi[i], r, true
		}
		return dst
	}
	e.streams[stRevs] = write(e.streams[stRevs], 0)
	if rate != 0 {
		e.revs = write(e.revs[:0], rate)
		if len(e.revs) < len(e.streams[stRevs]) {
			e.streams[stRevs], e.revs = e.revs, e.streams[stRevs]
		} else {
			rate = 0
		}
	}
	return rate
}
