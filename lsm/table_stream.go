package lsm

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/zeebo/xxh3"
)

// fastTableWriter builds a table of the fast form (TableOptions.Fast:
// frames shuffled and compressed with S2) from records given one at a
// time, in order, as a merge routes them to their output shard: the same
// data and meta bytes BuildTable makes of the same records
// (TestFastTableWriterMatchesBuildTable), without holding them. It keeps
// the frame being filled (at most a frame and one record), the frames
// encoded so far, each frame's first record and the filter's keys.
//
// It checks what BuildTable checks: its input (strictly increasing, in
// its shard) as records come, and its output: each frame is decoded again
// as soon as it is encoded and compared with its records, and the meta is
// decoded at the end and compared with what was built (every frame's
// entry, the keys in the filter).
type fastTableWriter struct {
	b        tableBuild
	data     []byte // the frames encoded so far
	pend     []byte // records not yet in a frame
	minFill  int
	prevLast []byte // the last record of the previous frame
	check    []byte // decode scratch for the self-check
	checked  int    // b.keys recomputed from decoded frames so far
}

// fastEncodeHook, when set (tests), changes a frame's shuffled records
// before S2 encodes them: a fault the self-check must catch.
var fastEncodeHook func(shuffled []byte)

// newFastTableWriter starts a fast-form table of format f with options
// opt (opt.Fast must be set; FilterBits as BuildTable takes them), of
// about hint records (its buffers' first sizes; 0 if unknown).
func newFastTableWriter(f Format, opt TableOptions, hint int) (*fastTableWriter, error) {
	t := &fastTableWriter{}
	return t, t.reset(f, opt, hint)
}

// reset starts a new table in t, as newFastTableWriter does, keeping the
// memory of t's buffers: the data object a finish returned is overwritten
// by the next table's (objstore's Put keeps no data after it returns).
func (t *fastTableWriter) reset(f Format, opt TableOptions, hint int) error {
	if err := f.check(); err != nil {
		return err
	}
	if opt.ShardBits > MaxShardBits || uint64(opt.Shard) >= 1<<opt.ShardBits {
		return fmt.Errorf("lsm: fast table: shard %d of %d bits", opt.Shard, opt.ShardBits)
	}
	switch {
	case !opt.Fast:
		return fmt.Errorf("lsm: fast table: options not Fast")
	case opt.transSet:
		return fmt.Errorf("lsm: fast table: a fast table with transform %v", opt.transform)
	case opt.writeVersion() < 11:
		return fmt.Errorf("lsm: fast table: a fast table in format version %d", opt.writeVersion())
	}
	b := tableBuild{f: f, opt: opt, filterBits: opt.FilterBits, transform: transformShuffleS2}
	if b.filterBits == 0 {
		b.filterBits = DefaultFilterBits
	}
	if b.filterBits != FilterBits8 && b.filterBits != FilterBits16 {
		return fmt.Errorf("lsm: fast table: filter bits %d not 8 or 16", b.filterBits)
	}
	w := f.Width
	b.perFrame = frameBytes(opt.writeVersion()) / w
	if opt.frameMax > 0 {
		b.perFrame = min(b.perFrame, opt.frameMax)
	}
	b.seed = tableFilterSeed(opt.FilterSeed)
	b.last = reuse(t.b.last, w, w)
	b.keys = reuse(t.b.keys, 0, hint/2+1)
	b.fences = t.b.fences[:0]
	*t = fastTableWriter{
		b:       b,
		data:    reuse(t.data, 0, hint*w*3/10+s2.MaxEncodedLen(b.perFrame*w)), // S2 keeps ~27% of a backlink
		pend:    reuse(t.pend, 0, (b.perFrame+1)*w),
		minFill: b.perFrame - b.perFrame/8,
		check:   t.check,
	}
	return nil
}

// reuse returns s emptied to length n if its capacity is at least c, else
// a new slice of length n and capacity c.
func reuse[E any](s []E, n, c int) []E {
	if cap(s) < max(n, c) {
		return make([]E, n, max(n, c))
	}
	return s[:n]
}

// records is how many records the table holds so far.
func (t *fastTableWriter) records() int { return t.b.n }

// add appends rec (Width bytes), which must be above the last record
// added and in the table's shard.
func (t *fastTableWriter) add(rec []byte) error {
	b := &t.b
	w, p := b.f.Width, b.f.PrefixLen
	if len(rec) != w {
		return fmt.Errorf("lsm: fast table: a record of %d bytes, not %d", len(rec), w)
	}
	if b.n > 0 {
		c := compareRecords(b.last, rec)
		if c >= 0 {
			what := "out of order"
			if c == 0 {
				what = "duplicated"
			}
			return fmt.Errorf("lsm: fast table: record %d %s: %x", b.n, what, rec)
		}
	}
	if b.n == 0 || !bytes.Equal(b.last[:p], rec[:p]) {
		pre := rec[:p]
		if b.opt.ShardBits > 0 && ShardOf(pre, b.opt.ShardBits) != b.opt.Shard {
			return fmt.Errorf("lsm: fast table: prefix %x is in shard %d, not %d of %d bits",
				pre, ShardOf(pre, b.opt.ShardBits), b.opt.Shard, b.opt.ShardBits)
		}
		b.keys = append(b.keys, filterKey(pre, b.seed))
	}
	if b.n >= MaxTableRecords {
		return fmt.Errorf("lsm: fast table: more than MaxTableRecords (%d) records", MaxTableRecords)
	}
	copy(b.last, rec)
	b.n++
	t.pend = append(t.pend, rec...)
	if len(t.pend) == (b.perFrame+1)*w {
		// The frame BuildTable cuts here: perFrame records, ended early
		// at the last prefix boundary in its final eighth if there is one
		// (pend's last record is the next frame's first).
		e := b.perFrame
		for c := e; c > t.minFill; c-- {
			if !bytes.Equal(t.pend[(c-1)*w:(c-1)*w+p], t.pend[c*w:c*w+p]) {
				e = c
				break
			}
		}
		return t.cut(e)
	}
	return nil
}

// cut encodes pend's first e records as a frame, checks that it decodes to
// them, and keeps the rest for the next frame.
func (t *fastTableWriter) cut(e int) error {
	b := &t.b
	w, p := b.f.Width, b.f.PrefixLen
	raw := t.pend[:e*w]
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	tmp := (*bp)[:len(raw)]
	encodeTransform(transformShuffleS2, tmp, raw, w)
	if fastEncodeHook != nil {
		fastEncodeHook(tmp)
	}
	off := len(b.fences) / w // frames so far
	at := len(t.data)
	data := t.data
	if most := s2.MaxEncodedLen(len(tmp)); cap(data)-at < most {
		data = make([]byte, at, cap(data)+cap(data)/4+most)
		copy(data, t.data)
	}
	data = data[:at+len(s2.Encode(data[at:at+s2.MaxEncodedLen(len(tmp))], tmp))]
	t.data = data
	fr := builtFrame{start: b.n - len(t.pend)/w, n: e, length: len(data) - at, sum: xxh3.Hash(data[at:])}
	if fr.length > maxFrameLength {
		return fmt.Errorf("lsm: fast table: frame %d compressed to %d bytes", off, fr.length)
	}
	if t.prevLast != nil {
		fr.continues = bytes.Equal(t.prevLast[:p], raw[:p])
	} else {
		t.prevLast = make([]byte, w)
	}
	// The self-check of this frame, as verifyTable's: decode and compare.
	dec, err := s2.Decode(tmp[:0:cap(tmp)], data[at:])
	if err != nil || len(dec) != len(raw) {
		return fmt.Errorf("lsm: fast table: self-check failed: frame %d decodes to %d bytes (%v), want %d", off, len(dec), err, len(raw))
	}
	if cap(t.check) < len(raw) {
		t.check = make([]byte, len(raw))
	}
	chk := t.check[:len(raw)]
	decodeTransform(transformShuffleS2, chk, dec, w)
	if !bytes.Equal(chk, raw) {
		return fmt.Errorf("lsm: fast table: self-check failed: frame %d decodes to different records", off)
	}
	// The filter's keys of the frame's distinct prefixes, hashed again from
	// the decoded records as a query hashes a prefix (finish checks that
	// the filter holds them): a fault in computing the keys add collected
	// would otherwise hide links from queries.
	for i := 0; i < e; i++ {
		r := chk[i*w : i*w+p]
		if (i > 0 && bytes.Equal(chk[(i-1)*w:(i-1)*w+p], r)) || (i == 0 && fr.continues) {
			continue
		}
		if t.checked >= len(b.keys) || b.keys[t.checked] != filterKey(r, b.seed) {
			return fmt.Errorf("lsm: fast table: self-check failed: frame %d: prefix %x's filter key is not the one collected", off, r)
		}
		t.checked++
	}
	b.frames = append(b.frames, fr)
	b.fences = append(b.fences, raw[:w]...)
	copy(t.prevLast, raw[len(raw)-w:])
	t.pend = append(t.pend[:0], t.pend[e*w:]...)
	return nil
}

// finish encodes the last frame and the meta, checks the meta against
// what was built, and returns the table's data and meta objects.
func (t *fastTableWriter) finish() (data, meta []byte, err error) {
	b := &t.b
	w := b.f.Width
	if b.n == 0 {
		return nil, nil, fmt.Errorf("lsm: fast table: no records")
	}
	if len(t.pend) > 0 {
		if err := t.cut(len(t.pend) / w); err != nil {
			return nil, nil, err
		}
	}
	data = t.data
	if meta, err = b.encodeMeta(len(data)); err != nil {
		return nil, nil, err
	}
	if err := t.verifyMeta(data, meta); err != nil {
		return nil, nil, fmt.Errorf("lsm: fast table: self-check failed: %w", err)
	}
	return data, meta, nil
}

// verifyMeta decodes meta and compares it with the table built: the
// fields verifyTable compares, every frame's entry (its bytes and
// checksum, records, fence, continues flag) and every key in the filter.
// The frames' records were compared as each was encoded.
func (t *fastTableWriter) verifyMeta(data, meta []byte) error {
	b := &t.b
	m, err := DecodeMeta(meta)
	if err != nil {
		return err
	}
	w := b.f.Width
	opt := b.opt
	switch {
	case m.Format != b.f, m.Records != uint64(b.n), m.DataBytes != uint64(len(data)),
		m.ShardBits != opt.ShardBits, m.Shard != opt.Shard, m.Prefixes != uint64(len(b.keys)),
		m.transform != b.transform, m.filterBits != b.filterBits,
		!bytes.Equal(m.MinKey, b.fences[:w]), !bytes.Equal(m.MaxKey, b.last),
		m.NumFrames() != len(b.frames):
		return fmt.Errorf("decoded meta differs from the table built: %v", m)
	}
	for i, fr := range b.frames {
		e := m.frameEntry(i)
		off, l := m.ByteRange(i, i)
		if int(e.Length) != fr.length || int(e.Records) != fr.n || e.Checksum != fr.sum || e.Continues != fr.continues ||
			!bytes.Equal(e.First, b.fences[i*w:(i+1)*w]) || l != int64(fr.length) || xxh3.Hash(data[off:off+l]) != fr.sum {
			return fmt.Errorf("frame %d's entry differs from the frame built", i)
		}
	}
	// Every key was hashed again from its frame's decoded records with
	// the writer's seed (cut): the meta's seed must be it.
	if t.checked != len(b.keys) {
		return fmt.Errorf("%d filter keys collected, %d prefixes in the frames", len(b.keys), t.checked)
	}
	if m.filter.seed != b.seed {
		return fmt.Errorf("filter's seed %016x, the keys were hashed with %016x", m.filter.seed, b.seed)
	}
	for _, k := range b.keys {
		if !m.mayContainKey(k) {
			return fmt.Errorf("filter misses key %016x", k)
		}
	}
	return nil
}
