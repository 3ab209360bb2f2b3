package lsm

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
)

// BuildTable encodes sorted, duplicate-free records (len(recs) a non-zero
// multiple of f.Width) into a data object (concatenated frames) and a meta
// object. It checks its input (order, shard) and its own output (decodes
// the meta again and every frame, compares with the input) before
// returning: data is checked just before it is written.
func BuildTable(f Format, recs []byte, opt TableOptions) (data, meta []byte, err error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	w := f.Width
	if len(recs) == 0 || len(recs)%w != 0 {
		return nil, nil, fmt.Errorf("lsm: BuildTable: %d bytes is not a positive number of %d-byte records", len(recs), w)
	}
	n := len(recs) / w
	if n > MaxTableRecords {
		return nil, nil, fmt.Errorf("lsm: BuildTable: %d records, more than MaxTableRecords (%d)", n, MaxTableRecords)
	}
	b := tableBuild{f: f, recs: recs, n: n, opt: opt}
	if err := b.setup(); err != nil {
		return nil, nil, err
	}
	if b.enc, err = encoderFor(opt.CompressionLevel); err != nil {
		return nil, nil, err
	}
	if err := b.checkRecords(); err != nil {
		return nil, nil, err
	}
	if err := b.pickTransform(); err != nil {
		return nil, nil, err
	}
	if data, err = b.buildFrames(); err != nil {
		return nil, nil, err
	}
	if meta, err = b.encodeMeta(len(data)); err != nil {
		return nil, nil, err
	}
	if err := verifyTable(f, recs, data, meta, opt, b.transform, b.filterBits, len(b.keys)); err != nil {
		return nil, nil, fmt.Errorf("lsm: BuildTable: self-check failed: %w", err)
	}
	return data, meta, nil
}

// tableBuild is a table BuildTable is making.
type tableBuild struct {
	f          Format
	recs       []byte
	n          int // records
	opt        TableOptions
	filterBits int
	enc        *zstd.Encoder
	perFrame   int // records a frame at most

	seed      uint64   // the filter's key seed
	keys      []uint64 // the filter keys of the distinct prefixes
	transform frameTransform
	layout    colLayout    // transformColumns
	dict      *accountDict // transformColumns: the account dictionary
	ranks     []uint32     // transformColumns: each record's account rank
	frames    []builtFrame

	// A table built frame by frame (tableWriter) keeps no records:
	// its frames' first records (fences, Width bytes each) and its last.
	fences []byte
	last   []byte
}

// builtFrame is a frame BuildTable wrote.
type builtFrame struct {
	start, n  int // records [start, start+n)
	length    int
	sum       uint64
	continues bool
}

func (b *tableBuild) rec(i int) []byte { return b.recs[i*b.f.Width : (i+1)*b.f.Width] }

// lastRecord is the table's last record (its meta's MaxKey).
func (b *tableBuild) lastRecord() []byte {
	if b.recs == nil {
		return b.last
	}
	return b.rec(b.n - 1)
}

// fence is frame k's first record.
func (b *tableBuild) fence(k int, fr builtFrame) []byte {
	if b.recs == nil {
		w := b.f.Width
		return b.fences[k*w : (k+1)*w]
	}
	return b.rec(fr.start)
}

// setup checks the format and the options that do not depend on the
// records (shard, filter bits) and sets the filter's width and seed and
// the records a frame (BuildTable's and tableWriter's).
func (b *tableBuild) setup() error {
	if err := b.f.check(); err != nil {
		return err
	}
	opt := b.opt
	if opt.ShardBits > MaxShardBits || uint64(opt.Shard) >= 1<<opt.ShardBits {
		return fmt.Errorf("lsm: BuildTable: shard %d of %d bits", opt.Shard, opt.ShardBits)
	}
	b.filterBits = opt.FilterBits
	if b.filterBits == 0 {
		b.filterBits = DefaultFilterBits
	}
	if b.filterBits != FilterBits8 && b.filterBits != FilterBits16 && (b.filterBits != FilterBlocked || opt.writeVersion() < 12) {
		return fmt.Errorf("lsm: BuildTable: filter bits %d not 8 or 16, nor the blocked kind from format version 12", b.filterBits)
	}
	b.perFrame = frameBytes(opt.writeVersion()) / b.f.Width
	if opt.frameMax > 0 {
		b.perFrame = min(b.perFrame, opt.frameMax)
	}
	b.seed = tableFilterSeed(opt.FilterSeed)
	return nil
}

// checkRecords checks order and shard, and collects the filter keys.
func (b *tableBuild) checkRecords() error {
	p := b.f.PrefixLen
	b.keys = make([]uint64, 0, b.n/4+1)
	for i := range b.n {
		if i > 0 {
			if c := compareRecords(b.rec(i-1), b.rec(i)); c >= 0 {
				return orderError(i, c, b.rec(i))
			}
			if bytes.Equal(b.rec(i - 1)[:p], b.rec(i)[:p]) {
				continue
			}
		}
		if err := b.addPrefix(b.rec(i)[:p]); err != nil {
			return err
		}
	}
	return nil
}

// orderError is the error of record i (rec), which compared c (>= 0)
// with the record before it.
func orderError(i, c int, rec []byte) error {
	what := "out of order"
	if c == 0 {
		what = "duplicated"
	}
	return fmt.Errorf("lsm: BuildTable: record %d %s: %x", i, what, rec)
}

// addPrefix checks that a new prefix is in the table's shard and adds its
// filter key.
func (b *tableBuild) addPrefix(pre []byte) error {
	if opt := b.opt; opt.ShardBits > 0 && ShardOf(pre, opt.ShardBits) != opt.Shard {
		return fmt.Errorf("lsm: BuildTable: prefix %x is in shard %d, not %d of %d bits",
			pre, ShardOf(pre, opt.ShardBits), opt.Shard, opt.ShardBits)
	}
	b.keys = append(b.keys, filterKey(pre, b.seed))
	return nil
}

// frameEnd is where a frame starting at recs[0] ends (records of width
// w, prefixes of p bytes) when more than perFrame records follow it:
// perFrame records, ended early at the last prefix boundary in its final
// eighth (above minFill records) if there is one.
func frameEnd(recs []byte, w, p, perFrame, minFill int) int {
	for c := perFrame; c > minFill; c-- {
		if !bytes.Equal(recs[(c-1)*w:(c-1)*w+p], recs[c*w:c*w+p]) {
			return c
		}
	}
	return perFrame
}

// appendFastFrame appends raw (records of width w) to data as a frame of
// the fast form: shuffled, then compressed with S2.
func appendFastFrame(data, raw []byte, w int) []byte {
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	tmp := (*bp)[:len(raw)]
	encodeTransform(transformShuffleS2, tmp, raw, w)
	if fastEncodeHook != nil {
		fastEncodeHook(tmp)
	}
	off := len(data)
	data = slices.Grow(data, s2.MaxEncodedLen(len(tmp)))
	return data[:off+len(s2.Encode(data[off:off+s2.MaxEncodedLen(len(tmp))], tmp))]
}

// fastEncodeHook, when set (tests), changes a frame's shuffled records
// before S2 encodes them: a fault the self-check must catch.
var fastEncodeHook func(shuffled []byte)

// pickTransform sets the frame transform (the option's, else columns
// for the formats the columnar codec knows, else the best of the zstd
// ones) and, for columns, the account dictionary.
func (b *tableBuild) pickTransform() error {
	layout, columnar := columnsLayout(b.f, b.opt.writeVersion())
	b.layout = layout
	b.transform = b.opt.transform
	switch {
	case b.opt.Fast && b.opt.transSet:
		return fmt.Errorf("lsm: BuildTable: a fast table with transform %v", b.transform)
	case b.opt.Fast && b.opt.writeVersion() < 11:
		return fmt.Errorf("lsm: BuildTable: a fast table in format version %d", b.opt.writeVersion())
	case b.opt.Fast:
		b.transform = transformShuffleS2
	case !b.opt.transSet && columnar:
		b.transform = transformColumns
	case !b.opt.transSet:
		b.transform = chooseTransform(b.enc, b.recs, b.f.Width, b.perFrame)
	case b.transform >= transformCount, b.transform == transformColumns && !columnar,
		b.transform == transformShuffleS2 && b.opt.writeVersion() < 11:
		return fmt.Errorf("lsm: BuildTable: transform %v for format %+v", b.transform, b.f)
	}
	if b.transform == transformColumns {
		if d := b.opt.sharedDict; d != nil {
			if b.opt.version != 0 {
				// A shared dictionary is counted in the current
				// version's layout (its keys and its index).
				return fmt.Errorf("lsm: BuildTable: a shared dictionary in format version %d", b.opt.version)
			}
			b.dict, b.ranks = d, ranksIn(b.recs, b.layout, d)
			return nil
		}
		b.dict, b.ranks = buildAccountDict(b.recs, b.layout)
		if !dictHasRevs(b.opt.writeVersion()) {
			b.dict.revs = nil
		}
		if b.layout.targetPlanes { // targets' DIDs are ranked too
			b.dict.index = newRankIndex(b.dict, b.layout.clockCol)
		}
	}
	if b.opt.sharedDict != nil || b.opt.dictOwner != nil {
		return fmt.Errorf("lsm: BuildTable: a shared dictionary for transform %v", b.transform)
	}
	return nil
}

// buildFrames encodes the records into frames (b.frames) and returns the
// data object: frames of perFrame records, each ended early at the last
// prefix boundary in its final eighth if there is one.
func (b *tableBuild) buildFrames() ([]byte, error) {
	w, p, n, perFrame := b.f.Width, b.f.PrefixLen, b.n, b.perFrame
	b.frames = make([]builtFrame, 0, n/max(perFrame*7/8, 1)+1)
	c := len(b.recs) / 4
	if b.transform == transformShuffleS2 { // S2 keeps about a quarter of the bytes
		c = len(b.recs)/3 + s2.MaxEncodedLen(perFrame*w)
	}
	data := make([]byte, 0, c)
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	minFill := perFrame - perFrame/8
	for s := 0; s < n; {
		e := min(s+perFrame, n)
		if e < n {
			e = s + frameEnd(b.recs[s*w:], w, p, perFrame, minFill)
		}
		raw := b.recs[s*w : e*w]
		off := len(data)
		if b.transform == transformColumns {
			data = b.appendColumnsFrame(data, raw, b.ranks[s:e])
		} else if b.transform == transformShuffleS2 {
			data = appendFastFrame(data, raw, w)
		} else {
			tmp := (*bp)[:len(raw)]
			encodeTransform(b.transform, tmp, raw, w)
			data = b.enc.EncodeAll(tmp, data)
		}
		fr := builtFrame{start: s, n: e - s, length: len(data) - off, sum: xxh3.Hash(data[off:])}
		if fr.length > maxFrameLength {
			return nil, fmt.Errorf("lsm: BuildTable: frame %d compressed to %d bytes", len(b.frames), fr.length)
		}
		if s > 0 {
			fr.continues = bytes.Equal(b.rec(s - 1)[:p], b.rec(s)[:p])
		}
		b.frames = append(b.frames, fr)
		s = e
	}
	return data, nil
}

// appendColumnsFrame appends raw (records of b's layout; ranks, their
// accounts' ranks in b.dict) to data as a frame of a columnar table: its
// columns (frame byte 0 = frameColumns), or, for records the columns do
// not shrink, delta+shuffle and zstd (byte 0 = frameDeltaZstd).
func (b *tableBuild) appendColumnsFrame(data, raw []byte, ranks []uint32) []byte {
	off := len(data)
	data = append(data, frameColumns)
	data = encodeColumns(data, raw, b.layout, ranks, b.dict.revs, b.dict.clocks, b.dict.index)
	if len(data)-off > len(raw) {
		bp := scratchPool.Get().(*[]byte)
		defer scratchPool.Put(bp)
		data = append(data[:off], frameDeltaZstd)
		tmp := (*bp)[:len(raw)]
		encodeTransform(transformDeltaShuffle, tmp, raw, b.f.Width)
		data = b.enc.EncodeAll(tmp, data)
	}
	return data
}

// checkMetaFields compares a decoded meta's fields with the table built:
// n records, dataBytes of data, its options and prefixes, its transform
// and filter width, its first and last records.
func checkMetaFields(m *TableMeta, f Format, n, dataBytes int, opt TableOptions, prefixes int, transform frameTransform, filterBits int, first, last []byte) error {
	switch {
	case m.Format != f, m.Records != uint64(n), m.DataBytes != uint64(dataBytes),
		m.ShardBits != opt.ShardBits, m.Shard != opt.Shard, m.Prefixes != uint64(prefixes),
		m.transform != transform, m.filterBits != filterBits,
		!bytes.Equal(m.MinKey, first), !bytes.Equal(m.MaxKey, last):
		return fmt.Errorf("decoded meta differs from the table built: %v", m)
	}
	return nil
}

// verifyTable decodes a table BuildTable just encoded and compares it with
// its input. Every distinct prefix of its input is looked up in the decoded filter as
// a query looks it up (not the keys the filter was built from: a fault in
// computing those would pass).
func verifyTable(f Format, recs, data, meta []byte, opt TableOptions, transform frameTransform, filterBits, prefixes int) error {
	m, err := DecodeMeta(meta)
	if err != nil {
		return err
	}
	if m.dictRef != nil {
		owner := &TableMeta{transform: transformColumns, layout: m.layout, version: m.version, dict: opt.sharedDict}
		if !bytes.Equal(m.dictRef, opt.dictOwner) {
			return fmt.Errorf("dictionary reference %x, the table was built with %x", m.dictRef, opt.dictOwner)
		}
		if err := m.useDict(owner); err != nil {
			return err
		}
	}
	w, p := f.Width, f.PrefixLen
	n := len(recs) / w
	if err := checkMetaFields(m, f, n, len(data), opt, prefixes, transform, filterBits, recs[:w], recs[len(recs)-w:]); err != nil {
		return err
	}
	var buf []byte
	at := 0
	for i := range m.NumFrames() {
		off, l := m.ByteRange(i, i)
		buf, err = m.decodeFrame(i, data[off:off+l], buf, false)
		if err != nil {
			return err
		}
		if !bytes.Equal(buf, recs[at:at+len(buf)]) {
			return fmt.Errorf("frame %d decodes to different records", i)
		}
		at += len(buf)
	}
	if at != len(recs) {
		return fmt.Errorf("frames hold %d bytes of %d", at, len(recs))
	}
	for i := 0; i < n; i++ {
		r := recs[i*w : i*w+p]
		if i > 0 && bytes.Equal(recs[(i-1)*w:(i-1)*w+p], r) {
			continue
		}
		if !m.MayContain(r) {
			return fmt.Errorf("filter misses prefix %x", r)
		}
	}
	return nil
}
