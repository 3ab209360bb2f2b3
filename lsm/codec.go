package lsm

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

	"github.com/klauspost/compress/huff0"
	"github.com/klauspost/compress/zstd"
)

// The columnar frame codec (transformColumns, table format version 2).
//
// It knows the fields of the two trees' records and stores each field of a
// frame's records as its own column, each column entropy-coded on its own
// (huff0), instead of compressing the whole frame with zstd:
//
//	backlink (64 B): target 24 | source rkey 8 | collection 8 | did 8 |
//	                 location 8 | sourceRev 8
//	revocation (32 B): source rkey 8 | collection 8 | did 8 | rev 8
//
// What it exploits (see the measurements in frame.go):
//
//   - Records with the same target (backlinks) are one group; the target is
//     stored once per group.
//   - A TID rkey is microseconds << 10 | a 10-bit clock id. The microseconds
//     ("time", rkey >> 10) increase within a group (records sort by source):
//     the codec stores the difference with the previous record, as
//     fixed-width little-endian byte planes (byte 0 of every difference, then
//     byte 1, ...), so that each plane is entropy-coded on its own.
//   - The clock id belongs to the writer of the record (a repository's TID
//     generator), so it is stored with the DID: the pair (did, clock id) is
//     an account. The table's meta holds an account dictionary (the pairs
//     that occur at least twice in the table, most frequent first, at most
//     MaxDictEntries); a record stores the pair's rank (1-based; popular
//     accounts get small ranks) or 0 and the pair as a literal.
//   - (collection, location) pairs repeat: each frame lists its distinct
//     pairs, sorted, and a record stores an index.
//   - sourceRev follows the source's time (records are stamped as they
//     arrive): the codec predicts each rev from the previous record's rev
//     plus the time difference times a per-frame rate, and stores the
//     zigzag residual as a varint.
//
// Any record whose fields do not fit the model (a non-TID rkey, a DID
// outside the dictionary, revs in any order) still round-trips: the model
// only decides how many bytes it takes. A frame is therefore exactly its
// records, and DecodeFrame checks the result as for every other transform.
//
// # Frame layout (transformColumns)
//
// n is the frame's record count (from the meta). Varints are unsigned
// LEB128 (encoding/binary's Uvarint), zigzag as in frame.go.
//
//	field        size     meaning
//	groups G     varint   backlinks: the number of targets in the frame
//	                      (1..n); revocations: 0
//	KT           1 byte   time difference width in bytes (0..8)
//	KD           1 byte   account rank width in bytes (0..3)
//	KP           1 byte   pair index width in bytes (0..2)
//	rate R       varint   rev prediction rate, fixed point (2^32 = 1 rev a
//	                      microsecond)
//	streams      ...      6 + KT + KD + KP streams, in this order:
//
//	 0 targets   per group: varint zigzag(target rkey - previous group's
//	             target rkey) (the first: minus 0), varint collection,
//	             varint did. Empty for revocations.
//	 1 lengths   per group: varint record count (sum n). Empty for
//	             revocations.
//	 2 first     per group (revocations: for record 0 only): varint
//	             zigzag(time - previous record's time) (0 before record 0)
//	 3 literals  per record of rank 0, in order: varint did, varint clock
//	             id (< 1024)
//	 4 pairs     varint P (1..n), then P pairs, strictly increasing: varint
//	             collection, varint location (revocations: 0)
//	 5 revs      per record: varint zigzag(rev - prediction): the
//	             prediction is 0 for record 0, else the previous record's
//	             rev plus sign(d) * floor(|d| * R / 2^32), d the signed time
//	             difference with the previous record, wrapping (mod 2^64)
//	 6..         KT planes of the time differences of the records that do
//	             not start a group (n - G of them; revocations n - 1): plane
//	             k holds byte k of each difference; each difference is >= 0
//	 ...         KD planes of the account ranks (n of them): 0 is a literal,
//	             r >= 1 the dictionary entry r-1; KD = 0 means all 0
//	 ...         KP planes of the pair indexes (n of them, < P); KP = 0
//	             means all 0
//
// A stream is
//
//	mode       1 byte   0 raw, 1 one byte repeated, 2 huff0 1X, 3 huff0 4X
//	length     varint   decoded bytes L (<= colStreamMax(n))
//	raw:       L bytes
//	repeated:  1 byte (L copies of it)
//	huff0:     varint S, then S bytes: a huff0 table and 1X or 4X stream
//	           (klauspost/compress/huff0 v1.x, which is part of this format)
//
// Record i is rebuilt as: target (the group's), rkey = time << 10 | clock,
// collection and location from the pair, did and clock from the account,
// rev. Every stream must be consumed exactly; any inconsistency is
// ErrCorrupt (DecodeFrame checks the frame's checksum before).

// transformColumns is the columnar codec above (table format version 2,
// BacklinkFormat and RevocationFormat only).
const transformColumns frameTransform = 4

// MaxDictEntries bounds a table's account dictionary (memory: 10 bytes an
// entry in a decoded meta).
const MaxDictEntries = 1 << 20

// colLayout is the record layout of a format the columnar codec handles.
type colLayout struct {
	w      int
	target bool // backlink: a 24-byte target first, a location after the source
}

func columnsLayout(f Format) (colLayout, bool) {
	switch f {
	case BacklinkFormat:
		return colLayout{w: 64, target: true}, true
	case RevocationFormat:
		return colLayout{w: 32}, true
	}
	return colLayout{}, false
}

// src is the offset of the source rkey (collection +8, did +16).
func (l colLayout) src() int {
	if l.target {
		return 24
	}
	return 0
}

// colStreamMax bounds a decoded stream of a frame of n records.
func colStreamMax(n int) int { return 32*n + 64 }

const clockBits = 10

// account is a (did, clock id) pair.
type account struct {
	did   uint64
	clock uint16
}

// accountDict is a table's account dictionary: entry r-1 has rank r.
type accountDict struct {
	dids   []uint64
	clocks []uint16
}

func (d *accountDict) len() int {
	if d == nil {
		return 0
	}
	return len(d.dids)
}

// buildAccountDict counts the accounts of recs and returns the dictionary
// (the accounts seen at least twice, most frequent first, ties by value)
// and each record's rank (0 for accounts outside it).
func buildAccountDict(recs []byte, l colLayout) (*accountDict, []uint32) {
	n := len(recs) / l.w
	s := l.src()
	// An open-addressing table of the distinct accounts (dense ids in
	// order of first appearance), and each record's id.
	var t acctTable
	t.init(max(n/8, 1024))
	ids := make([]uint32, n)
	for i := range n {
		o := i * l.w
		a := account{did: binary.BigEndian.Uint64(recs[o+s+16:]), clock: uint16(binary.BigEndian.Uint64(recs[o+s:]) & (1<<clockBits - 1))}
		ids[i] = t.add(a)
	}
	order := make([]uint32, 0, len(t.accts)/2+1)
	for id, c := range t.counts {
		if c >= 2 {
			order = append(order, uint32(id))
		}
	}
	slices.SortFunc(order, func(x, y uint32) int {
		if cx, cy := t.counts[x], t.counts[y]; cx != cy {
			return cmp.Compare(cy, cx)
		}
		ax, ay := t.accts[x], t.accts[y]
		if ax.did != ay.did {
			return cmp.Compare(ax.did, ay.did)
		}
		return cmp.Compare(ax.clock, ay.clock)
	})
	if len(order) > MaxDictEntries {
		order = order[:MaxDictEntries]
	}
	d := &accountDict{dids: make([]uint64, len(order)), clocks: make([]uint16, len(order))}
	rankOf := make([]uint32, len(t.accts))
	for r, id := range order {
		d.dids[r], d.clocks[r] = t.accts[id].did, t.accts[id].clock
		rankOf[id] = uint32(r + 1)
	}
	for i, id := range ids {
		ids[i] = rankOf[id]
	}
	return d, ids
}

// acctTable counts distinct accounts: linear probing over slots holding
// dense ids + 1.
type acctTable struct {
	slots  []uint32
	accts  []account
	counts []uint32
	shift  uint
}

func (t *acctTable) init(capacity int) {
	size := 1 << bits.Len(uint(2*capacity-1))
	t.slots = make([]uint32, size)
	t.shift = uint(64 - bits.Len(uint(size-1)))
}

func (t *acctTable) hash(a account) uint64 {
	return ((a.did ^ uint64(a.clock)<<48) * 0x9e3779b97f4a7c15) >> t.shift
}

// add counts a and returns its id.
func (t *acctTable) add(a account) uint32 {
	mask := uint64(len(t.slots) - 1)
	for h := t.hash(a); ; h = (h + 1) & mask {
		v := t.slots[h]
		if v == 0 {
			break
		}
		if t.accts[v-1] == a {
			t.counts[v-1]++
			return v - 1
		}
	}
	id := uint32(len(t.accts))
	t.accts = append(t.accts, a)
	t.counts = append(t.counts, 1)
	if 2*len(t.accts) > len(t.slots) {
		t.init(len(t.slots))
		for i, b := range t.accts {
			t.place(b, uint32(i))
		}
	} else {
		t.place(a, id)
	}
	return id
}

func (t *acctTable) place(a account, id uint32) {
	mask := uint64(len(t.slots) - 1)
	h := t.hash(a)
	for t.slots[h] != 0 {
		h = (h + 1) & mask
	}
	t.slots[h] = id + 1
}

// appendDict appends the dictionary section of a version 2 meta:
//
//	0  4  entries E (0..MaxDictEntries)
//	4  4  raw length R
//	8  4  compressed length C
//	12 C  a zstd frame of R bytes: E varint dids, then E bytes (clock ids'
//	      low bytes), then E bytes (their high bytes, < 4); 3E <= R <=
//	      12E and R <= 64C + 64
func appendDict(dst []byte, d *accountDict, enc *zstd.Encoder) []byte {
	e := d.len()
	raw := make([]byte, 0, e*7)
	for i := range e {
		raw = binary.AppendUvarint(raw, d.dids[i])
	}
	for i := range e {
		raw = append(raw, byte(d.clocks[i]))
	}
	for i := range e {
		raw = append(raw, byte(d.clocks[i]>>8))
	}
	var z []byte
	if e > 0 {
		z = enc.EncodeAll(raw, nil)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(e))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(raw)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(z)))
	return append(dst, z...)
}

const dictHeaderSize = 12

// dictRawMax bounds a dictionary's decompressed bytes (12 per entry).
const dictRawMax = 12 * MaxDictEntries

// dictDecoder decompresses dictionaries: at most the raw length the
// section declares (WithDecodeAllCapLimit), which is at most dictRawMax.
var dictDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(dictRawMax),
		zstd.WithDecoderMaxWindow(dictRawMax),
		zstd.WithDecodeAllCapLimit(true),
	)
})

// decodeDict decodes a dictionary section (exactly b).
func decodeDict(b []byte) (*accountDict, error) {
	if len(b) < dictHeaderSize {
		return nil, corruptf("dictionary section of %d bytes", len(b))
	}
	e := uint64(binary.LittleEndian.Uint32(b))
	r := uint64(binary.LittleEndian.Uint32(b[4:]))
	c := uint64(binary.LittleEndian.Uint32(b[8:]))
	switch {
	case e > MaxDictEntries:
		return nil, corruptf("dictionary of %d entries", e)
	case c != uint64(len(b)-dictHeaderSize):
		return nil, corruptf("dictionary section %d bytes, its header says %d", len(b)-dictHeaderSize, c)
	case r < 3*e || r > 12*e:
		return nil, corruptf("dictionary of %d entries in %d bytes", e, r)
	case e == 0 && c != 0:
		return nil, corruptf("empty dictionary of %d bytes", c)
	case r > 64*c+64:
		// Far past what distinct entries compress to; the bound keeps
		// DecodeMeta's allocations proportional to the meta's size.
		return nil, corruptf("dictionary of %d bytes claims %d decompressed", c, r)
	}
	d := &accountDict{}
	if e == 0 {
		return d, nil
	}
	dec, err := dictDecoder()
	if err != nil {
		return nil, err
	}
	raw, err := dec.DecodeAll(b[dictHeaderSize:], make([]byte, 0, r))
	if err != nil || uint64(len(raw)) != r {
		return nil, corruptf("dictionary does not decompress to %d bytes (%v)", r, err)
	}
	d.dids = make([]uint64, e)
	d.clocks = make([]uint16, e)
	at := 0
	for i := range d.dids {
		v, k := binary.Uvarint(raw[at:])
		if k <= 0 {
			return nil, corruptf("dictionary entry %d", i)
		}
		d.dids[i] = v
		at += k
	}
	if uint64(len(raw)-at) != 2*e {
		return nil, corruptf("dictionary clock ids: %d bytes for %d entries", len(raw)-at, e)
	}
	lo, hi := raw[at:at+int(e)], raw[at+int(e):]
	for i := range d.clocks {
		c := uint16(lo[i]) | uint16(hi[i])<<8
		if c >= 1<<clockBits {
			return nil, corruptf("dictionary entry %d clock id %d", i, c)
		}
		d.clocks[i] = c
	}
	return d, nil
}

// Stream ids (fixed order; the planes follow).
const (
	stTargets = iota
	stLengths
	stFirst
	stLiterals
	stPairs
	stRevs
	stFixed
)

// colEncoder holds one frame's columns while it is encoded; pooled.
type colEncoder struct {
	streams [stFixed + 8 + 3 + 2][]byte
	hi      []uint64 // time of each record
	first   []bool
	pairs   [][2]uint64 // (collection, location) of each record
	sorted  [][2]uint64 // distinct pairs
	ranks   []uint32
	pidx    []uint16
	huff    huff0.Scratch
	revs    []byte
}

var colEncoders = sync.Pool{New: func() any { return new(colEncoder) }}

func bytesFor(v uint64) int { return (bits.Len64(v) + 7) / 8 }

// scaleRate returns sign(d) * floor(|d| * r / 2^32), wrapping.
func scaleRate(d uint64, r uint64) uint64 {
	if r == 0 {
		return 0
	}
	neg := int64(d) < 0
	if neg {
		d = -d
	}
	h, l := bits.Mul64(d, r)
	v := h<<32 | l>>32
	if neg {
		return -v
	}
	return v
}

// encodeColumns appends the columnar encoding of recs (sorted, whole
// records of layout l) to dst. ranks are the records' account ranks.
func encodeColumns(dst, recs []byte, l colLayout, ranks []uint32) []byte {
	e := colEncoders.Get().(*colEncoder)
	defer colEncoders.Put(e)
	w, s := l.w, l.src()
	n := len(recs) / w
	for i := range e.streams {
		e.streams[i] = e.streams[i][:0]
	}
	e.hi = slices.Grow(e.hi[:0], n)[:n]
	e.first = slices.Grow(e.first[:0], n)[:n]
	e.ranks = slices.Grow(e.ranks[:0], n)[:n]
	e.pidx = slices.Grow(e.pidx[:0], n)[:n]
	e.pairs = slices.Grow(e.pairs[:0], n)[:n]
	u := func(i, off int) uint64 { return binary.BigEndian.Uint64(recs[i*w+off:]) }

	// Groups, time, accounts, pairs.
	groups := 0
	var prevT [3]uint64
	groupStart := 0
	var maxD uint64
	var maxRank uint32
	for i := range n {
		first := i == 0
		if l.target && i > 0 && string(recs[i*w:i*w+24]) != string(recs[(i-1)*w:(i-1)*w+24]) {
			first = true
		}
		e.first[i] = first
		if first && l.target {
			if i > 0 {
				e.streams[stLengths] = binary.AppendUvarint(e.streams[stLengths], uint64(i-groupStart))
			}
			groupStart = i
			groups++
			t := [3]uint64{u(i, 0), u(i, 8), u(i, 16)}
			e.streams[stTargets] = binary.AppendUvarint(e.streams[stTargets], zigzag(t[0]-prevT[0]))
			e.streams[stTargets] = binary.AppendUvarint(e.streams[stTargets], t[1])
			e.streams[stTargets] = binary.AppendUvarint(e.streams[stTargets], t[2])
			prevT = t
		}
		rk := u(i, s)
		hi := rk >> clockBits
		e.hi[i] = hi
		var prevHi uint64
		if i > 0 {
			prevHi = e.hi[i-1]
		}
		if first {
			e.streams[stFirst] = binary.AppendUvarint(e.streams[stFirst], zigzag(hi-prevHi))
		} else {
			maxD = max(maxD, hi-prevHi)
		}
		a := account{did: u(i, s+16), clock: uint16(rk & (1<<clockBits - 1))}
		r := ranks[i]
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

	// Pairs: sorted distinct, then an index per record.
	e.sorted = append(e.sorted[:0], e.pairs...)
	slices.SortFunc(e.sorted, comparePairs)
	uniq := slices.Compact(e.sorted)
	np := len(uniq)
	e.streams[stPairs] = binary.AppendUvarint(e.streams[stPairs], uint64(np))
	for _, p := range uniq {
		e.streams[stPairs] = binary.AppendUvarint(e.streams[stPairs], p[0])
		e.streams[stPairs] = binary.AppendUvarint(e.streams[stPairs], p[1])
	}
	for i := range n {
		k := 0
		if np > 1 {
			k, _ = slices.BinarySearchFunc(uniq, e.pairs[i], comparePairs)
		}
		e.pidx[i] = uint16(k)
	}

	// Revs: choose the rate (0: plain delta) that gives the fewer bytes.
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

	// Planes.
	kt, kd, kp := bytesFor(maxD), bytesFor(uint64(maxRank)), bytesFor(uint64(np-1))
	at := stFixed
	for k := range kt {
		p := e.streams[at+k][:0]
		for i := range n {
			if !e.first[i] {
				p = append(p, byte((e.hi[i]-e.hi[i-1])>>(8*k)))
			}
		}
		e.streams[at+k] = p
	}
	at += kt
	for k := range kd {
		p := e.streams[at+k][:0]
		for i := range n {
			p = append(p, byte(e.ranks[i]>>(8*k)))
		}
		e.streams[at+k] = p
	}
	at += kd
	for k := range kp {
		p := e.streams[at+k][:0]
		for i := range n {
			p = append(p, byte(e.pidx[i]>>(8*k)))
		}
		e.streams[at+k] = p
	}
	at += kp

	dst = binary.AppendUvarint(dst, uint64(groups))
	dst = append(dst, byte(kt), byte(kd), byte(kp))
	dst = binary.AppendUvarint(dst, rate)
	for k := range at {
		dst = e.appendStream(dst, e.streams[k])
	}
	return dst
}

func comparePairs(a, b [2]uint64) int {
	if a[0] != b[0] {
		return cmp.Compare(a[0], b[0])
	}
	return cmp.Compare(a[1], b[1])
}

// Stream modes.
const (
	modeRaw    = 0
	modeRepeat = 1
	modeHuff1X = 2
	modeHuff4X = 3
)

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
	if len(b) >= 32 {
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
	dst = append(dst, modeRaw)
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// colDecoder holds decoded streams; pooled.
type colDecoder struct {
	buf  []byte
	huff huff0.Scratch
}

var colDecoders = sync.Pool{New: func() any { return new(colDecoder) }}

var errColumns = errors.New("columnar frame")

func colErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errColumns}, args...)...)
}

// reader reads varints from a stream.
type colReader struct {
	b   []byte
	bad bool
}

func (r *colReader) uvarint() uint64 {
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.bad = true
		r.b = nil
		return 0
	}
	r.b = r.b[k:]
	return v
}

// decodeColumns decodes a columnar frame of n records of layout l into
// dst (n*l.w bytes).
func decodeColumns(dst, src []byte, n int, l colLayout, d *accountDict) error {
	c := colDecoders.Get().(*colDecoder)
	defer colDecoders.Put(c)
	hdr := colReader{b: src}
	groups := hdr.uvarint()
	if hdr.bad || len(hdr.b) < 3 {
		return colErr("header")
	}
	kt, kd, kp := int(hdr.b[0]), int(hdr.b[1]), int(hdr.b[2])
	hdr.b = hdr.b[3:]
	rate := hdr.uvarint()
	switch {
	case hdr.bad:
		return colErr("header")
	case l.target && (groups < 1 || groups > uint64(n)), !l.target && groups != 0:
		return colErr("%d groups for %d records", groups, n)
	case kt > 8 || kd > 3 || kp > 2:
		return colErr("widths %d %d %d", kt, kd, kp)
	}
	nStreams := stFixed + kt + kd + kp
	var streams [stFixed + 8 + 3 + 2][]byte
	// Decoded streams share one buffer: size them first.
	rest := hdr.b
	total := 0
	limit := colStreamMax(n)
	type spec struct {
		mode byte
		raw  int
		data []byte
	}
	var specs [len(streams)]spec
	for k := range nStreams {
		if len(rest) < 1 {
			return colErr("stream %d missing", k)
		}
		sp := spec{mode: rest[0]}
		r := colReader{b: rest[1:]}
		raw := r.uvarint()
		if r.bad || raw > uint64(limit) {
			return colErr("stream %d length", k)
		}
		sp.raw = int(raw)
		switch sp.mode {
		case modeRaw:
			if len(r.b) < sp.raw {
				return colErr("stream %d truncated", k)
			}
			sp.data, r.b = r.b[:sp.raw], r.b[sp.raw:]
		case modeRepeat:
			if len(r.b) < 1 || sp.raw == 0 {
				return colErr("stream %d truncated", k)
			}
			sp.data, r.b = r.b[:1], r.b[1:]
		case modeHuff1X, modeHuff4X:
			sl := r.uvarint()
			if r.bad || sl > uint64(len(r.b)) {
				return colErr("stream %d truncated", k)
			}
			sp.data, r.b = r.b[:sl], r.b[sl:]
		default:
			return colErr("stream %d mode %d", k, sp.mode)
		}
		rest = r.b
		specs[k] = sp
		if sp.mode != modeRaw {
			total += sp.raw
		}
	}
	if len(rest) != 0 {
		return colErr("%d trailing bytes", len(rest))
	}
	if cap(c.buf) < total {
		c.buf = make([]byte, 0, total+total/4)
	}
	buf := c.buf[:0]
	for k := range nStreams {
		sp := specs[k]
		switch sp.mode {
		case modeRaw:
			streams[k] = sp.data
		case modeRepeat:
			at := len(buf)
			for range sp.raw {
				buf = append(buf, sp.data[0])
			}
			streams[k] = buf[at:]
		default:
			s, rem, err := huff0.ReadTable(sp.data, &c.huff)
			if err != nil {
				return colErr("stream %d: %v", k, err)
			}
			at := len(buf)
			out := buf[at : at : at+sp.raw]
			if sp.mode == modeHuff1X {
				out, err = s.Decoder().Decompress1X(out, rem)
			} else {
				out, err = s.Decoder().Decompress4X(out, rem)
			}
			if err != nil || len(out) != sp.raw {
				return colErr("stream %d: %d bytes, want %d (%v)", k, len(out), sp.raw, err)
			}
			buf = buf[:at+sp.raw]
			streams[k] = buf[at:]
		}
	}
	c.buf = buf

	// Planes.
	nFirst := 1
	if l.target {
		nFirst = int(groups)
	}
	tPlanes := streams[stFixed : stFixed+kt]
	dPlanes := streams[stFixed+kt : stFixed+kt+kd]
	pPlanes := streams[stFixed+kt+kd : stFixed+kt+kd+kp]
	for k, p := range tPlanes {
		if len(p) != n-nFirst {
			return colErr("time plane %d: %d bytes for %d records", k, len(p), n-nFirst)
		}
	}
	for k, p := range dPlanes {
		if len(p) != n {
			return colErr("account plane %d: %d bytes", k, len(p))
		}
	}
	for k, p := range pPlanes {
		if len(p) != n {
			return colErr("pair plane %d: %d bytes", k, len(p))
		}
	}
	// Pairs.
	pr := colReader{b: streams[stPairs]}
	np := pr.uvarint()
	if pr.bad || np < 1 || np > uint64(n) {
		return colErr("%d pairs", np)
	}
	var pairsBuf [64][2]uint64
	pairs := pairsBuf[:0]
	if np > uint64(len(pairsBuf)) {
		pairs = make([][2]uint64, 0, np)
	}
	for range np {
		p := [2]uint64{pr.uvarint(), pr.uvarint()}
		if k := len(pairs); k > 0 && (p[0] < pairs[k-1][0] || p[0] == pairs[k-1][0] && p[1] <= pairs[k-1][1]) {
			return colErr("pairs out of order")
		}
		if !l.target && p[1] != 0 {
			return colErr("revocation pair with a location")
		}
		pairs = append(pairs, p)
	}
	if pr.bad || len(pr.b) != 0 {
		return colErr("pairs stream")
	}

	w, s := l.w, l.src()
	targets := colReader{b: streams[stTargets]}
	lengths := colReader{b: streams[stLengths]}
	firsts := colReader{b: streams[stFirst]}
	lits := colReader{b: streams[stLiterals]}
	revs := colReader{b: streams[stRevs]}
	var t [3]uint64
	var prevHi, prevRev uint64
	left := 0 // records left in the group
	ti := 0   // index into the time planes
	nd := d.len()
	for i := range n {
		first := i == 0
		if l.target && left == 0 {
			first = true
			ln := lengths.uvarint()
			if ln < 1 || ln > uint64(n-i) {
				return colErr("group of %d records at record %d", ln, i)
			}
			left = int(ln)
			t[0] += unzigzag(targets.uvarint())
			t[1] = targets.uvarint()
			t[2] = targets.uvarint()
		}
		if l.target {
			left--
		}
		var hi uint64
		if first {
			hi = prevHi + unzigzag(firsts.uvarint())
		} else {
			if ti >= n-nFirst {
				return colErr("more records continue a group than the time planes hold")
			}
			var dlt uint64
			for k, p := range tPlanes {
				dlt |= uint64(p[ti]) << (8 * k)
			}
			ti++
			hi = prevHi + dlt
		}
		var rank uint64
		for k, p := range dPlanes {
			rank |= uint64(p[i]) << (8 * k)
		}
		var did, clock uint64
		if rank == 0 {
			did, clock = lits.uvarint(), lits.uvarint()
			if clock >= 1<<clockBits {
				return colErr("literal clock id %d", clock)
			}
		} else if rank <= uint64(nd) {
			did, clock = d.dids[rank-1], uint64(d.clocks[rank-1])
		} else {
			return colErr("account rank %d of %d", rank, nd)
		}
		var pi uint64
		for k, p := range pPlanes {
			pi |= uint64(p[i]) << (8 * k)
		}
		if pi >= np {
			return colErr("pair index %d of %d", pi, np)
		}
		var pred uint64
		if i > 0 {
			pred = prevRev + scaleRate(hi-prevHi, rate)
		}
		rev := pred + unzigzag(revs.uvarint())
		r := dst[i*w : (i+1)*w : (i+1)*w]
		if l.target {
			binary.BigEndian.PutUint64(r[0:], t[0])
			binary.BigEndian.PutUint64(r[8:], t[1])
			binary.BigEndian.PutUint64(r[16:], t[2])
			binary.BigEndian.PutUint64(r[s+24:], pairs[pi][1])
		}
		binary.BigEndian.PutUint64(r[s:], hi<<clockBits|clock)
		binary.BigEndian.PutUint64(r[s+8:], pairs[pi][0])
		binary.BigEndian.PutUint64(r[s+16:], did)
		binary.BigEndian.PutUint64(r[w-8:], rev)
		prevHi, prevRev = hi, rev
	}
	for _, r := range []*colReader{&targets, &lengths, &firsts, &lits, &revs} {
		if r.bad || len(r.b) != 0 {
			return colErr("a stream is not consumed exactly")
		}
	}
	if left != 0 || ti != n-nFirst {
		return colErr("groups disagree with the header (%d left, %d of %d time differences)", left, ti, n-nFirst)
	}
	return nil
}
