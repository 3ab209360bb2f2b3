// Package lsm is Eddy's LSM engine: fixed-width records (backlinks of 64
// bytes, revocations of 32, the PLC map's 24) in immutable sorted tables in
// an object store, with each table's small metadata on local disk.
//
// A tree (Tree: links, revocations, the PLC map's two, names) is a list of runs; a
// run is one table (a delta run: a flushed memtable) or one table per shard
// (a compacted run: CompactRuns merges the runs PickCompaction picks: of a
// size tier in the links, PLC and names trees: runs up to 1 MiB, or
// larger ones of similar size; by size ratio in the revocation tree). A Manifest
// lists the live runs at one generation and changes only by compare-and-set
// edits (Edit, Manifest.Apply); a View is a manifest with the metadata of
// every table loaded (OpenView, through a Catalog), which a node serves
// only once it is complete. A Reader answers queries from a view in at most
// two serial round trips in the common case: round one reads the target's
// frames of every run (merge.go), round two the revocations of the sources
// found (revocations.go); both go through the fetch groups and the frame
// cache (fetch.go, cache.go).
//
// DB (db.go) is the single-process engine, which the benchmark and the
// tests use; a cluster node writes through ingest.Writer (WriteRun for
// flushes, PickCompaction and CompactRuns for compactions, manifest edits
// through the replicated state) and reads through a Reader over a View.
// Corruption the read path meets is a *CorruptError naming the tree and
// the table (errors.go). lsm/DESIGN.md lists the invariants the code relies
// on. Where things are:
//
//	doc.go            this overview and the table format
//	table.go          formats, limits, TableMeta and its lookups, DecodeFrame
//	table_build.go    BuildTable
//	table_meta.go     the meta object: encoding and DecodeMeta
//	frame.go          the zstd frame transforms (format version 1)
//	codec.go          the columnar frame codec: layout, streams, modes
//	codec_dict.go     the account dictionary: counting, ranks, its section
//	codec_encode.go   encodeColumns
//	codec_decode.go   decodeColumns
//	filter.go         the binary fuse filter of a table; ShardOf
//	filter_blocked.go the blocked filter of a table in the fast form
//	memtable.go       the memtable (records buffered until a flush); Fold
//	sort.go           SortRecords
//	manifest.go       runs, manifests and their edits
//	view.go           the catalog of metas (on disk: mapped, or a decoded cache) and views
//	meta_local.go     the local layout of a meta, mapped and read in place
//	query.go          the query API: Backlinks, All, Count; query scratch
//	fetch.go          fetch groups: ranged GETs through the frame cache
//	merge.go          round one: a target's candidates, the merge heap
//	revocations.go    round two: liveness by revocations
//	forward.go        Forward: the links out of a source
//	cache.go          the decoded-frame cache
//	db.go             DB: the single-process engine
//	compact.go        compaction: PickCompaction, Compact
//	compact_stream.go CompactRuns: a merge, output shard by output shard
//	spill.go          the compaction's spill file on local disk
//	plcmap.go         the PLC map trees
//	errors.go         ErrCorrupt, CorruptError, ErrVersion
//
// # Table format
//
// Tables are format version 12 (TableFormatVersion); versions 1 to 11 still
// read (the differences are marked "v2" below; version 3 differs from 2
// only inside the dictionary section, which holds each account's rev, and
// in how a columnar frame stores revs: codec.go; version 4 lets the
// dictionary section refer to the dictionary of another table of the same
// run instead, and a dictionary hold more entries than half its table's
// records: table_meta.go, appendDictRef; version 5 keys the dictionary by
// DID alone, its clock ids the usual ones of its accounts, and stores each
// record's clock id in planes of its own: codec.go; version 6 differs from
// 5 only in its dictionary's bound, 2^22 accounts instead of 2^20; version
// 7 differs from 6 only in its frames' bound, 128 KiB of records instead
// of 64: frameBytes; version 8 from 7 only in how a columnar frame
// predicts revs, version 9 from 8 in how it stores targets and may store
// revs, and version 10 from 9 in how it stores its numeric columns:
// codec.go, codec_revs.go, codec_magnitude.go; version 11 from 10 only in
// frame transform 5, the form of a flush's table: frame.go; version 12
// from 11 only in filter kind 1, the blocked filter: filter_blocked.go).
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
// [r_i, r_i + n_i) of the table, where n_i >= 1 and n_i*W <= FB, FB 64 KiB
// up to version 6 and 128 KiB (FrameBytesMax) from version 7 (frameBytes):
//
//   - BuildTable fills a frame with FB/W records, but ends it
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
//     the compressed bytes), window <= FB;
//   - with transform 5 (v11: a flush's table, TableOptions.Fast), the
//     records are shuffled as transform 1 does and the result is one S2
//     block (github.com/klauspost/compress/s2, the block format: a varint
//     of the decoded length, then Snappy-compatible tags), whose decoded
//     length must be n_i*W.
//
// # Meta object
//
// Integers are little-endian; records (fences, the last key) are their own
// bytes. W is the record width, F the frame count, H the header size: 64 in
// version 1, 72 in version 2.
//
//	offset          size        field
//	0               8           magic "EDDYMETA"
//	8               2           format version (1 to 12); a reader refuses
//	                            newer versions with ErrVersion
//	10              2           record width W (1..MaxWidth)
//	12              2           key prefix length P (1..W): what queries ask
//	                            for and what the filter holds
//	14              1           frame transform: 0 none, 1 byte shuffle,
//	                            2 XOR with previous record + shuffle, 3
//	                            zigzag word delta with previous record +
//	                            shuffle (frame.go), 4 columns (codec.go;
//	                            v2, widths 64 and 32 with prefix 24 only),
//	                            5 byte shuffle + S2 (v11)
//	15              1           filter: a fuse filter's fingerprint bits,
//	                            8 or 16, or 1, a blocked filter (v12)
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
//	                              0   4  compressed length (1..FB+1024)
//	                              4   4  records n_i (1..FB/W)
//	                              8   8  xxh3-64 of the compressed bytes
//	                              16  1  flags: bit 0 "continues": the first
//	                                     record's P-byte prefix also appears in
//	                                     the previous frame; other bits zero
//	                              17  W  the frame's first record (its fence)
//	H+W+F*(17+W)    B           filter section (below)
//	...+B           D           v2: dictionary section (codec_dict.go's
//	                            appendDict: the table's accounts)
//	...+D           8           xxh3-64 of every byte before it
//
// When byte 15 is 8 or 16, the filter section is a binary fuse filter
// (3-wise, FastFilter/xorfilter BinaryFuse[uint8 or uint16]) over the
// filter keys of the distinct P-byte prefixes:
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
// A blocked filter (byte 15 is 1, version 12: the links tree's tables in
// the fast form) is a split-block Bloom filter of K blocks of eight 32-bit
// words (filter_blocked.go), K = max(ceil(12 * keys / 256), 1):
//
//	offset  size   field
//	0       4      blocks K (>= 1)
//	4       4      zero
//	8       32*K   the blocks, each eight little-endian 32-bit words
//
// A key k may be present when, in block hi64(k * K), word i (0..7) has
// bit (lo32(k) * s_i mod 2^32) >> 27 set for every i, where s_i are the
// eight salts of blockedSalts.
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
