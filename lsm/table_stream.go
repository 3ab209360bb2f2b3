package lsm

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/zeebo/xxh3"
)

// tableWriter builds a table from records given one at a time, in order,
// as a merge produces them: of the fast form (TableOptions.Fast: frames
// shuffled and compressed with S2; a merge of flushes routes each record
// to its output shard's writer), or of columns with a run's shared
// dictionary (TableOptions.sharedDict: a merge into columns, shard by
// shard). It makes the same data and meta bytes BuildTable makes of the
// same records (TestTableWriterMatchesBuildTable), without holding them:
// it keeps the frame being filled (at most a frame and one record), the
// frames encoded so far, each frame's first record and the filter's keys.
//
// It checks what BuildTable checks: its input (strictly increasing, in
// its shard) as records come, and its output: each frame is decoded again
// as soon as it is encoded and compared with its records, while they are
// in the cache, and the meta is decoded at the end and compared with what
// was built (every frame's entry, the keys in the filter, the dictionary).
type tableWriter struct {
	b        tableBuild
	data     []byte // the frames encoded so far
	pend     []byte // records not yet in a frame
	prevLast []byte // the last record of the previous frame
	check    []byte // decode scratch for the self-check
	checked  int    // b.keys recomputed from decoded frames so far
	// Columns: the frame's account ranks, and a meta of the table's
	// layout and dictionary that decodes its frames for the self-check.
	ranks []uint32
	shell *TableMeta
}

// newTableWriter starts a fast-form table of format f with options
// opt (opt.Fast must be set; FilterBits as BuildTable takes them), of
// about hint records (its buffers' first sizes; 0 if unknown).
func newTableWriter(f Format, opt TableOptions, hint int) (*tableWriter, error) {
	t := &tableWriter{}
	return t, t.reset(f, opt, hint)
}

// reset starts a new table in t, as newTableWriter does, keeping the
// memory of t's buffers: the data object a finish returned is overwritten
// by the next table's (objstore's Put keeps no data after it returns).
func (t *tableWriter) reset(f Format, opt TableOptions, hint int) error {
	if !opt.Fast && opt.sharedDict == nil {
		return fmt.Errorf("lsm: table writer: options neither Fast nor with a shared dictionary")
	}
	b := tableBuild{f: f, opt: opt}
	if err := b.setup(); err != nil {
		return err
	}
	if err := b.pickTransform(); err != nil { // the fast form's checks, or the dictionary's
		return err
	}
	w := f.Width
	size := hint*w*3/10 + s2.MaxEncodedLen(b.perFrame*w) // S2 keeps ~27% of a backlink
	shell := t.shell
	if !opt.Fast {
		if b.transform != transformColumns {
			return fmt.Errorf("lsm: table writer: a shared dictionary for transform %v", b.transform)
		}
		var err error
		if b.enc, err = encoderFor(opt.CompressionLevel); err != nil {
			return err
		}
		size = hint*w/6 + b.perFrame*w // the columns keep ~15% of a backlink at 1B
		shell = &TableMeta{Format: f, transform: transformColumns, layout: b.layout, version: opt.writeVersion(), dict: b.dict}
	}
	b.last = reuse(t.b.last, w, w)
	b.keys = reuse(t.b.keys, 0, hint/2+1)
	b.fences = t.b.fences[:0]
	*t = tableWriter{
		b:     b,
		data:  reuse(t.data, 0, size),
		pend:  reuse(t.pend, 0, (b.perFrame+1)*w),
		check: t.check,
		ranks: t.ranks,
		shell: shell,
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
func (t *tableWriter) records() int { return t.b.n }

// add appends rec (Width bytes), which must be above the last record
// added and in the table's shard.
func (t *tableWriter) add(rec []byte) error {
	b := &t.b
	w, p := b.f.Width, b.f.PrefixLen
	if len(rec) != w {
		return fmt.Errorf("lsm: table writer: a record of %d bytes, not %d", len(rec), w)
	}
	if b.n > 0 {
		if c := compareRecords(b.last, rec); c >= 0 {
			return orderError(b.n, c, rec)
		}
	}
	if b.n == 0 || !bytes.Equal(b.last[:p], rec[:p]) {
		if err := b.addPrefix(rec[:p]); err != nil {
			return err
		}
	}
	if b.n >= MaxTableRecords {
		return fmt.Errorf("lsm: table writer: more than MaxTableRecords (%d) records", MaxTableRecords)
	}
	copy(b.last, rec)
	b.n++
	t.pend = append(t.pend, rec...)
	if len(t.pend) == (b.perFrame+1)*w {
		// The frame BuildTable cuts here (pend's last record is the next
		// frame's first).
		return t.cut(frameEnd(t.pend, w, p, b.perFrame, b.perFrame-b.perFrame/8))
	}
	return nil
}

// cut encodes pend's first e records as a frame, checks that it decodes to
// them, and keeps the rest for the next frame.
func (t *tableWriter) cut(e int) error {
	b := &t.b
	w, p := b.f.Width, b.f.PrefixLen
	raw := t.pend[:e*w]
	off := len(b.fences) / w // frames so far
	at := len(t.data)
	if most := s2.MaxEncodedLen(len(raw)); cap(t.data)-at < most {
		// Grown by a quarter, not doubled: the buffer is sized for the
		// table (reset), and kept for the next one. (A frame of columns
		// takes at most its records' bytes, and two more.)
		data := make([]byte, at, cap(t.data)+cap(t.data)/4+most)
		copy(data, t.data)
		t.data = data
	}
	if b.transform == transformColumns {
		t.ranks = ranksInto(t.ranks, raw, b.layout, b.dict)
		t.data = b.appendColumnsFrame(t.data, raw, t.ranks)
	} else {
		t.data = appendFastFrame(t.data, raw, w)
	}
	data := t.data
	fr := builtFrame{start: b.n - len(t.pend)/w, n: e, length: len(data) - at, sum: xxh3.Hash(data[at:])}
	if fr.length > maxFrameLength {
		return fmt.Errorf("lsm: table writer: frame %d compressed to %d bytes", off, fr.length)
	}
	if t.prevLast != nil {
		fr.continues = bytes.Equal(t.prevLast[:p], raw[:p])
	} else {
		t.prevLast = make([]byte, w)
	}
	// The self-check of this frame, as verifyTable's: decode and compare.
	if cap(t.check) < len(raw) {
		t.check = make([]byte, len(raw))
	}
	chk := t.check[:len(raw)]
	if b.transform == transformColumns {
		zd, err := frameDecoder()
		if err != nil {
			return err
		}
		if err := t.shell.decodeColumnsFrame(chk, data[at:], zd); err != nil {
			return fmt.Errorf("lsm: table writer: self-check failed: frame %d: %v", off, err)
		}
	} else {
		bp := scratchPool.Get().(*[]byte)
		defer scratchPool.Put(bp)
		dec, what, err := decompressFrame(transformShuffleS2, nil, (*bp)[:0:len(raw)+zstdSlack], data[at:], len(raw))
		if err != nil {
			return fmt.Errorf("lsm: table writer: self-check failed: frame %d: %s: %v", off, what, err)
		}
		decodeTransform(transformShuffleS2, chk, dec, w)
	}
	if !bytes.Equal(chk, raw) {
		return fmt.Errorf("lsm: table writer: self-check failed: frame %d decodes to different records", off)
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
			return fmt.Errorf("lsm: table writer: self-check failed: frame %d: prefix %x's filter key is not the one collected", off, r)
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
func (t *tableWriter) finish() (data, meta []byte, err error) {
	b := &t.b
	w := b.f.Width
	if b.n == 0 {
		return nil, nil, fmt.Errorf("lsm: table writer: no records")
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
		return nil, nil, fmt.Errorf("lsm: table writer: self-check failed: %w", err)
	}
	return data, meta, nil
}

// verifyMeta decodes meta and compares it with the table built: the
// fields verifyTable compares, every frame's entry (its bytes and
// checksum, records, fence, continues flag) and every key in the filter.
// The frames' records were compared as each was encoded.
func (t *tableWriter) verifyMeta(data, meta []byte) error {
	b := &t.b
	m, err := DecodeMeta(meta)
	if err != nil {
		return err
	}
	w := b.f.Width
	if err := checkMetaFields(m, b.f, b.n, len(data), b.opt, len(b.keys), b.transform, b.filterBits, b.fences[:w], b.last); err != nil {
		return err
	}
	if b.transform == transformColumns {
		// The frames were decoded with the dictionary in memory: the
		// meta must hold it (the run's first table), or name the table
		// that does, as the writer was told.
		switch {
		case m.version != b.opt.writeVersion():
			return fmt.Errorf("meta of format version %d, the frames were encoded in %d", m.version, b.opt.writeVersion())
		case m.dictRef != nil && !bytes.Equal(m.dictRef, b.opt.dictOwner):
			return fmt.Errorf("dictionary reference %x, the table was built with %x", m.dictRef, b.opt.dictOwner)
		case m.dictRef != nil && int(m.dictRefEntries) != b.dict.len():
			return fmt.Errorf("dictionary reference of %d entries, the table was built with %d", m.dictRefEntries, b.dict.len())
		case m.dictRef == nil && b.opt.dictOwner != nil:
			return fmt.Errorf("the meta holds a dictionary, the table was built to refer to %x's", b.opt.dictOwner)
		case m.dictRef == nil:
			if err := sameDict(m.dict, b.dict); err != nil {
				return err
			}
		}
	}
	if m.NumFrames() != len(b.frames) {
		return fmt.Errorf("decoded meta has %d frames, the table built %d", m.NumFrames(), len(b.frames))
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

// dropDict lets go of the shared dictionary the writer's last table was
// encoded with (and its rank index), before the writer is kept for a
// next merge: a run's dictionary at 1B is tens of MB.
func (t *tableWriter) dropDict() {
	t.b.dict, t.b.opt.sharedDict, t.b.opt.dictOwner, t.shell = nil, nil, nil, nil
}

// buildFastTable makes BuildTable's bytes of a fast table (opt.Fast) from
// recs with a tableWriter, which checks each frame as it is encoded,
// while its records are in the cache, where BuildTable's checks read all
// of a flush's records again. The data object is the writer's buffer:
// done, called once it has been put, keeps the writer for the next table.
func buildFastTable(f Format, recs []byte, opt TableOptions) (data, meta []byte, done func(), err error) {
	w := f.Width
	if w <= 0 || len(recs) == 0 || len(recs)%w != 0 {
		return nil, nil, nil, fmt.Errorf("lsm: table writer: %d bytes is not a positive number of %d-byte records", len(recs), w)
	}
	tw := flushWriters.take()
	if tw == nil {
		tw = &tableWriter{}
	}
	done = func() { flushWriters.keep(tw, func(kept, _ *tableWriter) bool { return kept == nil }) }
	if err := tw.reset(f, opt, len(recs)/w); err != nil {
		done()
		return nil, nil, nil, err
	}
	for o := 0; o < len(recs); o += w {
		if err := tw.add(recs[o : o+w]); err != nil {
			done()
			return nil, nil, nil, err
		}
	}
	if data, meta, err = tw.finish(); err != nil {
		done()
		return nil, nil, nil, err
	}
	return data, meta, done, nil
}

// flushWriters keeps a fast table writer and its buffers (a table's
// frames, ~30% of its records' bytes) between the tables writeTable
// builds whole (a flush every few seconds), as routedWriters does for
// merges.
var flushWriters idleCache[*tableWriter]

// sameDict reports how the dictionary a meta decoded to differs from the
// one its table was built with, if it does.
func sameDict(got, want *accountDict) error {
	if got.len() != want.len() || got.hasRevs() != want.hasRevs() {
		return fmt.Errorf("decoded dictionary of %d entries (revs %v), the table was built with %d (%v)", got.len(), got.hasRevs(), want.len(), want.hasRevs())
	}
	for i := range want.len() {
		gd, gc := got.account(i)
		wd, wc := want.account(i)
		if gd != wd || gc != wc || (want.hasRevs() && got.rev(i) != want.rev(i)) {
			return fmt.Errorf("decoded dictionary differs at entry %d", i)
		}
	}
	return nil
}
