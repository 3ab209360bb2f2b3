package lsm

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"sync"

	"github.com/klauspost/compress/huff0"
)

// colEncoder holds one frame's columns while it is encoded; pooled.
type colEncoder struct {
	streams  [colStreams][]byte
	hi       []uint64 // time of each record
	clocks   []uint16 // clock id of each record (layouts with a clock column)
	first    []bool
	pairs    [][2]uint64 // (collection, location) of each record
	distinct [][2]uint64 // the distinct pairs, as first seen
	ranks    []uint32
	pidx     []uint16
	pt       pairTable
	order    []uint16 // the distinct pairs' numbers, in the pairs' order
	remap    []uint16 // a distinct pair's number to its place in that order
	huff     huff0.Scratch
	revs     []byte
	// Format version 9 (targetPlanes): each group's target rkey
	// difference (zigzag) and its DID's rank in the dictionary.
	tz    []uint64
	trank []uint32
	tlit  []byte // the DIDs of targets outside the dictionary
	// Version 8 on: each record's rev code at the rate tried and at the
	// one kept; the revs stream stored dense and sparse, to compare them
	// (version 9), and the stored form of the one kept (nil: not compared).
	rcodes, rcodes2 []uint64
	scratch         [2][]byte
	revsCoded       []byte
	// The time differences of the records that do not start a group,
	// and (version 10, magnitudes) each group's first time difference
	// (zigzag).
	dts, firsts []uint64
	// Streams stored raw whatever their bytes (mantissas: near-uniform
	// bits not aligned to bytes, which no Huffman code of bytes shrinks),
	// a bit a stream id.
	raw uint64
	// The magnitude form tried for a column that may stay in planes.
	mcls, mmant []byte
	// Each record's account's rev in the dictionary (dictRevs: 1 + the
	// rev, 0 for none).
	arev []uint64
}

var colEncoders = sync.Pool{New: func() any { return new(colEncoder) }}

// encodeColumns appends the columnar encoding of recs (sorted, whole
// records of layout l) to dst. ranks are the records' account ranks;
// dictRevs (format version 3; nil before) the dictionary's revs, by rank - 1;
// dictClocks (with a clock column) its accounts' clock ids, from which the
// clock ids of their records are predicted; tix (format version 9, target
// planes) finds a target's DID's rank in the dictionary.
func encodeColumns(dst, recs []byte, l colLayout, ranks []uint32, dictRevs []uint64, dictClocks []uint16, tix *rankIndex) []byte {
	e := colEncoders.Get().(*colEncoder)
	defer colEncoders.Put(e)
	n := len(recs) / l.w
	for i := range e.streams {
		e.streams[i] = e.streams[i][:0]
	}
	e.hi = slices.Grow(e.hi[:0], n)[:n]
	e.first = slices.Grow(e.first[:0], n)[:n]
	e.ranks = slices.Grow(e.ranks[:0], n)[:n]
	e.pidx = slices.Grow(e.pidx[:0], n)[:n]
	e.pairs = slices.Grow(e.pairs[:0], n)[:n]
	e.clocks = slices.Grow(e.clocks[:0], n)[:n]
	e.tz, e.trank, e.tlit = e.tz[:0], e.trank[:0], e.tlit[:0]
	e.dts, e.firsts = e.dts[:0], e.firsts[:0]
	e.raw = 0
	e.revsCoded = nil

	groups, maxD, maxRank, maxClock := e.fields(recs, l, ranks, dictClocks, tix)
	np := e.pairIndexes(n)
	var rate uint64
	if l.revChain {
		// The records' accounts' revs in the dictionary, looked up in a
		// pass of their own (as in fields).
		e.arev = slices.Grow(e.arev[:0], n)[:n]
		for i, r := range e.ranks[:n] {
			e.arev[i] = 0
			if dictRevs != nil && r > 0 {
				e.arev[i] = dictRevs[r-1]
			}
		}
		rate = e.revStreamChain(recs, l.w)
	} else {
		rate = e.revStream(recs, l.w, dictRevs)
	}

	// Planes (version 10: magnitudes).
	kt, kd, kp := bytesFor(maxD), bytesFor(uint64(maxRank)), bytesFor(uint64(np-1))
	at := stFixed
	if kt > 0 {
		for i := range n {
			if !e.first[i] {
				e.dts = append(e.dts, e.hi[i]-e.hi[i-1])
			}
		}
	}
	if l.magnitudes {
		var mag bool
		if at, mag = e.planesOrMagnitudes(at, kt, e.dts); mag {
			kt |= magTimes
		}
		at = magnitudeStreams(e, at, kd, e.ranks[:n])
	} else {
		splitPlanes(e.streams[at:at+kt], e.dts)
		at += kt
		splitPlanes(e.streams[at:at+kd], e.ranks[:n])
		at += kd
	}
	splitPlanes(e.streams[at:at+kp], e.pidx[:n])
	at += kp
	kc := 0
	if l.clockCol {
		kc = bytesFor(uint64(maxClock))
		// Planes that are mostly 0 cost at least a bit a record each
		// (huff0's shortest code): the nonzero entries alone are
		// smaller then.
		if sp, ok := sparseClocks(e.streams[at][:0], e.clocks[:n], kc*n/8); ok {
			e.streams[at] = sp
			kc = clockSparse
			at++
		} else {
			splitPlanes(e.streams[at:at+kc], e.clocks[:n])
			at += kc
		}
	}
	var kr, ka int
	if l.targetPlanes {
		var maxZ uint64
		var maxA uint32
		for g := range e.tz {
			maxZ, maxA = max(maxZ, e.tz[g]), max(maxA, e.trank[g])
		}
		kr, ka = bytesFor(maxZ), bytesFor(uint64(maxA))
		if l.magnitudes {
			var mag bool
			if at, mag = e.planesOrMagnitudes(at, kr, e.tz); mag {
				kr |= magTimes
			}
			at = magnitudeStreams(e, at, ka, e.trank)
		} else {
			splitPlanes(e.streams[at:at+kr], e.tz)
			at += kr
			splitPlanes(e.streams[at:at+ka], e.trank)
			at += ka
		}
		// The literal DIDs' stream (filled by fields) follows the
		// target columns.
		e.streams[at], e.tlit = e.tlit, e.streams[at][:0]
		at++
	}
	if l.magnitudes {
		// The first times of groups: varints in the first stream, or
		// their classes there and their mantissas last.
		vs := e.streams[stFirst][:0]
		for _, v := range e.firsts {
			vs = binary.AppendUvarint(vs, v)
		}
		e.mcls, e.mmant = magnitudes(e.mcls[:0], e.mmant[:0], e.firsts)
		if estStream(e.mcls)+len(e.mmant) < estStream(vs) {
			e.streams[stFirst], e.mcls = e.mcls, vs
			e.streams[at], e.mmant = e.mmant, e.streams[at]
			e.raw |= 1 << at
			kt |= magFirsts
			at++
		} else {
			e.streams[stFirst] = vs
		}
	}

	dst = binary.AppendUvarint(dst, uint64(groups))
	dst = append(dst, byte(kt), byte(kd), byte(kp))
	if l.clockCol {
		dst = append(dst, byte(kc))
	}
	if l.targetPlanes {
		dst = append(dst, byte(kr), byte(ka))
	}
	if l.revsSparse {
		sparse := uint64(0)
		if e.sparseRevs() {
			sparse = 1
		}
		rate = rate<<1 | sparse
	}
	dst = binary.AppendUvarint(dst, rate)
	for k := range at {
		if k == stRevs && e.revsCoded != nil {
			dst = append(dst, e.revsCoded...) // stored by sparseRevs
			continue
		}
		if e.raw&(1<<k) != 0 {
			dst = appendRawStream(dst, e.streams[k])
			continue
		}
		dst = e.appendStream(dst, e.streams[k])
	}
	return dst
}

// sparseClocks appends the sparse form of the clock planes' values to
// dst: varint m, the count of nonzero values, then for each of them in
// order varint(index - previous index - 1) (the first: its index) and
// varint(value). It reports false, and stops early, when that would take
// limit bytes or more, or there is no nonzero value.
func sparseClocks(dst []byte, vals []uint16, limit int) ([]byte, bool) {
	m := 0
	for _, v := range vals {
		if v != 0 {
			m++
		}
	}
	if m == 0 || 3*m >= limit { // each entry takes two bytes or more
		return dst, false
	}
	dst = binary.AppendUvarint(dst, uint64(m))
	prev := -1
	for i, v := range vals {
		if v == 0 {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(i-prev-1))
		dst = binary.AppendUvarint(dst, uint64(v))
		prev = i
		if len(dst) >= limit {
			return dst, false
		}
	}
	return dst, true
}

// magnitudeStreams writes vals, a column of width k bytes (0: all 0, no
// streams), into e's streams from at on in their magnitude form (two
// streams when k > 0, the mantissas stored raw), and returns the next
// stream's index.
func magnitudeStreams[T uint32 | uint64](e *colEncoder, at, k int, vals []T) int {
	if k == 0 {
		return at
	}
	e.streams[at], e.streams[at+1] = magnitudes(e.streams[at][:0], e.streams[at+1][:0], vals)
	e.raw |= 1 << (at + 1)
	return at + 2
}

// planesOrMagnitudes writes vals, a column of width k bytes (0: all 0, no
// streams) of TID times or their differences, into e's streams from at
// on, as k planes or in its magnitude form (two streams), whichever
// estStream puts smaller; it returns the next stream's index and whether
// it chose the magnitude form. A TID's microseconds below its
// millisecond are not uniform in real record keys (in the jetstream
// corpus 140 of 308 are 0, every one a post's key, made by the app; a
// PDS gives its records an offset that its clock id's other records
// share), a structure the planes' low bytes can keep (shown on synthetic
// keys) and the magnitude form's mantissas (stored raw) cannot; the scale
// workload draws them uniform, where the magnitude form is smaller.
func (e *colEncoder) planesOrMagnitudes(at, k int, vals []uint64) (int, bool) {
	if k == 0 {
		return at, false
	}
	splitPlanes(e.streams[at:at+k], vals)
	e.mcls, e.mmant = magnitudes(e.mcls[:0], e.mmant[:0], vals)
	planes := 0
	for _, p := range e.streams[at : at+k] {
		planes += estStream(p)
	}
	if planes <= estStream(e.mcls)+len(e.mmant) {
		return at + k, false
	}
	e.streams[at], e.mcls = e.mcls, e.streams[at]
	e.streams[at+1], e.mmant = e.mmant, e.streams[at+1]
	e.raw |= 1 << (at + 1)
	return at + 2, true
}

// estStream estimates the bytes appendStream stores b in: b's order-0
// entropy plus half a byte for each symbol up to the largest (huff0's
// table, a 4-bit weight each), or b's length if that is smaller. A
// quarter of a byte a distinct symbol (huffMayPay's estimate) made a
// frame's few hundred target rkey differences look smaller in planes,
// whose tables run to 255, in 2,404 of 3,166 frames of the merged 100M
// index where they were larger; this one errs in 102 (a scratch count).
func estStream(b []byte) int {
	if len(b) < 32 {
		return len(b)
	}
	bits, _, top := byteEntropy(b)
	return min(len(b), int(bits/8+float64(top+1)/2))
}

// splitPlanes writes byte k of every value into planes[k] (reusing its
// memory), for each of the planes.
func splitPlanes[T uint16 | uint32 | uint64](planes [][]byte, vals []T) {
	for k := range planes {
		p := planes[k][:0]
		for _, v := range vals {
			p = append(p, byte(v>>(8*k)))
		}
		planes[k] = p
	}
}

// fields splits the records into the fixed streams (targets, lengths,
// first times, literals) and each record's time, group start, account
// rank, (collection, location) pair and (with a clock column) clock id.
// It returns the number of groups, the largest time difference inside a
// group, the largest rank and the largest clock plane value: a record's
// clock id xor its account's in the dictionary (dictClocks, by rank - 1),
// 0 for a literal (which carries its clock id).
func (e *colEncoder) fields(recs []byte, l colLayout, ranks []uint32, dictClocks []uint16, tix *rankIndex) (groups int, maxD uint64, maxRank uint32, maxClock uint16) {
	w, s := l.w, l.src()
	n := len(recs) / w
	u := func(i, off int) uint64 { return binary.BigEndian.Uint64(recs[i*w+off:]) }
	var prevT [3]uint64
	groupStart := 0
	// Three passes of their own before the loop below: where each record
	// starts a group, the targets' DID ranks (in tix), and the clock ids
	// of the records' accounts in the dictionary. Their lookups depend on
	// nothing but the records, so the processor overlaps their cache
	// misses, where inside the loop below each waited for the one before
	// (a run's dictionary at 1B links, ~200k accounts, is several MB).
	if n > 0 {
		e.first[0] = true
	}
	for i := 1; i < n; i++ {
		e.first[i] = l.target && (u(i, 0) != u(i-1, 0) || u(i, 8) != u(i-1, 8) || u(i, 16) != u(i-1, 16))
	}
	switch {
	case l.targetPlanes && tix.packed != nil:
		for i := range n {
			if e.first[i] {
				e.trank = append(e.trank, tix.findPacked(account{did: u(i, 16)}))
			}
		}
	case l.targetPlanes:
		for i := range n {
			if e.first[i] {
				e.trank = append(e.trank, tix.findSlot(account{did: u(i, 16)}))
			}
		}
	}
	if l.clockCol {
		for i, r := range ranks[:n] {
			e.clocks[i] = 0
			if r > 0 {
				e.clocks[i] = dictClocks[r-1]
			}
		}
	}
	for i := range n {
		first := e.first[i]
		if first && l.target {
			if i > 0 {
				e.streams[stLengths] = binary.AppendUvarint(e.streams[stLengths], uint64(i-groupStart))
			}
			groupStart = i
			groups++
			t := [3]uint64{u(i, 0), u(i, 8), u(i, 16)}
			if l.targetPlanes {
				// The rkey difference and the DID's rank in planes,
				// the collection here, a DID outside the dictionary
				// in the target literals' stream.
				e.tz = append(e.tz, zigzag(t[0]-prevT[0]))
				r := e.trank[groups-1]
				e.streams[stTargets] = binary.AppendUvarint(e.streams[stTargets], t[1])
				if r == 0 {
					e.tlit = binary.AppendUvarint(e.tlit, t[2])
				}
			} else {
				e.streams[stTargets] = binary.AppendUvarint(e.streams[stTargets], zigzag(t[0]-prevT[0]))
				e.streams[stTargets] = binary.AppendUvarint(e.streams[stTargets], t[1])
				e.streams[stTargets] = binary.AppendUvarint(e.streams[stTargets], t[2])
			}
			prevT = t
		}
		rk := u(i, s)
		hi := rk >> clockBits
		e.hi[i] = hi
		var prevHi uint64
		if i > 0 {
			prevHi = e.hi[i-1]
		}
		switch {
		case first && l.magnitudes:
			e.firsts = append(e.firsts, zigzag(hi-prevHi))
		case first:
			e.streams[stFirst] = binary.AppendUvarint(e.streams[stFirst], zigzag(hi-prevHi))
		default:
			maxD = max(maxD, hi-prevHi)
		}
		a := account{did: u(i, s+16), clock: uint16(rk & (1<<clockBits - 1))}
		r := ranks[i]
		if l.clockCol {
			var c uint16 // a literal carries its clock id
			if r > 0 {
				c = a.clock ^ e.clocks[i] // the account's (above)
			}
			e.clocks[i] = c
			maxClock = max(maxClock, c)
		}
		e.ranks[i] = r
		maxRank = max(maxRank, r)
		if r == 0 {
			e.streams[stLiterals] = binary.AppendUvarint(e.streams[stLiterals], a.did)
			e.streams[stLiterals] = binary.AppendUvarint(e.streams[stLiterals], uint64(a.clock))
		}
		e.pairs[i] = [2]uint64{u(i, s+8), 0}
		if l.target {
			e.pairs[i][1] = u(i, s+24)
		}
	}
	if l.target {
		e.streams[stLengths] = binary.AppendUvarint(e.streams[stLengths], uint64(n-groupStart))
	}
	return groups, maxD, maxRank, maxClock
}

// pairIndexes writes the pairs stream (the distinct pairs, sorted) and
// each record's index into it (e.pidx); it returns the number of pairs.
func (e *colEncoder) pairIndexes(n int) int {
	// A record with its predecessor's pair takes its index; another
	// finds its pair in a small hash table of the frame's distinct pairs
	// (numbered as first seen), then the numbers are mapped to the pairs'
	// sorted order.
	e.pt.reset()
	e.distinct = e.distinct[:0]
	var k uint16
	for i := range n {
		if i == 0 || e.pairs[i] != e.pairs[i-1] {
			k = e.pt.index(e.pairs[i], &e.distinct)
		}
		e.pidx[i] = k
	}
	np := len(e.distinct)
	e.order = e.order[:0]
	for j := range np {
		e.order = append(e.order, uint16(j))
	}
	slices.SortFunc(e.order, func(a, b uint16) int { return comparePairs(e.distinct[a], e.distinct[b]) })
	e.remap = slices.Grow(e.remap[:0], np)[:np]
	e.streams[stPairs] = binary.AppendUvarint(e.streams[stPairs], uint64(np))
	for pos, id := range e.order {
		e.remap[id] = uint16(pos)
		p := e.distinct[id]
		e.streams[stPairs] = binary.AppendUvarint(e.streams[stPairs], p[0])
		e.streams[stPairs] = binary.AppendUvarint(e.streams[stPairs], p[1])
	}
	for i := range n {
		e.pidx[i] = e.remap[e.pidx[i]]
	}
	return np
}

// pairTable is an open-addressing hash table from a frame's distinct
// pairs to the numbers they were first seen as; reset empties it in
// constant time (slots of an earlier generation are empty).
type pairTable struct {
	slots []pairSlot
	gen   uint32
	n     int
}

type pairSlot struct {
	p   [2]uint64
	gen uint32
	id  uint16
}

func (t *pairTable) reset() {
	t.gen++
	t.n = 0
	if t.gen == 0 { // wrapped: clear the old generations
		clear(t.slots)
		t.gen = 1
	}
	if len(t.slots) == 0 {
		t.slots = make([]pairSlot, 64)
	}
}

// index returns p's number, giving it the next one (and appending p to
// *seen) if it is new.
func (t *pairTable) index(p [2]uint64, seen *[][2]uint64) uint16 {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for h := pairHash(p); ; h++ {
		s := &t.slots[h&mask]
		if s.gen != t.gen {
			*s = pairSlot{p: p, gen: t.gen, id: uint16(t.n)}
			t.n++
			*seen = append(*seen, p)
			return s.id
		}
		if s.p == p {
			return s.id
		}
	}
}

// pairHash is a pair's hash, for its first slot.
func pairHash(p [2]uint64) uint64 {
	return (p[0]*0x9e3779b97f4a7c15 ^ p[1]*0xc2b2ae3d27d4eb4f) >> 32
}

// grow doubles the table, keeping this generation's entries.
func (t *pairTable) grow() {
	old := t.slots
	t.slots = make([]pairSlot, 2*len(old))
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.gen != t.gen {
			continue
		}
		for h := pairHash(s.p); ; h++ {
			if d := &t.slots[h&mask]; d.gen != t.gen {
				*d = s
				break
			}
		}
	}
}

// revStream writes the revs stream of records of width w, predicted at
// the rate (0: plain delta) that gives the fewer bytes, and returns the
// rate. With dictRevs (version 3), a record of a dictionary account with
// a rev (dictRevs[rank-1] = 1 + that rev) stores its difference from the
// account's rev instead (0 for most), every other record its residual.
func (e *colEncoder) revStream(recs []byte, w int, dictRevs []uint64) uint64 {
	n := len(recs) / w
	u := func(i, off int) uint64 { return binary.BigEndian.Uint64(recs[i*w+off:]) }
	var sumD, sumRev float64
	for i := 1; i < n; i++ {
		if !e.first[i] && e.hi[i] > e.hi[i-1] {
			sumD += float64(e.hi[i] - e.hi[i-1])
			sumRev += float64(int64(u(i, w-8) - u(i-1, w-8)))
		}
	}
	rate := uint64(0)
	if sumD > 0 && sumRev > 0 {
		if r := sumRev / sumD * (1 << 32); r < math.MaxUint64/2 {
			rate = uint64(r)
		}
	}
	revStream := func(dst []byte, rate uint64) []byte {
		for i := range n {
			rev := u(i, w-8)
			var pred uint64
			if i > 0 {
				pred = u(i-1, w-8) + scaleRate(e.hi[i]-e.hi[i-1], rate)
			}
			if r := e.ranks[i]; dictRevs != nil && r > 0 && dictRevs[r-1] != 0 {
				dst = binary.AppendUvarint(dst, zigzag(rev-(dictRevs[r-1]-1)))
				continue
			}
			dst = binary.AppendUvarint(dst, zigzag(rev-pred))
		}
		return dst
	}
	e.streams[stRevs] = revStream(e.streams[stRevs], 0)
	if rate != 0 {
		e.revs = revStream(e.revs[:0], rate)
		if len(e.revs) < len(e.streams[stRevs]) {
			e.streams[stRevs], e.revs = e.revs, e.streams[stRevs]
		} else {
			rate = 0
		}
	}
	return rate
}

func comparePairs(a, b [2]uint64) int {
	if a[0] != b[0] {
		return cmp.Compare(a[0], b[0])
	}
	return cmp.Compare(a[1], b[1])
}

// appendStream appends one stream, entropy-coded if that is smaller.
func (e *colEncoder) appendStream(dst, b []byte) []byte {
	if len(b) > 0 {
		same := true
		for _, c := range b[1:] {
			if c != b[0] {
				same = false
				break
			}
		}
		if same {
			dst = append(dst, modeRepeat)
			dst = binary.AppendUvarint(dst, uint64(len(b)))
			return append(dst, b[0])
		}
	}
	if len(b) >= 32 && huffMayPay(b) {
		e.huff.Reuse = huff0.ReusePolicyNone
		mode := byte(modeHuff1X)
		var out []byte
		var err error
		if len(b) >= 1024 {
			mode = modeHuff4X
			out, _, err = huff0.Compress4X(b, &e.huff)
		} else {
			out, _, err = huff0.Compress1X(b, &e.huff)
		}
		if err == nil && len(out)+binary.MaxVarintLen32 < len(b) {
			dst = append(dst, mode)
			dst = binary.AppendUvarint(dst, uint64(len(b)))
			dst = binary.AppendUvarint(dst, uint64(len(out)))
			return append(dst, out...)
		}
	}
	return appendRawStream(dst, b)
}

// appendRawStream appends b as a stream stored as it is.
func appendRawStream(dst, b []byte) []byte {
	dst = append(dst, modeRaw)
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// huffMayPay reports whether entropy coding b could pay: whether a
// Huffman code of b's byte frequencies at the Shannon bound, plus a
// quarter of a byte a symbol for its table (huff0 writes a weight of four
// bits for each symbol up to the largest, compressed when that is
// smaller), could come under storing b raw. A stream of near-uniform
// bytes (the low bits of record keys and clock ids: two streams in five
// of a backfill's frames) fails, and skips building a table that would
// be thrown away. The table's quarter byte a symbol is an estimate, not
// a bound: on four tables of a 100M-link backfill the check skipped 46,700
// of the 54,000 streams huff0 failed to shrink, and one stream that it
// would have shrunk, by 4 bytes (the files differ by those 4 bytes).
func huffMayPay(b []byte) bool {
	bits, k, _ := byteEntropy(b)
	return bits/8+float64(k)/4 < float64(len(b)-binary.MaxVarintLen32)
}

// byteEntropy returns the order-0 entropy of b's bytes in bits (b's
// length times the entropy of its byte frequencies), how many distinct
// bytes it has and its largest byte.
func byteEntropy(b []byte) (bits float64, distinct, top int) {
	// Four histograms, added at the end: a run of one byte (most streams
	// have a common value) no longer waits for each count to be stored
	// before the next increments it.
	var h4 [4][256]uint32
	i := 0
	for ; i+4 <= len(b); i += 4 {
		h4[0][b[i]]++
		h4[1][b[i+1]]++
		h4[2][b[i+2]]++
		h4[3][b[i+3]]++
	}
	for ; i < len(b); i++ {
		h4[0][b[i]]++
	}
	bits = nLog2n(uint32(len(b)))
	for c := range 256 {
		if k := h4[0][c] + h4[1][c] + h4[2][c] + h4[3][c]; k > 0 {
			bits -= nLog2n(k)
			distinct++
			top = c
		}
	}
	return bits, distinct, top
}

// nLog2nTable holds n*log2(n) for the small counts huffMayPay meets most.
var nLog2nTable = func() (t [1024]float64) {
	for n := 2; n < len(t); n++ {
		t[n] = float64(n) * math.Log2(float64(n))
	}
	return t
}()

func nLog2n(n uint32) float64 {
	if n < uint32(len(nLog2nTable)) {
		return nLog2nTable[n]
	}
	return float64(n) * math.Log2(float64(n))
}

// colDecoder holds decoded streams; pooled.
