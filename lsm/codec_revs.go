package lsm

import (
	"encoding/binary"
	"math"
	"math/bits"
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
// against 0.03 in the runs as written at 100M, where the live tail's
// records sit in tables of their own.
//
// Version 8 predicts along a chain: the records whose rev is not their
// account's (every record of an account without a rev in the dictionary,
// a literal's included, and the others whose rev differs from it). A
// chained record's prediction is the previous chained record's rev plus
// sign(d) * floor(|d| * R / 2^32), d the signed difference (wrapping, mod
// 2^64) of the two records' times (rkey >> 10) and R the header's rate,
// chosen by the encoder: the rev differences over the time differences
// between chained records that follow one another in time, or 0 (plain
// deltas) when that gives the fewer varint bytes. The prediction is 0 for
// the frame's first chained record. The revs stream holds, per record, a
// varint code:
//
//   - an account with a rev v in the dictionary: 0 when the record's rev
//     is v; else, with s = zigzag(rev - prediction) and e = zigzag(v -
//     prediction) (s != e): s+1 when s < e, s when s > e;
//   - any other record: zigzag(rev - prediction).
//
// A frame none of whose accounts has a rev in the dictionary (a live
// tail's, most revocation tables') chains every record and stores what
// version 7 stores, but for the rate, which version 7 measured between
// records of one group only.
//
// In a merged table most records' code is 0, and a Huffman code spends at
// least a bit on each. From version 9 a frame may store its revs in a
// sparse form instead (the header's rate varint is R << 1 | 1; R << 1
// for the codes as above, in backlink and revocation tables alike): varint
// m (1..n), then m pairs of varints (index minus the previous pair's index
// minus 1, or the first's index; code >= 1): the nonzero codes, every
// other one 0. The encoder keeps the form that takes fewer bytes once
// entropy-coded.

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
func (e *colEncoder) revStreamChain(recs []byte, w int) uint64 {
	rate := e.revChainRate(recs, w)
	e.rcodes = e.revChainCodes(e.rcodes[:0], recs, w, 0)
	if rate != 0 {
		e.rcodes2 = e.revChainCodes(e.rcodes2[:0], recs, w, rate)
		if varintsLen(e.rcodes2) < varintsLen(e.rcodes) {
			e.rcodes, e.rcodes2 = e.rcodes2, e.rcodes
		} else {
			rate = 0
		}
	}
	p := e.streams[stRevs][:0]
	for _, c := range e.rcodes {
		p = binary.AppendUvarint(p, c)
	}
	e.streams[stRevs] = p
	return rate
}

// varintsLen is the bytes vals take as varints.
func varintsLen(vals []uint64) int {
	n := 0
	for _, v := range vals {
		n += (bits.Len64(v|1) + 6) / 7
	}
	return n
}

// sparseRevs replaces the revs stream by its sparse form (version 9) when
// that takes fewer bytes entropy-coded, and reports whether it did. When
// it compared the two, it keeps the stored form of the one it chose in
// e.revsCoded, so that the frame is not entropy-coded a third time.
func (e *colEncoder) sparseRevs() bool {
	n, m := len(e.rcodes), 0
	for _, c := range e.rcodes {
		if c != 0 {
			m++
		}
	}
	if m == 0 || 4*m > n {
		return false
	}
	sp := binary.AppendUvarint(e.revs[:0], uint64(m))
	prev := -1
	for i, c := range e.rcodes {
		if c != 0 {
			sp = binary.AppendUvarint(binary.AppendUvarint(sp, uint64(i-prev-1)), c)
			prev = i
		}
	}
	e.revs = sp
	e.scratch[0] = e.appendStream(e.scratch[0][:0], e.streams[stRevs])
	if e.scratch[1] = e.appendStream(e.scratch[1][:0], sp); len(e.scratch[1]) >= len(e.scratch[0]) {
		e.revsCoded = e.scratch[0]
		return false
	}
	e.streams[stRevs], e.revs = e.revs, e.streams[stRevs]
	e.revsCoded = e.scratch[1]
	return true
}

// readSparseRevs returns the n rev codes of a frame whose revs are in
// their sparse form b, in w's memory if it is large enough.
func readSparseRevs(w []uint64, n int, b []byte) ([]uint64, error) {
	return readSparse(w, n, b, math.MaxUint64, "rev codes")
}

// accountRev is record i's account's rev in the dictionary plus 1 (0:
// none), as the dictionary's revs hold it (e.arev, set by encodeColumns).
func (e *colEncoder) accountRev(i int) uint64 { return e.arev[i] }

// revChainRate is the rate measured along the chain: the sum of the rev
// differences over the sum of the time differences, between chained
// records that follow one another in time; 0 for none.
func (e *colEncoder) revChainRate(recs []byte, w int) uint64 {
	n := len(recs) / w
	var sumD, sumRev float64
	var lastHi, lastRev uint64
	chained := false
	for i := range n {
		r := binary.BigEndian.Uint64(recs[i*w+w-8:])
		if v := e.accountRev(i); v != 0 && r == v-1 {
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
	return rate
}

// revChainCodes appends each record's code (above) at the rate to codes.
func (e *colEncoder) revChainCodes(codes []uint64, recs []byte, w int, rate uint64) []uint64 {
	n := len(recs) / w
	var lastHi, lastRev uint64
	chained := false
	for i := range n {
		r := binary.BigEndian.Uint64(recs[i*w+w-8:])
		v := e.accountRev(i)
		if v != 0 && r == v-1 {
			codes = append(codes, 0)
			continue
		}
		var pred uint64
		if chained {
			pred = lastRev + scaleRate(e.hi[i]-lastHi, rate)
		}
		c := zigzag(r - pred)
		if v != 0 {
			c = revChainCode(c, zigzag(v-1-pred))
		}
		codes = append(codes, c)
		lastHi, lastRev, chained = e.hi[i], r, true
	}
	return codes
}
