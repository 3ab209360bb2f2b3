// Table format, version 2 (TableFormatVersion); version 1 tables still
// read (the differences are marked "v2" below).
//
// A table is an immutable sorted run of distinct fixed-width records, stored
// as two objects: a data object (tables/<tree>/<id>.data, in object storage,
// read with ranged GETs) and a meta object (tables/<tree>/<id>.meta, small,
// on every node's local disk and in object storage). A query needs the meta
// to decide whether and where to read the data; everything in the data
// object is checked against the meta before use.
//
// # Data object
//
// The concatenation of the table's frames, frame 0 at offset 0, each frame
// directly after the previous one: no header, padding or trailer, so any run
// of adjacent frames is one byte range (ByteRange). Frame i holds records
// [r_i, r_i + n_i) of the table, where n_i >= 1 and n_i*W <= FrameBytesMax:
//
//   - BuildTable fills a frame with FrameBytesMax/W records, but ends it
//     early, at the last key-prefix boundary among its final eighth, if there
//     is one, so that a prefix with few records rarely straddles two frames;
//   - with frame transform 4 (columns, v2 only; BacklinkFormat and
//     RevocationFormat): byte 0 of the frame is 0 and the rest is the
//     columnar encoding of the n_i records (codec.go documents it byte by
//     byte), or, for a frame whose columns would not be smaller than its
//     records, byte 0 is 1 and the rest is the frame as transform 3 makes
//     it (below: delta, shuffle, zstd);
//   - with transforms 0-3, the n_i*W record bytes are transformed by the
//     table's frame transform (meta byte 14) into the same number of bytes:
//     0 (none): unchanged;
//     1 (shuffle): column-major, byte j of record r at offset j*n_i + r;
//     2 (XOR): record r XOR record r-1 (record -1 is all zeros), shuffled;
//     3 (delta): each 8-byte big-endian word of record r minus the same
//     word of record r-1 (all zeros for r = 0), wrapping, zigzag-encoded
//     (d<<1 ^ d>>63, arithmetic shift) and stored big-endian, a trailing
//     partial word XORed instead, then shuffled;
//   - the result is compressed as one zstd frame (RFC 8878): single segment,
//     no dictionary, no zstd content checksum (the meta holds a checksum of
//     the compressed bytes), window <= FrameBytesMax.
//
// # Meta object
//
// Integers are little-endian; records (fences, the last key) are their own
// bytes. W is the record width, F the frame count, H the header size: 64 in
// version 1, 72 in version 2.
//
//	offset          size        field
//	0               8           magic "EDDYMETA"
//	8               2           format version (1 or 2); a reader refuses
//	                            newer versions with ErrVersion
//	10              2           record width W (1..MaxWidth)
//	12              2           key prefix length P (1..W): what queries ask
//	                            for and what the filter holds
//	14              1           frame transform: 0 none, 1 byte shuffle,
//	                            2 XOR with previous record + shuffle, 3
//	                            zigzag word delta with previous record +
//	                            shuffle (frame.go), 4 columns (codec.go;
//	                            v2, widths 64 and 32 with prefix 24 only)
//	15              1           filter fingerprint bits: 8 or 16
//	16              1           shard bits (0..MaxShardBits)
//	17              3           reserved, zero
//	20              4           shard (< 2^shard bits; 0 when shard bits is 0);
//	                            every key prefix p has ShardOf(p, bits) == shard
//	24              8           records N (1..MaxTableRecords)
//	32              8           data object bytes (the sum of frame lengths)
//	40              8           distinct key prefixes (1..N): the filter's keys
//	48              8           filter key seed: each prefix p enters the filter
//	                            as xxh3.HashSeed(p, seed)
//	56              4           frame count F (1..N)
//	60              4           filter section bytes B
//	64              4           v2: dictionary section bytes D (0 unless
//	                            the transform is 4)
//	68              4           v2: reserved, zero
//	H               W           the table's last record (MaxKey)
//	H+W             F*(17+W)    frame entries, in order:
//	                              0   4  compressed length (1..maxFrameLength)
//	                              4   4  records n_i (1..FrameBytesMax/W)
//	                              8   8  xxh3-64 of the compressed bytes
//	                              16  1  flags: bit 0 "continues": the first
//	                                     record's P-byte prefix also appears in
//	                                     the previous frame; other bits zero
//	                              17  W  the frame's first record (its fence)
//	H+W+F*(17+W)    B           filter section (below)
//	...+B           D           v2: dictionary section (codec.go's
//	                            appendDict: the table's accounts)
//	...+D           8           xxh3-64 of every byte before it
//
// The filter section is a binary fuse filter (3-wise, FastFilter/xorfilter
// BinaryFuse[uint8 or uint16]) over the filter keys of the distinct
// P-byte prefixes:
//
//	offset  size   field
//	0       8      fuse seed
//	8       4      segment length L (a power of two, <= 2^18)
//	12      4      segment length mask (L - 1)
//	16      4      segment count C (>= 1)
//	20      4      segment count length (C * L)
//	24      S*b    fingerprints, S = (C + 2) * L of b = bits/8 bytes each
//	               (little-endian)
//
// A key k is present when fp(h) ^ f[h0] ^ f[h1] ^ f[h2] == 0, where h =
// murmur64(k + fuse seed), fp(h) = h ^ h>>32 truncated to b bytes, h0 =
// hi64(h * C*L), h1 = (h0 + L) ^ (h>>18 & (L-1)), h2 = (h0 + 2L) ^ (h &
// (L-1)): the library's Contains, which is therefore part of this format
// (a change to it needs a new format version).
//
// Frame offsets are not stored: frame i starts at the sum of the lengths of
// frames 0..i-1. The first record of frame 0 is the table's MinKey. Fences
// are strictly increasing, the last record is >= the last fence, n_i sum to
// N, lengths sum to the data object bytes, and a frame whose fence prefix
// equals the previous fence's prefix has "continues" set; DecodeMeta checks
// all of it, and that the filter holds every fence's prefix.
//
// DecodeFrame checks, for frame i: the length and checksum of the bytes
// fetched, that they decode to exactly n_i*W bytes (every column consumed
// exactly, for transform 4), that the first
// record equals the fence, that records strictly increase, that the last is
// below the next fence (or equals MaxKey in the last frame), and that the
// next frame's "continues" flag matches the last record's prefix.

package lsm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
)

// Format describes one tree's records.
type Format struct {
	Width     int // record bytes: 64 backlinks, 32 revocations, 16 for PLC maps
	PrefixLen int // bytes of the key prefix queries ask for (24: a target / a source RecordID)
}

// The trees' formats.
var (
	BacklinkFormat   = Format{Width: 64, PrefixLen: 24}
	RevocationFormat = Format{Width: 32, PrefixLen: 24}
)

// FrameBytesMax is the most uncompressed bytes in a frame: small enough that
// a query for a rare key reads little (a frame compresses to ~15 KiB),
// large enough that zstd has context and that the fences (one per frame)
// stay about 1/800 of the uncompressed data. One ranged GET reads adjacent
// frames.
const FrameBytesMax = 64 << 10

// TableFormatVersion is the version of the table format BuildTable writes
// (see the top of table.go): version 1 has frame transforms 0-3, zstd
// frames and 8- or 16-bit binary fuse filters; version 2 adds 8 header
// bytes, the dictionary section and the columnar frame transform 4
// (codec.go). DecodeMeta reads versions 1..TableFormatVersion.
const TableFormatVersion = 2

// Limits. Everything read from a meta is checked against these (and against
// the meta's own size) before it is trusted.
const (
	// MaxWidth bounds a record: the widest tree has 64-byte records; 256
	// leaves room while keeping at least 256 records a frame.
	MaxWidth = 256
	// MaxTableRecords bounds one table: 2^28 backlinks are 16 GiB before
	// compression, a 16-bit filter over that many prefixes ~600 MiB.
	// Compaction shards a run (ShardOf) so that each table stays below: the
	// whole network (~10^11 links) fits runs of 512 shards.
	MaxTableRecords = 1 << 28
	// MaxShardBits bounds the shard split of a run: 65536 tables per run is
	// far past any useful split, and keeps shard numbers small.
	MaxShardBits = 16
	// MaxMetaBytes bounds a meta object: the largest table's filter and
	// fences (MaxTableRecords prefixes at 16 bits, one fence per 256
	// records at MaxWidth: ~900 MiB) fit below 1 GiB.
	MaxMetaBytes = 1 << 30
	// maxFrameLength bounds a compressed frame: zstd never expands its
	// input by more than a few bytes per 128 KiB block.
	maxFrameLength = FrameBytesMax + 1024
)

// Meta layout sizes.
const (
	metaMagic       = "EDDYMETA"
	metaHeaderSize  = 64 // version 1
	metaHeader2Size = 72 // version 2
	frameEntryFixed = 17 // a frame entry without its fence
	metaTrailerSize = 8
	flagContinues   = 1 << 0
)

// ErrCorrupt is the error class of corrupt tables: a meta or a frame that
// fails its checksum or any structural check. Errors wrap it.
var ErrCorrupt = errors.New("lsm: corrupt table")

// ErrVersion reports a meta written by a newer format version than this
// binary reads: not corruption, an upgrade is needed.
var ErrVersion = errors.New("lsm: table format version not supported")

func corruptf(format string, args ...any) error {
	return fmt.Errorf("lsm: meta: "+format+": %w", append(args, ErrCorrupt)...)
}

// TableOptions are the per-table choices BuildTable records in the meta.
type TableOptions struct {
	ShardBits uint8  // bits of ShardOf the run is split by (0: a delta run, all shards)
	Shard     uint32 // the table's shard, < 1<<ShardBits; every key prefix must be in it
	// FilterSeed seeds the filter's key hash (mixed with a constant that
	// differs from ShardOf's, so the filter is independent of the shard).
	FilterSeed uint64
	// CompressionLevel is a zstd level (1 fastest .. 22 smallest, mapped
	// onto klauspost/compress's four encoders); 0 is
	// DefaultCompressionLevel.
	CompressionLevel int
	// FilterBits is the filter's fingerprint width, 8 or 16; 0 is
	// DefaultFilterBits.
	FilterBits int

	transform frameTransform // test hook: the frame transform (if transSet; else chooseTransform)
	transSet  bool
	frameMax  int // test hook: records per frame (0: FrameBytesMax/Width)
}

func (f Format) check() error {
	if f.Width < 1 || f.Width > MaxWidth || f.PrefixLen < 1 || f.PrefixLen > f.Width {
		return fmt.Errorf("lsm: bad format width %d prefix %d", f.Width, f.PrefixLen)
	}
	return nil
}

// TableMeta is a decoded meta object.
type TableMeta struct {
	Format    Format
	Records   uint64
	DataBytes uint64
	ShardBits uint8
	Shard     uint32
	MinKey    []byte // first record
	MaxKey    []byte // last record
	Frames    []FrameMeta
	// Prefixes is the number of distinct key prefixes (the filter's keys).
	Prefixes uint64
	// MetaBytes is the size of the encoded meta.
	MetaBytes int
	// Name, if the caller sets it (the table's id), prefixes error messages.
	Name string

	transform  frameTransform
	filterBits int
	filter     *filter
	version    int
	dict       *accountDict // transformColumns: the account dictionary
	layout     colLayout    // transformColumns: the record layout
}

// FrameMeta describes one frame of a table.
type FrameMeta struct {
	First     []byte // the frame's first record (full width)
	Offset    uint64 // in the data object
	Length    uint32 // compressed bytes
	Records   uint32
	Checksum  uint64 // xxh3-64 of the compressed bytes
	Continues bool   // the first record's prefix also appears in the previous frame
}

// BuildTable encodes sorted, duplicate-free records (len(recs) a non-zero
// multiple of f.Width) into a data object (concatenated frames) and a meta
// object. It checks its input (order, shard) and its own output (decodes
// the meta again and every frame, compares with the input) before
// returning: data is checked just before it is written.
func BuildTable(f Format, recs []byte, opt TableOptions) (data, meta []byte, err error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	w, p := f.Width, f.PrefixLen
	if len(recs) == 0 || len(recs)%w != 0 {
		return nil, nil, fmt.Errorf("lsm: BuildTable: %d bytes is not a positive number of %d-byte records", len(recs), w)
	}
	n := len(recs) / w
	if n > MaxTableRecords {
		return nil, nil, fmt.Errorf("lsm: BuildTable: %d records, more than MaxTableRecords (%d)", n, MaxTableRecords)
	}
	if opt.ShardBits > MaxShardBits || uint64(opt.Shard) >= 1<<opt.ShardBits {
		return nil, nil, fmt.Errorf("lsm: BuildTable: shard %d of %d bits", opt.Shard, opt.ShardBits)
	}
	filterBits := opt.FilterBits
	if filterBits == 0 {
		filterBits = DefaultFilterBits
	}
	if filterBits != FilterBits8 && filterBits != FilterBits16 {
		return nil, nil, fmt.Errorf("lsm: BuildTable: filter bits %d not 8 or 16", filterBits)
	}
	enc, err := encoderFor(opt.CompressionLevel)
	if err != nil {
		return nil, nil, err
	}
	perFrame := FrameBytesMax / w
	if opt.frameMax > 0 {
		perFrame = min(perFrame, opt.frameMax)
	}
	rec := func(i int) []byte { return recs[i*w : (i+1)*w] }

	// Check order and shard, and collect the filter keys.
	seed := tableFilterSeed(opt.FilterSeed)
	keys := make([]uint64, 0, n/4+1)
	for i := range n {
		if i > 0 {
			c := compareRecords(rec(i-1), rec(i))
			if c >= 0 {
				what := "out of order"
				if c == 0 {
					what = "duplicated"
				}
				return nil, nil, fmt.Errorf("lsm: BuildTable: record %d %s: %x", i, what, rec(i))
			}
			if bytes.Equal(rec(i - 1)[:p], rec(i)[:p]) {
				continue
			}
		}
		pre := rec(i)[:p]
		if opt.ShardBits > 0 && ShardOf(pre, opt.ShardBits) != opt.Shard {
			return nil, nil, fmt.Errorf("lsm: BuildTable: prefix %x is in shard %d, not %d of %d bits",
				pre, ShardOf(pre, opt.ShardBits), opt.Shard, opt.ShardBits)
		}
		keys = append(keys, filterKey(pre, seed))
	}
	prefixes := len(keys)

	layout, columnar := columnsLayout(f)
	transform := opt.transform
	switch {
	case !opt.transSet && columnar:
		transform = transformColumns
	case !opt.transSet:
		transform = chooseTransform(enc, recs, w, perFrame)
	case transform >= transformCount, transform == transformColumns && !columnar:
		return nil, nil, fmt.Errorf("lsm: BuildTable: transform %v for format %+v", transform, f)
	}
	var dict *accountDict
	var ranks []uint32
	if transform == transformColumns {
		dict, ranks = buildAccountDict(recs, layout)
	}

	// Frames.
	type frameInfo struct {
		start, n  int
		length    int
		sum       uint64
		continues bool
	}
	frames := make([]frameInfo, 0, n/max(perFrame*7/8, 1)+1)
	data = make([]byte, 0, len(recs)/4)
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	minFill := perFrame - perFrame/8
	for s := 0; s < n; {
		e := min(s+perFrame, n)
		if e < n {
			for c := e; c > s+minFill; c-- {
				if !bytes.Equal(rec(c - 1)[:p], rec(c)[:p]) {
					e = c
					break
				}
			}
		}
		raw := recs[s*w : e*w]
		off := len(data)
		if transform == transformColumns {
			// Columns (frame byte 0 = 0), or, for records the columns
			// do not shrink, delta+shuffle and zstd (byte 0 = 1).
			data = append(data, frameColumns)
			data = encodeColumns(data, raw, layout, ranks[s:e])
			if len(data)-off > len(raw) {
				data = data[:off]
				data = append(data, frameDeltaZstd)
				tmp := (*bp)[:len(raw)]
				encodeTransform(transformDeltaShuffle, tmp, raw, w)
				data = enc.EncodeAll(tmp, data)
			}
		} else {
			tmp := (*bp)[:len(raw)]
			encodeTransform(transform, tmp, raw, w)
			data = enc.EncodeAll(tmp, data)
		}
		fr := frameInfo{start: s, n: e - s, length: len(data) - off, sum: xxh3.Hash(data[off:])}
		if fr.length > maxFrameLength {
			return nil, nil, fmt.Errorf("lsm: BuildTable: frame %d compressed to %d bytes", len(frames), fr.length)
		}
		if s > 0 {
			fr.continues = bytes.Equal(rec(s - 1)[:p], rec(s)[:p])
		}
		frames = append(frames, fr)
		s = e
	}

	// Meta.
	size := metaHeader2Size + w + len(frames)*(frameEntryFixed+w) + metaTrailerSize
	meta = make([]byte, metaHeader2Size, size+filterHeaderSize+prefixes*5/2+dict.len()*6+64)
	copy(meta, metaMagic)
	binary.LittleEndian.PutUint16(meta[8:], TableFormatVersion)
	binary.LittleEndian.PutUint16(meta[10:], uint16(w))
	binary.LittleEndian.PutUint16(meta[12:], uint16(p))
	meta[14] = byte(transform)
	meta[15] = byte(filterBits)
	meta[16] = opt.ShardBits
	binary.LittleEndian.PutUint32(meta[20:], opt.Shard)
	binary.LittleEndian.PutUint64(meta[24:], uint64(n))
	binary.LittleEndian.PutUint64(meta[32:], uint64(len(data)))
	binary.LittleEndian.PutUint64(meta[40:], uint64(prefixes))
	binary.LittleEndian.PutUint64(meta[48:], seed)
	binary.LittleEndian.PutUint32(meta[56:], uint32(len(frames)))
	meta = append(meta, rec(n-1)...)
	for _, fr := range frames {
		meta = binary.LittleEndian.AppendUint32(meta, uint32(fr.length))
		meta = binary.LittleEndian.AppendUint32(meta, uint32(fr.n))
		meta = binary.LittleEndian.AppendUint64(meta, fr.sum)
		var flags byte
		if fr.continues {
			flags |= flagContinues
		}
		meta = append(meta, flags)
		meta = append(meta, rec(fr.start)...)
	}
	filterStart := len(meta)
	meta, err = buildFilter(meta, keys, filterBits)
	if err != nil {
		return nil, nil, err
	}
	binary.LittleEndian.PutUint32(meta[60:], uint32(len(meta)-filterStart))
	if transform == transformColumns {
		dictStart := len(meta)
		meta = appendDict(meta, dict, enc)
		binary.LittleEndian.PutUint32(meta[64:], uint32(len(meta)-dictStart))
	}
	meta = binary.LittleEndian.AppendUint64(meta, xxh3.Hash(meta))
	if len(meta) > MaxMetaBytes {
		return nil, nil, fmt.Errorf("lsm: BuildTable: meta of %d bytes exceeds MaxMetaBytes", len(meta))
	}

	if err := verifyTable(f, recs, data, meta, opt, transform, filterBits, prefixes); err != nil {
		return nil, nil, fmt.Errorf("lsm: BuildTable: self-check failed: %w", err)
	}
	return data, meta, nil
}

// verifyTable decodes a table BuildTable just encoded and compares it with
// its input.
func verifyTable(f Format, recs, data, meta []byte, opt TableOptions, transform frameTransform, filterBits, prefixes int) error {
	m, err := DecodeMeta(meta)
	if err != nil {
		return err
	}
	w, p := f.Width, f.PrefixLen
	n := len(recs) / w
	switch {
	case m.Format != f, m.Records != uint64(n), m.DataBytes != uint64(len(data)),
		m.ShardBits != opt.ShardBits, m.Shard != opt.Shard, m.Prefixes != uint64(prefixes),
		m.transform != transform, m.filterBits != filterBits,
		!bytes.Equal(m.MinKey, recs[:w]), !bytes.Equal(m.MaxKey, recs[len(recs)-w:]):
		return fmt.Errorf("decoded meta differs from the table built: %v", m)
	}
	var buf []byte
	at := 0
	for i := range m.Frames {
		off, l := m.ByteRange(i, i)
		buf, err = m.DecodeFrame(i, data[off:off+l], buf)
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

// DecodeMeta decodes a meta object. It verifies the magic number, the
// version (a newer one is ErrVersion), the trailing checksum and the
// structure; anything inconsistent is ErrCorrupt. It never panics, and
// allocates in proportion to len(b) only. The result does not refer to b.
func DecodeMeta(b []byte) (*TableMeta, error) {
	// Magic and version first: a newer version may change everything after.
	if len(b) < 10 {
		return nil, corruptf("%d bytes is too short", len(b))
	}
	if string(b[:8]) != metaMagic {
		return nil, corruptf("bad magic %q", b[:8])
	}
	switch v := binary.LittleEndian.Uint16(b[8:]); {
	case v == 0:
		return nil, corruptf("format version 0")
	case v > TableFormatVersion:
		return nil, fmt.Errorf("%w: meta has version %d, this binary reads up to %d", ErrVersion, v, TableFormatVersion)
	}
	version := int(binary.LittleEndian.Uint16(b[8:]))
	hdr := metaHeaderSize
	if version >= 2 {
		hdr = metaHeader2Size
	}
	if len(b) < hdr+1+frameEntryFixed+1+filterHeaderSize+metaTrailerSize {
		return nil, corruptf("%d bytes is too short", len(b))
	}
	if len(b) > MaxMetaBytes {
		return nil, corruptf("%d bytes exceeds MaxMetaBytes", len(b))
	}
	body := b[:len(b)-metaTrailerSize]
	if got, want := xxh3.Hash(body), binary.LittleEndian.Uint64(b[len(body):]); got != want {
		return nil, corruptf("checksum mismatch (%016x, stored %016x)", got, want)
	}

	w := int(binary.LittleEndian.Uint16(b[10:]))
	p := int(binary.LittleEndian.Uint16(b[12:]))
	m := &TableMeta{
		Format:    Format{Width: w, PrefixLen: p},
		transform: frameTransform(b[14]),
		ShardBits: b[16],
		Shard:     binary.LittleEndian.Uint32(b[20:]),
		Records:   binary.LittleEndian.Uint64(b[24:]),
		DataBytes: binary.LittleEndian.Uint64(b[32:]),
		Prefixes:  binary.LittleEndian.Uint64(b[40:]),
		MetaBytes: len(b),
		version:   version,
	}
	var dictBytes uint64
	if version >= 2 {
		dictBytes = uint64(binary.LittleEndian.Uint32(b[64:]))
		if r := binary.LittleEndian.Uint32(b[68:]); r != 0 {
			return nil, corruptf("reserved header bytes %08x", r)
		}
	}
	filterBits := int(b[15])
	m.filterBits = filterBits
	keySeed := binary.LittleEndian.Uint64(b[48:])
	nFrames := uint64(binary.LittleEndian.Uint32(b[56:]))
	filterBytes := uint64(binary.LittleEndian.Uint32(b[60:]))
	switch {
	case m.Format.check() != nil:
		return nil, corruptf("width %d prefix %d", w, p)
	case m.transform >= transformCount, m.transform == transformColumns && version < 2:
		return nil, corruptf("unknown frame transform %d", m.transform)
	case filterBits != FilterBits8 && filterBits != FilterBits16:
		return nil, corruptf("filter bits %d", filterBits)
	case b[17] != 0 || b[18] != 0 || b[19] != 0:
		return nil, corruptf("reserved header bytes %x", b[17:20])
	case m.ShardBits > MaxShardBits || uint64(m.Shard) >= 1<<m.ShardBits:
		return nil, corruptf("shard %d of %d bits", m.Shard, m.ShardBits)
	case m.Records == 0 || m.Records > MaxTableRecords:
		return nil, corruptf("%d records", m.Records)
	case m.Prefixes == 0 || m.Prefixes > m.Records:
		return nil, corruptf("%d prefixes for %d records", m.Prefixes, m.Records)
	case nFrames == 0 || nFrames > m.Records:
		return nil, corruptf("%d frames for %d records", nFrames, m.Records)
	}
	entry := uint64(frameEntryFixed + w)
	// Every term is bounded (nFrames < 2^32, entry < 2^9, filterBytes <
	// 2^32), so the sum cannot overflow.
	if want := uint64(hdr) + uint64(w) + nFrames*entry + filterBytes + dictBytes + metaTrailerSize; want != uint64(len(b)) {
		return nil, corruptf("size %d, fields say %d", len(b), want)
	}
	filterAt := hdr + w + int(nFrames)*int(entry)
	fb := b[filterAt : filterAt+int(filterBytes)]
	if m.transform == transformColumns {
		l, ok := columnsLayout(m.Format)
		if !ok {
			return nil, corruptf("columnar transform for width %d prefix %d", w, p)
		}
		m.layout = l
		d, err := decodeDict(b[filterAt+int(filterBytes) : filterAt+int(filterBytes)+int(dictBytes)])
		if err != nil {
			return nil, err
		}
		if uint64(d.len()) > m.Records/2 {
			return nil, corruptf("dictionary of %d entries for %d records", d.len(), m.Records)
		}
		m.dict = d
	} else if dictBytes != 0 {
		return nil, corruptf("dictionary section without the columnar transform")
	}
	if sz, err := filterSectionSize(fb, filterBits); err != nil {
		return nil, err
	} else if sz != filterBytes {
		return nil, corruptf("filter section %d bytes, its header says %d", filterBytes, sz)
	}

	// Fences and the last key share one buffer; nothing refers to b.
	keys := make([]byte, (int(nFrames)+1)*w)
	m.MaxKey = keys[:w:w]
	copy(m.MaxKey, b[hdr:])
	m.Frames = make([]FrameMeta, nFrames)
	perFrame := uint32(FrameBytesMax / w)
	var offset, records uint64
	at := hdr + w
	for i := range m.Frames {
		e := b[at : at+int(entry)]
		at += int(entry)
		fr := &m.Frames[i]
		fr.Offset = offset
		fr.Length = binary.LittleEndian.Uint32(e[0:])
		fr.Records = binary.LittleEndian.Uint32(e[4:])
		fr.Checksum = binary.LittleEndian.Uint64(e[8:])
		flags := e[16]
		fr.Continues = flags&flagContinues != 0
		fr.First = keys[(i+1)*w : (i+2)*w : (i+2)*w]
		copy(fr.First, e[frameEntryFixed:])
		switch {
		case fr.Length == 0 || fr.Length > maxFrameLength:
			return nil, corruptf("frame %d length %d", i, fr.Length)
		case fr.Records == 0 || fr.Records > perFrame:
			return nil, corruptf("frame %d holds %d records", i, fr.Records)
		case flags&^flagContinues != 0:
			return nil, corruptf("frame %d flags %#x", i, flags)
		}
		if i == 0 {
			if fr.Continues {
				return nil, corruptf("frame 0 continues")
			}
		} else {
			prev := m.Frames[i-1].First
			if compareRecords(prev, fr.First) >= 0 {
				return nil, corruptf("frame %d fence not above frame %d's", i, i-1)
			}
			if bytes.Equal(prev[:p], fr.First[:p]) && !fr.Continues {
				return nil, corruptf("frame %d shares its fence prefix with frame %d but does not continue", i, i-1)
			}
		}
		offset += uint64(fr.Length)
		records += uint64(fr.Records)
	}
	if offset != m.DataBytes {
		return nil, corruptf("frames hold %d bytes, the header says %d", offset, m.DataBytes)
	}
	if records != m.Records {
		return nil, corruptf("frames hold %d records, the header says %d", records, m.Records)
	}
	m.MinKey = m.Frames[0].First
	last := m.Frames[len(m.Frames)-1]
	if c := compareRecords(last.First, m.MaxKey); c > 0 || (c == 0 && last.Records != 1) || (c < 0 && last.Records == 1) {
		return nil, corruptf("last key %x does not fit the last frame (fence %x, %d records)", m.MaxKey, last.First, last.Records)
	}
	m.filter = decodeFilter(fb, filterBits, keySeed)
	for i := range m.Frames {
		if !m.MayContain(m.Frames[i].First[:p]) {
			return nil, corruptf("filter lacks frame %d's fence prefix", i)
		}
	}
	if !m.MayContain(m.MaxKey[:p]) {
		return nil, corruptf("filter lacks the last key's prefix")
	}
	return m, nil
}

// MayContain reports whether the table may hold records whose key prefix
// is prefix (PrefixLen bytes). False is certain; true is wrong for about one
// absent prefix in 2^FilterBits. The filter knows PrefixLen-byte prefixes
// only: for any other length the answer is true.
func (m *TableMeta) MayContain(prefix []byte) bool {
	if len(prefix) != m.Format.PrefixLen {
		return true
	}
	return m.filter.contains(prefix)
}

// FramesFor returns the inclusive range of frames [first, last] that may hold
// records whose first len(prefix) bytes equal prefix, and ok=false if none
// can (the prefix is outside [MinKey, MaxKey]). It uses the fences only (a
// binary search), not the filter. prefix is normally PrefixLen bytes; any
// length from 1 to Width works, but only a PrefixLen-byte prefix can use the
// frames' "continues" flags to skip the frame before its first fence match.
func (m *TableMeta) FramesFor(prefix []byte) (first, last int, ok bool) {
	l := len(prefix)
	if l == 0 || l > m.Format.Width || len(m.Frames) == 0 {
		return 0, 0, false
	}
	if bytes.Compare(prefix, m.MaxKey[:l]) > 0 || bytes.Compare(prefix, m.MinKey[:l]) < 0 {
		return 0, 0, false
	}
	// Frames whose fence prefix is <= prefix: [0, hi).
	hi := sort.Search(len(m.Frames), func(i int) bool { return bytes.Compare(m.Frames[i].First[:l], prefix) > 0 })
	// The first frame whose fence prefix is >= prefix.
	lo := sort.Search(hi, func(i int) bool { return bytes.Compare(m.Frames[i].First[:l], prefix) >= 0 })
	last = hi - 1
	if lo > last {
		// No fence starts with prefix: its records, if any, are inside the
		// frame whose range straddles it.
		return last, last, true
	}
	first = lo
	if lo > 0 && (l != m.Format.PrefixLen || m.Frames[lo].Continues) {
		first = lo - 1
	}
	return first, last, true
}

// FramesForRange returns the inclusive range of frames that may hold
// records whose first len(lo) bytes are in [lo, hi] (lo and hi of the same
// length, 1..Width), ok=false if none can. Fences only.
func (m *TableMeta) FramesForRange(lo, hi []byte) (first, last int, ok bool) {
	l := len(lo)
	if l == 0 || l != len(hi) || l > m.Format.Width || len(m.Frames) == 0 || bytes.Compare(lo, hi) > 0 {
		return 0, 0, false
	}
	if bytes.Compare(lo, m.MaxKey[:l]) > 0 || bytes.Compare(hi, m.MinKey[:l]) < 0 {
		return 0, 0, false
	}
	// Last: the last frame whose fence prefix is <= hi.
	last = sort.Search(len(m.Frames), func(i int) bool { return bytes.Compare(m.Frames[i].First[:l], hi) > 0 }) - 1
	if bytes.Compare(lo, m.MinKey[:l]) <= 0 {
		return 0, last, true
	}
	f, _, ok := m.FramesFor(lo)
	if !ok {
		return 0, 0, false
	}
	return f, last, true
}

// ByteRange returns the byte range of the data object holding frames
// first..last (adjacent: one ranged GET), or (0, 0) if the range is invalid.
func (m *TableMeta) ByteRange(first, last int) (off, n int64) {
	if first < 0 || last >= len(m.Frames) || first > last {
		return 0, 0
	}
	a, z := &m.Frames[first], &m.Frames[last]
	return int64(a.Offset), int64(z.Offset + uint64(z.Length) - a.Offset)
}

// DecodeFrame verifies and decompresses frame i from its compressed bytes as
// fetched, returning the frame's records (Records*Width bytes, in dst if it
// is large enough). It checks the length and checksum, the decompressed
// size, that the first record equals the fence, that records strictly
// increase and stay below the next frame's fence (or end at MaxKey), and
// the next frame's "continues" flag; any failure is ErrCorrupt. dst must
// not overlap compressed. Safe for concurrent use.
func (m *TableMeta) DecodeFrame(i int, compressed []byte, dst []byte) ([]byte, error) {
	if i < 0 || i >= len(m.Frames) {
		return nil, fmt.Errorf("lsm: %sframe %d out of range [0, %d)", m.namePrefix(), i, len(m.Frames))
	}
	fr := &m.Frames[i]
	bad := func(format string, args ...any) error {
		return fmt.Errorf("lsm: %sframe %d: "+format+": %w", append(append([]any{m.namePrefix(), i}, args...), ErrCorrupt)...)
	}
	if len(compressed) != int(fr.Length) {
		return nil, bad("%d bytes, want %d", len(compressed), fr.Length)
	}
	if got := xxh3.Hash(compressed); got != fr.Checksum {
		return nil, bad("checksum mismatch (%016x, want %016x)", got, fr.Checksum)
	}
	w := m.Format.Width
	want := int(fr.Records) * w
	dec, err := frameDecoder()
	if err != nil {
		return nil, err
	}
	// The decoder gets zstdSlack bytes of room past the frame (its fast
	// path); it can write no more than that, and a frame whose size is
	// not exactly want is corrupt.
	if m.transform == transformColumns {
		if cap(dst) < want {
			dst = make([]byte, want)
		}
		dst = dst[:want]
		if err := m.decodeColumnsFrame(dst, compressed, dec); err != nil {
			return nil, bad("%v", err)
		}
	} else if m.transform == transformNone {
		if cap(dst) < want+zstdSlack {
			dst = make([]byte, 0, want+zstdSlack)
		}
		out, err := dec.DecodeAll(compressed, dst[:0:want+zstdSlack])
		if err != nil {
			return nil, bad("zstd: %v", err)
		}
		if len(out) != want || (want > 0 && &out[0] != &dst[:1][0]) {
			return nil, bad("decompressed to %d bytes, want %d", len(out), want)
		}
		dst = out
	} else {
		if cap(dst) < want {
			dst = make([]byte, want)
		}
		dst = dst[:want]
		bp := scratchPool.Get().(*[]byte)
		out, err := dec.DecodeAll(compressed, (*bp)[:0:want+zstdSlack])
		if err == nil && len(out) != want {
			err = fmt.Errorf("decompressed to %d bytes, want %d", len(out), want)
		}
		if err != nil {
			scratchPool.Put(bp)
			return nil, bad("zstd: %v", err)
		}
		decodeTransform(m.transform, dst, out, w)
		scratchPool.Put(bp)
	}
	if err := m.checkFrame(i, dst); err != nil {
		return nil, bad("%v", err)
	}
	return dst, nil
}

// Frame byte 0 of a columnar table (transformColumns).
const (
	frameColumns   = 0 // the columns (codec.go) follow
	frameDeltaZstd = 1 // a zstd frame of the delta+shuffle transform follows
)

// decodeColumnsFrame decodes a frame of a columnar table into dst (the
// frame's size).
func (m *TableMeta) decodeColumnsFrame(dst, b []byte, dec *zstd.Decoder) error {
	if len(b) < 1 {
		return errors.New("empty frame")
	}
	switch b[0] {
	case frameColumns:
		return decodeColumns(dst, b[1:], len(dst)/m.Format.Width, m.layout, m.dict)
	case frameDeltaZstd:
		bp := scratchPool.Get().(*[]byte)
		defer scratchPool.Put(bp)
		out, err := dec.DecodeAll(b[1:], (*bp)[:0:len(dst)+zstdSlack])
		if err != nil {
			return fmt.Errorf("zstd: %v", err)
		}
		if len(out) != len(dst) {
			return fmt.Errorf("decompressed to %d bytes, want %d", len(out), len(dst))
		}
		decodeTransform(transformDeltaShuffle, dst, out, m.Format.Width)
		return nil
	}
	return fmt.Errorf("frame kind %d", b[0])
}

// checkFrame checks decoded records against the meta.
func (m *TableMeta) checkFrame(i int, recs []byte) error {
	w, p := m.Format.Width, m.Format.PrefixLen
	if !bytes.Equal(recs[:w], m.Frames[i].First) {
		return fmt.Errorf("first record %x is not the fence %x", recs[:w], m.Frames[i].First)
	}
	if !strictlySorted(recs, w) {
		return errors.New("records out of order")
	}
	lastRec := recs[len(recs)-w:]
	if i+1 < len(m.Frames) {
		next := &m.Frames[i+1]
		if compareRecords(lastRec, next.First) >= 0 {
			return fmt.Errorf("last record %x not below the next fence", lastRec)
		}
		if bytes.Equal(lastRec[:p], next.First[:p]) != next.Continues {
			return errors.New("last record's prefix disagrees with the next frame's continues flag")
		}
	} else if !bytes.Equal(lastRec, m.MaxKey) {
		return fmt.Errorf("last record %x is not the table's last key", lastRec)
	}
	return nil
}

func (m *TableMeta) namePrefix() string {
	if m.Name == "" {
		return ""
	}
	return "table " + m.Name + " "
}

// FilterBytes returns the size of the table's filter in memory.
func (m *TableMeta) FilterBytes() int {
	if m.filter == nil {
		return 0
	}
	if m.filter.f8 != nil {
		return len(m.filter.f8.Fingerprints)
	}
	return 2 * len(m.filter.f16.Fingerprints)
}

// String summarizes the table.
func (m *TableMeta) String() string {
	if m == nil {
		return "<nil>"
	}
	return fmt.Sprintf("table %s width=%d prefix=%d records=%d prefixes=%d frames=%d data=%dB meta=%dB shard=%d/%d transform=%s filter=%dbit min=%s max=%s",
		m.Name, m.Format.Width, m.Format.PrefixLen, m.Records, m.Prefixes, len(m.Frames), m.DataBytes, m.MetaBytes,
		m.Shard, m.ShardBits, m.transform, m.filterBits, hex.EncodeToString(m.MinKey), hex.EncodeToString(m.MaxKey))
}

// compareRecords orders two records of the same width as their bytes.
func compareRecords(a, b []byte) int {
	if len(a)%8 == 0 && len(a) == len(b) {
		for o := 0; o < len(a); o += 8 {
			x, y := binary.BigEndian.Uint64(a[o:]), binary.BigEndian.Uint64(b[o:])
			if x != y {
				if x < y {
					return -1
				}
				return 1
			}
		}
		return 0
	}
	return bytes.Compare(a, b)
}

// strictlySorted reports whether the records of recs strictly increase.
func strictlySorted(recs []byte, w int) bool {
	if w%8 != 0 {
		for o := w; o < len(recs); o += w {
			if bytes.Compare(recs[o-w:o], recs[o:o+w]) >= 0 {
				return false
			}
		}
		return true
	}
	for o := w; o < len(recs); o += w {
		a, b := recs[o-w:o], recs[o:o+w]
		less := false
		for k := 0; k < w; k += 8 {
			x, y := binary.BigEndian.Uint64(a[k:]), binary.BigEndian.Uint64(b[k:])
			if x != y {
				if x > y {
					return false
				}
				less = true
				break
			}
		}
		if !less {
			return false
		}
	}
	return true
}
