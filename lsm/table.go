package lsm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"unsafe"

	"github.com/klauspost/compress/s2"
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

// FrameBytesMax is the most uncompressed bytes in a frame of any table
// (frameBytes gives a format version's): small enough that a query for a
// rare key reads little (a frame of the columnar codec compresses to
// ~18 KiB on average), large enough that zstd has context and that the fences (one
// per frame) stay about 1/1,600 of the uncompressed data. One ranged GET
// reads adjacent frames.
const FrameBytesMax = 128 << 10

// frameBytes is the most uncompressed bytes in a frame of a table of
// format version: 64 KiB up to version 6, FrameBytesMax (128 KiB) from
// version 7. Every frame pays for its own Huffman tables, its first
// record's full time and target, its pair list and its fence; at 100M
// links of the backfill, frames twice as large took 0.21 bytes a link
// less (bucket and local), wrote at the same speed within the host's
// noise and answered warm queries as fast; a cold query of a small target
// decodes twice the records (docs/scale.md, "Formats 6 and 7").
func frameBytes(version int) int {
	if version < 7 {
		return 64 << 10
	}
	return FrameBytesMax
}

// TableFormatVersion is the version of the table format BuildTable writes
// (the package documentation, in doc.go, gives it): version 1 has frame
// transforms 0-3, zstd frames and 8- or 16-bit binary fuse filters;
// version 2 adds 8 header bytes, the dictionary section and the columnar
// frame transform 4 (codec.go); version 3 adds each dictionary account's
// rev, from which the columnar frames predict the revs of its records;
// version 4 lets a table refer to the dictionary of another table of its
// run (a compaction's output shares one, table_meta.go); version 5 stores
// each record's TID clock id as a column, and an account is its DID alone
// (codec.go); version 6 lets a dictionary hold 2^22 accounts instead of
// 2^20 (maxDictEntries), and is otherwise version 5; version 7 lets a
// frame hold 128 KiB of records instead of 64 (frameBytes), and is
// otherwise version 6; version 8 predicts the revs of the records whose
// rev is not their account's along a chain of their own (codec_revs.go),
// and is otherwise version 7; version 9 stores a group's target rkey
// difference and its DID's rank in the table's account dictionary in
// planes (colLayout.targetPlanes) and lets a frame store its revs in a
// sparse form, flagged in the low bit of its header's rate (backlinks and
// revocations: colLayout.revsSparse), and is otherwise version 8;
// version 10 stores the account ranks and target DID ranks in their
// magnitude form (a class byte and the bits below the leading one:
// codec_magnitude.go), and the time differences, target rkey differences
// and first times of groups too in the frames where that is smaller, and
// is otherwise version 9; version 11 adds frame transform 5, shuffle and
// S2 (TableOptions.Fast: a flush's table), and is otherwise version 10;
// version 12 adds filter kind FilterBlocked, a split-block Bloom filter
// (the links tree's tables in the fast form), and is otherwise version 11.
// DecodeMeta reads versions 1..TableFormatVersion.
const TableFormatVersion = 12

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
	maxFrameLength = FrameBytesMax + frameSlack
	// frameSlack is what a compressed frame may exceed its records by.
	frameSlack = 1024
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
	// FilterBits is the filter: a binary fuse filter's fingerprint width,
	// 8 or 16, or FilterBlocked (format version 12 on); 0 is
	// DefaultFilterBits.
	FilterBits int
	// Fast: frames shuffled and compressed with S2 (frame transform 5,
	// format version 11), no account dictionary, instead of the columns:
	// for a flush's table, read once by the merge that replaces it soon
	// (WriteRun's delta runs). A fifth to a third of the columns' CPU to
	// build and decode, about twice their bytes.
	Fast bool

	transform frameTransform // test hook: the frame transform (if transSet; else chooseTransform)
	transSet  bool
	frameMax  int // test hook: records per frame (0: frameBytes(version)/Width)
	version   int // test hook: write this older format version (2: no revs in the dictionary; 4: accounts with their clock ids); 0 is TableFormatVersion

	// sharedDict, when set, is the account dictionary the table's frames
	// use: a compaction's, shared by every table of its output run. The
	// table stores it whole when dictOwner is nil, else a reference to the
	// table dictOwner names (an ID's 16 bytes), which stores it.
	sharedDict *accountDict
	dictOwner  []byte
}

// writeVersion is the table format version BuildTable writes.
func (o TableOptions) writeVersion() int {
	if o.version != 0 {
		return o.version
	}
	return TableFormatVersion
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
	// dictRef (format version 4) is the binary ID of the table of the
	// same run whose dictionary this table's frames use (nil: its own),
	// dictRefEntries that dictionary's entries. Until useDict resolves it
	// dict is nil and no frame decodes; dictOwner is then that table's
	// meta, which keeps its mapping while this one is used.
	dictRef        []byte
	dictRefEntries uint32
	dictOwner      *TableMeta
	// mapped, when set, is the local file this meta reads its fences,
	// filter and dictionary from in place (Frames is then nil): see
	// meta_local.go.
	mapped *metaMapping
}

// NumFrames returns the number of frames of the table.
func (m *TableMeta) NumFrames() int {
	if m.mapped != nil {
		return m.mapped.nFrames
	}
	return len(m.Frames)
}

// Frame returns frame i's entry (its First is the caller's to keep).
func (m *TableMeta) Frame(i int) FrameMeta {
	fr := m.frame(i)
	if m.mapped != nil {
		fr.First = bytes.Clone(fr.First)
		runtime.KeepAlive(m)
	}
	return fr
}

// frame returns frame i's entry; for a mapped meta its First points into
// the mapping, valid while m is reachable (callers keep m alive).
func (m *TableMeta) frame(i int) FrameMeta {
	if mp := m.mapped; mp != nil {
		return mp.frame(i)
	}
	return m.Frames[i]
}

// frameEntry is frame(i) whose Offset may be left 0 (a mapped meta
// computes offsets only when asked).
func (m *TableMeta) frameEntry(i int) FrameMeta {
	if mp := m.mapped; mp != nil {
		return mp.frameEntry(i)
	}
	return m.Frames[i]
}

// searchFences is sort.Search over the fences of frames [0, n): the first
// frame whose fence satisfies pred (monotone), or n. A mapped meta first
// searches its heap copy of every 64th fence, then at most 64 fences in
// the mapping (a few pages, not one per step of a search over the whole
// file).
func (m *TableMeta) searchFences(n int, pred func(fence []byte) bool) int {
	mp := m.mapped
	if mp == nil || len(mp.samples) == 0 {
		return sort.Search(n, func(i int) bool { return pred(m.fence(i)) })
	}
	w := m.Format.Width
	ns := (n + offsetEvery - 1) / offsetEvery // samples of frames below n
	j := sort.Search(ns, func(j int) bool { return pred(mp.samples[j*w : (j+1)*w]) })
	if j == 0 {
		return 0 // frame 0 satisfies pred
	}
	lo, hi := (j-1)*offsetEvery+1, min(j*offsetEvery, n)
	return lo + sort.Search(hi-lo, func(i int) bool { return pred(mp.fence(lo + i)) })
}

// fence returns frame i's first record (for a mapped meta, in the mapping:
// valid while m is reachable).
func (m *TableMeta) fence(i int) []byte {
	if mp := m.mapped; mp != nil {
		return mp.fence(i)
	}
	return m.Frames[i].First
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

// MayContain reports whether the table may hold records whose key prefix
// is prefix (PrefixLen bytes). False is certain; true is wrong for about one
// absent prefix in 2^FilterBits for a fuse filter, ~0.54% of them for a
// blocked one. The filter knows PrefixLen-byte prefixes only: for any
// other length the answer is true.
func (m *TableMeta) MayContain(prefix []byte) bool {
	if len(prefix) != m.Format.PrefixLen {
		return true
	}
	ok := m.filter.contains(prefix)
	runtime.KeepAlive(m) // a mapped filter reads the mapping m owns
	return ok
}

// mayContainKey is MayContain for a prefix already hashed with the
// table's filter seed.
func (m *TableMeta) mayContainKey(k uint64) bool {
	ok := m.filter.containsKey(k)
	runtime.KeepAlive(m)
	return ok
}

// FramesFor returns the inclusive range of frames [first, last] that may hold
// records whose first len(prefix) bytes equal prefix, and ok=false if none
// can (the prefix is outside [MinKey, MaxKey]). It uses the fences only (a
// binary search), not the filter. prefix is normally PrefixLen bytes; any
// length from 1 to Width works, but only a PrefixLen-byte prefix can use the
// frames' "continues" flags to skip the frame before its first fence match.
func (m *TableMeta) FramesFor(prefix []byte) (first, last int, ok bool) {
	defer runtime.KeepAlive(m) // the fences of a mapped meta are in its mapping
	l := len(prefix)
	n := m.NumFrames()
	if l == 0 || l > m.Format.Width || n == 0 {
		return 0, 0, false
	}
	if bytes.Compare(prefix, m.MaxKey[:l]) > 0 || bytes.Compare(prefix, m.MinKey[:l]) < 0 {
		return 0, 0, false
	}
	// Frames whose fence prefix is <= prefix: [0, hi).
	hi := m.searchFences(n, func(f []byte) bool { return bytes.Compare(f[:l], prefix) > 0 })
	// The first frame whose fence prefix is >= prefix.
	lo := m.searchFences(hi, func(f []byte) bool { return bytes.Compare(f[:l], prefix) >= 0 })
	last = hi - 1
	if lo > last {
		// No fence starts with prefix: its records, if any, are inside the
		// frame whose range straddles it.
		return last, last, true
	}
	first = lo
	if lo > 0 && (l != m.Format.PrefixLen || m.frameEntry(lo).Continues) {
		first = lo - 1
	}
	return first, last, true
}

// FramesForRange returns the inclusive range of frames that may hold
// records whose first len(lo) bytes are in [lo, hi] (lo and hi of the same
// length, 1..Width), ok=false if none can. Fences only.
func (m *TableMeta) FramesForRange(lo, hi []byte) (first, last int, ok bool) {
	defer runtime.KeepAlive(m)
	l := len(lo)
	n := m.NumFrames()
	if l == 0 || l != len(hi) || l > m.Format.Width || n == 0 || bytes.Compare(lo, hi) > 0 {
		return 0, 0, false
	}
	if bytes.Compare(lo, m.MaxKey[:l]) > 0 || bytes.Compare(hi, m.MinKey[:l]) < 0 {
		return 0, 0, false
	}
	// Last: the last frame whose fence prefix is <= hi.
	last = m.searchFences(n, func(f []byte) bool { return bytes.Compare(f[:l], hi) > 0 }) - 1
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
	if first < 0 || last >= m.NumFrames() || first > last {
		return 0, 0
	}
	a, z := m.frame(first), m.frame(last)
	runtime.KeepAlive(m)
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
	return m.decodeFrame(i, compressed, dst, true)
}

// decodeFrame is DecodeFrame; order false skips the check that the records
// strictly increase, for BuildTable's self-check, which checked its records'
// order before encoding them and compares the decoded ones with them (a
// caller that changed its records during BuildTable could then write an
// unsorted table; reads, which check the order, would reject it).
func (m *TableMeta) decodeFrame(i int, compressed []byte, dst []byte, order bool) ([]byte, error) {
	if i < 0 || i >= m.NumFrames() {
		return nil, fmt.Errorf("lsm: %sframe %d out of range [0, %d)", m.namePrefix(), i, m.NumFrames())
	}
	// A mapped meta's fences and dictionary are read in place: m stays
	// reachable until the frame is decoded and checked.
	defer runtime.KeepAlive(m)
	fr := m.frameEntry(i)
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
		// A transform of the records, zstd- or (transform 5) S2-compressed,
		// decompressed into a scratch buffer, then inverted into dst.
		if cap(dst) < want {
			dst = make([]byte, want)
		}
		dst = dst[:want]
		bp := scratchPool.Get().(*[]byte)
		out, what, err := decompressFrame(m.transform, dec, (*bp)[:0:want+zstdSlack], compressed, want)
		if err != nil {
			scratchPool.Put(bp)
			return nil, bad("%s: %v", what, err)
		}
		decodeTransform(m.transform, dst, out, w)
		scratchPool.Put(bp)
	}
	if err := m.checkFrame(i, dst, order); err != nil {
		return nil, bad("%v", err)
	}
	return dst, nil
}

// decompressFrame decompresses a frame of transform t (not columns, not
// none) into scratch (capacity want+zstdSlack, as scratchPool's), never
// beyond it, and returns its want bytes and the compressor's name for
// errors: a frame of any other decompressed size is an error.
func decompressFrame(t frameTransform, dec *zstd.Decoder, scratch, compressed []byte, want int) ([]byte, string, error) {
	if t == transformShuffleS2 {
		if n, err := s2.DecodedLen(compressed); err != nil || n != want {
			return nil, "s2", fmt.Errorf("%d bytes (%v), want %d", n, err, want)
		}
		out, err := s2.Decode(scratch[:want], compressed)
		if err == nil && (len(out) != want || &out[0] != &scratch[:1][0]) {
			err = fmt.Errorf("decompressed to %d bytes, want %d", len(out), want)
		}
		return out, "s2", err
	}
	out, err := dec.DecodeAll(compressed, scratch)
	if err == nil && len(out) != want {
		err = fmt.Errorf("decompressed to %d bytes, want %d", len(out), want)
	}
	return out, "zstd", err
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
		if m.dict == nil && m.dictRef != nil {
			return fmt.Errorf("the dictionary of table %x was not loaded", m.dictRef)
		}
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

// checkFrame checks decoded records against the meta (and that they
// strictly increase, if order).
func (m *TableMeta) checkFrame(i int, recs []byte, order bool) error {
	w, p := m.Format.Width, m.Format.PrefixLen
	if f := m.fence(i); !bytes.Equal(recs[:w], f) {
		return fmt.Errorf("first record %x is not the fence %x", recs[:w], f)
	}
	if order && !strictlySorted(recs, w) {
		return errors.New("records out of order")
	}
	lastRec := recs[len(recs)-w:]
	if i+1 < m.NumFrames() {
		next := m.frameEntry(i + 1)
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
	switch {
	case m.filter.f8 != nil:
		return len(m.filter.f8.Fingerprints)
	case m.filter.f16 != nil:
		return 2 * len(m.filter.f16.Fingerprints)
	case m.filter.bl != nil:
		return len(m.filter.bl)
	}
	return len(m.filter.m16.fps)
}

// String summarizes the table.
func (m *TableMeta) String() string {
	if m == nil {
		return "<nil>"
	}
	return fmt.Sprintf("table %s width=%d prefix=%d records=%d prefixes=%d frames=%d data=%dB meta=%dB shard=%d/%d transform=%s filter=%s min=%s max=%s",
		m.Name, m.Format.Width, m.Format.PrefixLen, m.Records, m.Prefixes, m.NumFrames(), m.DataBytes, m.MetaBytes,
		m.Shard, m.ShardBits, m.transform, filterName(m.filterBits), hex.EncodeToString(m.MinKey), hex.EncodeToString(m.MaxKey))
}

// filterName names a filter kind: a fuse filter's width, or blocked.
func filterName(bits int) string {
	if bits == FilterBlocked {
		return "blocked"
	}
	return fmt.Sprintf("%dbit", bits)
}

// compareRecords orders two records of the same width as their bytes.
func compareRecords(a, b []byte) int {
	if len(a) == 64 && len(b) == 64 {
		return compare64(0, (*[64]byte)(a), (*[64]byte)(b))
	}
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

// compare64 orders two 64-byte records (a backlink's width) as their
// bytes, from their word `from` on (the words before it equal): words
// compared in turn, unrolled, with no bounds checks. Merges and the
// checks of the write path compare records more than anything else, and
// records that share a target (a popular post; every account a follow
// names, whose first two words are 0) differ only from their fourth word.
func compare64(from int, a, b *[64]byte) int {
	var x, y uint64
	switch from {
	case 0:
		if x, y = binary.BigEndian.Uint64(a[0:8]), binary.BigEndian.Uint64(b[0:8]); x != y {
			break
		}
		fallthrough
	case 1:
		if x, y = binary.BigEndian.Uint64(a[8:16]), binary.BigEndian.Uint64(b[8:16]); x != y {
			break
		}
		fallthrough
	case 2:
		if x, y = binary.BigEndian.Uint64(a[16:24]), binary.BigEndian.Uint64(b[16:24]); x != y {
			break
		}
		fallthrough
	case 3:
		if x, y = binary.BigEndian.Uint64(a[24:32]), binary.BigEndian.Uint64(b[24:32]); x != y {
			break
		}
		if x, y = binary.BigEndian.Uint64(a[32:40]), binary.BigEndian.Uint64(b[32:40]); x != y {
			break
		}
		if x, y = binary.BigEndian.Uint64(a[40:48]), binary.BigEndian.Uint64(b[40:48]); x != y {
			break
		}
		if x, y = binary.BigEndian.Uint64(a[48:56]), binary.BigEndian.Uint64(b[48:56]); x != y {
			break
		}
		x, y = binary.BigEndian.Uint64(a[56:64]), binary.BigEndian.Uint64(b[56:64])
	default:
		panic("lsm: compare64 from a word past the fourth")
	}
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// strictlySorted reports whether the records of recs strictly increase.
func strictlySorted(recs []byte, w int) bool {
	if w == 64 {
		for o := 64; o < len(recs); o += 64 {
			if compare64(0, (*[64]byte)(recs[o-64:o]), (*[64]byte)(recs[o:o+64])) >= 0 {
				return false
			}
		}
		return true
	}
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

// memBytes estimates the memory a decoded meta holds: its encoded bytes
// (fences and filter point into them or copy them), the frame entries and
// the decoded account dictionary.
func (m *TableMeta) memBytes() int64 {
	if m.mapped != nil {
		return m.mapped.heapBytes()
	}
	n := int64(m.MetaBytes) + int64(len(m.Frames))*int64(unsafe.Sizeof(FrameMeta{}))
	if m.dict != nil && m.dictOwner == nil { // a shared one is its table's
		n += int64(len(m.dict.dids))*8 + int64(len(m.dict.clocks))*2 + int64(len(m.dict.revs))*8
	}
	return n
}
