package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/huff0"
)

type colDecoder struct {
	buf  []byte
	huff huff0.Scratch
	// The planes gathered into words (rebuild's scratch): time
	// differences, account ranks, pair indexes, clock ids.
	dt, rank, pidx, clock []uint64
	tz, trank             []uint64 // version 9: the target planes
	rcodes                []uint64 // version 9: rev codes in their sparse form
	firsts                []uint64 // version 10: first times of groups
	acc                   entryCols
}

// entryCols is the dictionary entries of a frame's records, looked up by
// rank before the records are rebuilt (accountDict.gather): each record's
// account's DID, clock id and rev (as the dictionary holds it), and each
// group's target DID (version 9).
type entryCols struct {
	did, rev, tdid []uint64
	clock          []uint16
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
	if len(r.b) > 0 && r.b[0] < 0x80 { // most values: one byte
		v := uint64(r.b[0])
		r.b = r.b[1:]
		return v
	}
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
	f := colFrame{n: n}
	rest, err := f.readHeader(src, l)
	if err != nil {
		return err
	}
	if err := c.readStreams(&f, rest); err != nil {
		return err
	}
	if err := f.checkPlanes(); err != nil {
		return err
	}
	var pairsBuf [64][2]uint64
	pairs, err := f.readPairs(pairsBuf[:0], l)
	if err != nil {
		return err
	}
	if err := c.columns(&f, l); err != nil {
		return err
	}
	var clocks []uint64
	if l.clockCol {
		clocks = c.clock
	}
	if f.revsSparse {
		if c.rcodes, err = readSparseRevs(c.rcodes, f.n, f.streams[stRevs]); err != nil {
			return err
		}
		f.revCodes = c.rcodes
	}
	if f.magF {
		f.firsts = c.firsts
	}
	return f.rebuild(dst, l, d, pairs, c.dt, c.rank, c.pidx, clocks, c.tz, c.trank, &c.acc)
}

// columns reads the frame's numeric columns into c: the time
// differences, account ranks, pair indexes, clock ids (layouts with a
// clock column), the target columns (version 9) and the first times of
// groups (version 10: f.firsts), from their planes, their sparse form or
// their magnitude form.
func (c *colDecoder) columns(f *colFrame, l colLayout) error {
	var err error
	tp, dp, pp := f.planes()
	if c.dt, err = column(c.dt, f.n-f.nFirst, tp, f.kt, f.magT, "time differences"); err != nil {
		return err
	}
	if c.rank, err = column(c.rank, f.n, dp, f.kd, f.mag, "account ranks"); err != nil {
		return err
	}
	c.pidx = gatherPlanes(c.pidx, f.n, pp)
	if l.clockCol {
		at := stFixed + f.st + f.sd + f.kp
		if f.sparse {
			if c.clock, err = readSparseClocks(c.clock, f.n, f.streams[at]); err != nil {
				return err
			}
		} else {
			c.clock = gatherPlanes(c.clock, f.n, f.streams[at:at+f.kc])
		}
	}
	if l.targetPlanes {
		rp, ap, _ := f.targetPlanes()
		if c.tz, err = column(c.tz, int(f.groups), rp, f.kr, f.magR, "target rkeys"); err != nil {
			return err
		}
		if c.trank, err = column(c.trank, int(f.groups), ap, f.ka, f.mag, "target ranks"); err != nil {
			return err
		}
	}
	if f.magF {
		if c.firsts, err = readMagnitudes(c.firsts, f.nFirst, f.streams[stFirst], f.streams[f.nStreams()-1], 64, "first times"); err != nil {
			return err
		}
	}
	return nil
}

// column returns the n values of a column of width k bytes stored in
// streams: planes, or (mag, version 10) its magnitude form.
func column(w []uint64, n int, streams [][]byte, k int, mag bool, what string) ([]uint64, error) {
	if !mag || k == 0 {
		return gatherPlanes(w, n, streams), nil
	}
	return readMagnitudes(w, n, streams[0], streams[1], 8*k, what)
}

// readSparseClocks returns the n clock plane values of a frame whose
// clock ids are in their sparse form b (codec.go), in w's memory if it is
// large enough.
func readSparseClocks(w []uint64, n int, b []byte) ([]uint64, error) {
	return readSparse(w, n, b, 1<<clockBits-1, "clock ids")
}

// readSparse returns the n values of a sparse form b (varint m, 1..n, then
// m pairs of varints: the gap since the previous nonzero value, the value,
// 1..most; every other value 0), in w's memory if it is large enough.
func readSparse(w []uint64, n int, b []byte, most uint64, what string) ([]uint64, error) {
	if cap(w) < n {
		w = make([]uint64, n)
	}
	w = w[:n]
	clear(w)
	r := colReader{b: b}
	m := r.uvarint()
	if r.bad || m < 1 || m > uint64(n) {
		return nil, colErr("%d sparse %s for %d records", m, what, n)
	}
	next := uint64(0) // the least index the next entry may have
	for range m {
		gap, v := r.uvarint(), r.uvarint()
		if r.bad || gap >= uint64(n)-next || v == 0 || v > most {
			return nil, colErr("sparse %s: %d after a gap of %d at %d of %d records", what, v, gap, next, n)
		}
		w[next+gap] = v
		next += gap + 1
	}
	if len(r.b) != 0 {
		return nil, colErr("sparse %s: %d trailing bytes", what, len(r.b))
	}
	return w, nil
}

// gatherPlanes returns the n words whose little-endian bytes are the
// planes (byte k of word i is planes[k][i]; checkPlanes checked that
// each holds n), in w's memory if it is large enough. One plane at a time:
// a tight loop for each, rather than a loop over the planes per record.
func gatherPlanes(w []uint64, n int, planes [][]byte) []uint64 {
	if cap(w) < n {
		w = make([]uint64, n)
	}
	w = w[:n]
	if len(planes) == 0 {
		clear(w)
		return w
	}
	p0 := planes[0][:n]
	for i, b := range p0 {
		w[i] = uint64(b)
	}
	for k := 1; k < len(planes); k++ {
		p := planes[k][:n]
		sh := uint(8 * k)
		for i, b := range p {
			w[i] |= uint64(b) << sh
		}
	}
	return w
}

// colFrame is a columnar frame being decoded: its header and streams.
type colFrame struct {
	n          int // records
	groups     uint64
	kt, kd, kp int  // plane counts: time differences, account ranks, pair indexes
	kc         int  // clock id streams (layouts with a clock column): planes, or 1 sparse
	kr, ka     int  // version 9: target rkey difference and DID rank planes
	tlits      bool // version 9: a target literals' stream follows the planes
	revsSparse bool // version 9: the revs stream is in its sparse form
	revCodes   []uint64
	sparse     bool
	// Version 10 (mag): the account ranks and target DID ranks are in
	// their magnitude form, 2 streams each when their width is not 0;
	// the time differences (magT), target rkey differences (magR) and
	// first times of groups (magF: their classes in the first stream,
	// their mantissas in the last) may be (codec_magnitude.go). st, sd,
	// sr, sa: the streams of each column.
	mag, magT, magR, magF bool
	st, sd, sr, sa        int
	firsts                []uint64
	rate                  uint64
	nFirst                int // records that start a group (revocations: 1)
	streams               [colStreams][]byte
}

func (f *colFrame) nStreams() int {
	n := stFixed + f.st + f.sd + f.kp + f.kc + f.sr + f.sa
	if f.tlits {
		n++
	}
	if f.magF {
		n++
	}
	return n
}

// targetPlanes returns the version 9 target columns' streams (rkey
// differences, DID ranks: planes, or version 10 their magnitude form) and
// the target literals' stream.
func (f *colFrame) targetPlanes() (r, a [][]byte, lits []byte) {
	at := stFixed + f.st + f.sd + f.kp + f.kc
	r, a = f.streams[at:at+f.sr], f.streams[at+f.sr:at+f.sr+f.sa]
	if f.tlits {
		lits = f.streams[at+f.sr+f.sa]
	}
	return r, a, lits
}

// planes returns the streams of the time differences and account ranks
// (planes, or version 10 their magnitude form) and the pair planes.
func (f *colFrame) planes() (t, d, p [][]byte) {
	st, sd, kp := f.st, f.sd, f.kp
	return f.streams[stFixed : stFixed+st], f.streams[stFixed+st : stFixed+st+sd], f.streams[stFixed+st+sd : stFixed+st+sd+kp]
}

// readHeader reads the frame's header from src and returns what follows.
func (f *colFrame) readHeader(src []byte, l colLayout) ([]byte, error) {
	n := f.n
	hdr := colReader{b: src}
	groups := hdr.uvarint()
	widths := 3
	if l.clockCol {
		widths = 4
	}
	if l.targetPlanes {
		widths += 2
	}
	if hdr.bad || len(hdr.b) < widths {
		return nil, colErr("header")
	}
	kt, kd, kp, kc := int(hdr.b[0]), int(hdr.b[1]), int(hdr.b[2]), 0
	if l.clockCol {
		kc = int(hdr.b[3])
	}
	if l.targetPlanes {
		f.kr, f.ka, f.tlits = int(hdr.b[widths-2]), int(hdr.b[widths-1]), true
	}
	if l.magnitudes {
		f.mag = true
		f.magT, f.magF, f.magR = kt&magTimes != 0, kt&magFirsts != 0, f.kr&magTimes != 0
		kt &^= magTimes | magFirsts
		f.kr &^= magTimes
		if f.magT && kt == 0 || f.magR && f.kr == 0 {
			return nil, colErr("magnitude form of an empty column")
		}
	}
	hdr.b = hdr.b[widths:]
	rate := hdr.uvarint()
	if l.revsSparse {
		f.revsSparse, rate = rate&1 == 1, rate>>1
	}
	switch {
	case hdr.bad:
		return nil, colErr("header")
	case l.target && (groups < 1 || groups > uint64(n)), !l.target && groups != 0:
		return nil, colErr("%d groups for %d records", groups, n)
	case kt > 8 || kd > 3 || kp > 2 || kc > clockSparse || f.kr > 8 || f.ka > 3:
		return nil, colErr("widths %d %d %d %d %d %d", kt, kd, kp, kc, f.kr, f.ka)
	}
	if kc == clockSparse {
		kc, f.sparse = 1, true
	}
	f.groups, f.kt, f.kd, f.kp, f.kc, f.rate = groups, kt, kd, kp, kc, rate
	f.st, f.sd, f.sr, f.sa = kt, kd, f.kr, f.ka
	if f.mag {
		two := func(k int) int { return 2 * min(k, 1) }
		f.sd, f.sa = two(kd), two(f.ka)
		if f.magT {
			f.st = 2
		}
		if f.magR {
			f.sr = 2
		}
	}
	f.nFirst = 1
	if l.target {
		f.nFirst = int(groups)
	}
	return hdr.b, nil
}

// readStreams reads the frame's streams from rest (all of it) into
// f.streams: raw streams in place, the others decoded into c.buf.
func (c *colDecoder) readStreams(f *colFrame, rest []byte) error {
	nStreams := f.nStreams()
	// Decoded streams share one buffer: size them first.
	total := 0
	limit := colStreamMax(f.n)
	type spec struct {
		mode byte
		raw  int
		data []byte
	}
	var specs [len(f.streams)]spec
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
			f.streams[k] = sp.data
		case modeRepeat:
			at := len(buf)
			for range sp.raw {
				buf = append(buf, sp.data[0])
			}
			f.streams[k] = buf[at:]
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
			f.streams[k] = buf[at:]
		}
	}
	c.buf = buf
	return nil
}

// checkPlanes checks the planes' lengths.
func (f *colFrame) checkPlanes() error {
	n, nFirst := f.n, f.nFirst
	tPlanes, dPlanes, pPlanes := f.planes()
	if f.magT { // readMagnitudes checks the magnitude forms
		tPlanes = nil
	}
	if f.mag {
		dPlanes = nil
	}
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
	at := stFixed + f.st + f.sd + f.kp
	for k, p := range f.streams[at : at+f.kc] {
		if len(p) != n && !f.sparse {
			return colErr("clock plane %d: %d bytes", k, len(p))
		}
	}
	rp, ap, _ := f.targetPlanes()
	if f.magR {
		rp = nil
	}
	if f.mag {
		ap = nil
	}
	for _, planes := range [][][]byte{rp, ap} {
		for k, p := range planes {
			if uint64(len(p)) != f.groups {
				return colErr("target plane %d: %d bytes for %d groups", k, len(p), f.groups)
			}
		}
	}
	return nil
}

// readPairs appends the frame's (collection, location) pairs to pairs
// (which it outgrows when the frame has more than its capacity).
func (f *colFrame) readPairs(pairs [][2]uint64, l colLayout) ([][2]uint64, error) {
	pr := colReader{b: f.streams[stPairs]}
	np := pr.uvarint()
	if pr.bad || np < 1 || np > uint64(f.n) {
		return nil, colErr("%d pairs", np)
	}
	if np > uint64(cap(pairs)) {
		pairs = make([][2]uint64, 0, np)
	}
	for range np {
		p := [2]uint64{pr.uvarint(), pr.uvarint()}
		if k := len(pairs); k > 0 && (p[0] < pairs[k-1][0] || p[0] == pairs[k-1][0] && p[1] <= pairs[k-1][1]) {
			return nil, colErr("pairs out of order")
		}
		if !l.target && p[1] != 0 {
			return nil, colErr("revocation pair with a location")
		}
		pairs = append(pairs, p)
	}
	if pr.bad || len(pr.b) != 0 {
		return nil, colErr("pairs stream")
	}
	return pairs, nil
}

// rebuild writes the frame's records into dst from its streams, the
// account dictionary d and the pairs (and with a clock column, the clock
// ids); every stream must be consumed exactly. acc is scratch for the
// dictionary entries of the records' ranks (gather).
func (f *colFrame) rebuild(dst []byte, l colLayout, d *accountDict, pairs [][2]uint64, dts, ranks, pidxs, clocks, tzs, tranks []uint64, acc *entryCols) error {
	n, nFirst, rate := f.n, f.nFirst, f.rate
	np := uint64(len(pairs))
	streams := &f.streams
	ranks, pidxs = ranks[:n], pidxs[:n]
	w, s := l.w, l.src()
	targets := colReader{b: streams[stTargets]}
	lengths := colReader{b: streams[stLengths]}
	firsts := colReader{b: streams[stFirst]}
	if f.magF { // the magnitude form, read whole
		firsts.b = nil
	}
	lits := colReader{b: streams[stLiterals]}
	revs := colReader{b: streams[stRevs]}
	if f.revCodes != nil { // the sparse form, read whole
		revs.b = nil
	}
	_, _, tl := f.targetPlanes()
	tlits := colReader{b: tl}
	g := 0 // the group (version 9: its index into the target planes)
	var t [3]uint64
	var prevHi, prevRev uint64
	var chainHi, chainRev uint64 // version 8: the last chained record's
	chained := false
	left := 0 // records left in the group
	ti := 0   // index into the time planes
	g0 := 0   // version 10: index into the first times
	nd := d.len()
	withRevs := d.hasRevs() // asked once, not per record
	d.gather(ranks, acc)
	if l.targetPlanes {
		acc.tdid = d.gatherDIDs(tranks, acc.tdid)
	}
	for i := range n {
		first := i == 0
		if l.target && left == 0 {
			first = true
			ln := lengths.uvarint()
			if ln < 1 || ln > uint64(n-i) {
				return colErr("group of %d records at record %d", ln, i)
			}
			left = int(ln)
			if l.targetPlanes {
				if g >= len(tzs) {
					return colErr("more groups than the header's %d", len(tzs))
				}
				t[0] += unzigzag(tzs[g])
				t[1] = targets.uvarint()
				switch r := tranks[g]; {
				case r == 0:
					t[2] = tlits.uvarint()
				case r <= uint64(nd):
					t[2] = acc.tdid[g]
				default:
					return colErr("target account rank %d of %d", r, nd)
				}
			} else {
				t[0] += unzigzag(targets.uvarint())
				t[1] = targets.uvarint()
				t[2] = targets.uvarint()
			}
			g++
		}
		if l.target {
			left--
		}
		var hi uint64
		switch {
		case first && f.magF:
			if g0 >= len(f.firsts) {
				return colErr("more groups than first times")
			}
			hi = prevHi + unzigzag(f.firsts[g0])
			g0++
		case first:
			hi = prevHi + unzigzag(firsts.uvarint())
		default:
			if ti >= len(dts) {
				return colErr("more records continue a group than the time planes hold")
			}
			hi = prevHi + dts[ti]
			ti++
		}
		rank := ranks[i]
		var did, clock uint64
		switch {
		case rank == 0:
			did, clock = lits.uvarint(), lits.uvarint()
			if clock >= 1<<clockBits {
				return colErr("literal clock id %d", clock)
			}
		case rank <= uint64(nd):
			did, clock = acc.did[i], uint64(acc.clock[i])
		default:
			return colErr("account rank %d of %d", rank, nd)
		}
		if l.clockCol {
			// The plane holds the clock id xor the account's entry's;
			// a literal's 0 (the literal has its clock id).
			switch c := clocks[i]; {
			case rank == 0 && c != 0:
				return colErr("clock plane %d for a literal", c)
			case c >= 1<<clockBits:
				return colErr("clock plane %d", c)
			default:
				clock ^= c
			}
		}
		pi := pidxs[i]
		if pi >= np {
			return colErr("pair index %d of %d", pi, np)
		}
		var rev uint64
		var v uint64
		if f.revCodes != nil {
			v = f.revCodes[i]
		} else {
			v = revs.uvarint()
		}
		var dr uint64
		if rank != 0 && withRevs {
			dr = acc.rev[i]
		}
		switch {
		case l.revChain: // version 8: along the chain (codec_revs.go)
			var pred uint64
			if chained {
				pred = chainRev + scaleRate(hi-chainHi, rate)
			}
			switch {
			case dr == 0:
				rev = pred + unzigzag(v)
			case v == 0:
				rev = dr - 1
			default:
				rev = pred + unzigzag(revChainResidual(v, zigzag(dr-1-pred)))
			}
			if dr == 0 || v != 0 {
				chainHi, chainRev, chained = hi, rev, true
			}
		case dr == 0:
			var pred uint64
			if i > 0 {
				pred = prevRev + scaleRate(hi-prevHi, rate)
			}
			rev = pred + unzigzag(v)
		default: // version 3: from the account's rev
			rev = dr - 1 + unzigzag(v)
		}
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
	for _, r := range []*colReader{&targets, &lengths, &firsts, &lits, &revs, &tlits} {
		if r.bad || len(r.b) != 0 {
			return colErr("a stream is not consumed exactly")
		}
	}
	if f.magF && g0 != len(f.firsts) {
		return colErr("%d first times for %d groups", len(f.firsts), g0)
	}
	if left != 0 || ti != n-nFirst {
		return colErr("groups disagree with the header (%d left, %d of %d time differences)", left, ti, n-nFirst)
	}
	return nil
}
