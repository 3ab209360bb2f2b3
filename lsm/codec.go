package lsm

import "math/bits"

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
//   - The table's meta holds an account dictionary (the accounts that
//     occur at least twice in the table, most frequent first, at most
//     MaxDictEntries); a record stores its account's rank (1-based;
//     popular accounts get small ranks) or 0 and the account as a literal.
//     Up to format version 4 an account was the pair (did, clock id), on
//     the guess that a clock id belongs to a repository. Real TIDs say
//     otherwise: a PDS process draws a 5-bit clock id when it starts and
//     gives it to every record it writes, so an account's records carry
//     many (11 to 28 in the real repositories of 30 to 184 records in
//     testdata), and pairs multiplied the dictionary up to 32-fold (33,000
//     accounts with 32 pairs each fill the 2^20 entries of version 4). From version 5 an account
//     is its DID, its dictionary entry holds the clock id a vote over its
//     records in the table picks (their majority's, when there is one),
//     and each record's clock id is a column of
//     its own: the xor with its entry's (0 for most records of a live
//     tail, where a host keeps one clock id for weeks; about five bits
//     once entropy-coded in a backfill of years).
//   - (collection, location) pairs repeat: each frame lists its distinct
//     pairs, sorted, and a record stores an index.
//   - A backfill writes a repository whole at one stamp: the dictionary
//     (version 3) keeps each account's majority rev, and a record of such
//     an account stores its rev's difference from it (0 for most).
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
//	KC           1 byte   version 5 on: clock id width in bytes (0..2),
//	                      or 3: the clock ids' sparse form, one stream
//	KR           1 byte   version 9 on, backlinks: target rkey difference
//	                      width in bytes (0..8)
//	KA           1 byte   version 9 on, backlinks: target DID rank width
//	                      in bytes (0..3)
//	                      Version 10 on: KT | 0x10 when the time
//	                      differences are in their magnitude form, KT |
//	                      0x20 when the first times of groups are, KR |
//	                      0x10 when the target rkey differences are; the
//	                      account ranks and target DID ranks always are
//	                      (codec_magnitude.go). A column in its magnitude
//	                      form is two streams, its classes and its
//	                      mantissas, in place of its planes, none when
//	                      its width is 0.
//	rate R       varint   rev prediction rate, fixed point (2^32 = 1 rev a
//	                      microsecond); version 9 on: R << 1 | S, S = 1
//	                      for revs in their sparse form (codec_revs.go)
//	streams      ...      6 + KT + KD + KP (+ KC) (+ KR + KA + 1) streams,
//	                      in this order (version 10: a column in its
//	                      magnitude form counts 2, not its width, and
//	                      one more stream comes last with KT & 0x20):
//
//	 0 targets   per group: varint zigzag(target rkey - previous group's
//	             target rkey) (the first: minus 0), varint collection,
//	             varint did; version 9 on, the collection alone (the rest
//	             is in the target planes). Empty for revocations.
//	 1 lengths   per group: varint record count (sum n). Empty for
//	             revocations.
//	 2 first     per group (revocations: for record 0 only): varint
//	             zigzag(time - previous record's time) (0 before record 0);
//	             version 10 with KT & 0x20: those values' classes, their
//	             mantissas in the frame's last stream
//	 3 literals  per record of rank 0, in order: varint did, varint clock
//	             id (< 1024)
//	 4 pairs     varint P (1..n), then P pairs, strictly increasing: varint
//	             collection, varint location (revocations: 0)
//	 5 revs      version 8 on: codec_revs.go. Up to version 7:
//	             per record: varint zigzag(rev - prediction): the
//	             prediction is 0 for record 0, else the previous record's
//	             rev plus sign(d) * floor(|d| * R / 2^32), d the signed time
//	             difference with the previous record, wrapping (mod 2^64).
//	             Version 3, a record whose account (rank r >= 1) has a rev
//	             in the dictionary (entry r-1's value v != 0): varint
//	             zigzag(rev - (v-1)) instead, wrapping (0 for most records
//	             of a backfilled account)
//	 6..         KT planes of the time differences of the records that do
//	             not start a group (n - G of them; revocations n - 1): plane
//	             k holds byte k of each difference; each difference is >= 0
//	 ...         KD planes of the account ranks (n of them): 0 is a literal,
//	             r >= 1 the dictionary entry r-1; KD = 0 means all 0
//	 ...         KP planes of the pair indexes (n of them, < P); KP = 0
//	             means all 0
//	 ...         version 5 on: KC planes of the clock ids (n of them): a
//	             record's clock id xor its account's entry's (< 1024), 0
//	             for a literal; KC = 0 means all 0. KC = 3: one stream,
//	             varint m (1..n), then m pairs of varints, (index minus
//	             the previous pair's index minus 1, or the first's index;
//	             value 1..1023): the nonzero values, every other one 0
//	             (for planes that are mostly 0, which cost at least a bit
//	             a record each in huff0)
//	 ...         version 9 on, backlinks: KR planes of each group's
//	             zigzag(target rkey - previous group's target rkey) (the
//	             first: minus 0), G of them; KA planes of each group's
//	             target DID as its rank in the account dictionary (1-based;
//	             0: not in it), G of them; then one stream: varint did of
//	             each group of rank 0, in order; version 10 with KT &
//	             0x20, last: the mantissas of the first times of groups.
//	             (A target's DID is an
//	             account's, a post's author or a followed account, mostly
//	             one of the dictionary's: on the merged 1B index of
//	             version 7 a model of this took the targets from 0.78 bytes
//	             a record to 0.63, and at 100M merged version 9 took them
//	             from 0.76 to 0.62: docs/scale.md.)
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
// collection and location from the pair, did and clock from the account
// (version 5 on: did from the account, clock from the account's entry xor
// the plane), rev. Every stream must be consumed exactly; any inconsistency is
// ErrCorrupt (DecodeFrame checks the frame's checksum before).

// transformColumns is the columnar codec above (table format version 2,
// BacklinkFormat and RevocationFormat only).
const transformColumns frameTransform = 4

// MaxDictEntries bounds a table's account dictionary in the format
// BuildTable writes (memory: 18 bytes an entry in a decoded meta, ~10 in a
// mapped one). Up to format version 5 the bound was 2^20 (maxDictEntries):
// a merged index of a billion links has 1.43M accounts, and the ~0.4M past
// it stored each record's DID and clock id as literals and its rev
// unpredicted (~0.9 bytes a link, docs/scale.md). Version 6 raises it to
// 2^22, the accounts a compaction counts anyway (dictCountMax).
const MaxDictEntries = 1 << 22

// maxDictEntries is the bound of tables of format version.
func maxDictEntries(version int) int {
	if version < 6 {
		return 1 << 20
	}
	return MaxDictEntries
}

// colLayout is the record layout of a format the columnar codec handles.
type colLayout struct {
	w      int
	target bool // backlink: a 24-byte target first, a location after the source
	// clockCol (format version 5 on): an account is its DID alone, and
	// each record's TID clock id is a column of its own (planes after the
	// pair indexes); before, an account was the pair (DID, clock id).
	clockCol bool
	dictMax  int // the dictionary's bound (maxDictEntries)
	// revChain (format version 8 on): revs are predicted along the chain
	// of records whose rev is not their account's (codec_revs.go).
	revChain bool
	// targetPlanes (format version 9 on): a group's target rkey
	// difference and its DID's rank in the dictionary are stored in
	// planes, its collection in the targets stream, a DID outside the
	// dictionary in a stream of its own.
	targetPlanes bool
	// revsSparse (format version 9 on): a frame may store its revs in a
	// sparse form (codec_revs.go).
	revsSparse bool
	// magnitudes (format version 10 on): the account ranks and target
	// DID ranks are stored in their magnitude form (codec_magnitude.go)
	// instead of in byte planes, and the time differences, target rkey
	// differences and first times of groups (varints before) may be, a
	// frame's header says.
	magnitudes bool
}

// columnsLayout is the columnar layout of format f in tables of format
// version (0: TableFormatVersion).
func columnsLayout(f Format, version int) (colLayout, bool) {
	if version == 0 {
		version = TableFormatVersion
	}
	switch f {
	case BacklinkFormat:
		return colLayout{w: 64, target: true, clockCol: clockColumn(version), dictMax: maxDictEntries(version), revChain: version >= 8, targetPlanes: version >= 9, revsSparse: version >= 9, magnitudes: version >= 10}, true
	case RevocationFormat:
		return colLayout{w: 32, clockCol: clockColumn(version), dictMax: maxDictEntries(version), revChain: version >= 8, revsSparse: version >= 9, magnitudes: version >= 10}, true
	}
	return colLayout{}, false
}

// clockColumn reports whether tables of format version store each
// record's clock id as a column (version 5 on).
func clockColumn(version int) bool { return version >= 5 }

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

// clockSparse is the KC header value of the clock ids' sparse form.
const clockSparse = 3

// Version 10 header flags, above a width (0..8) in its byte: magTimes in
// KT (KR): the time differences (target rkey differences) are in their
// magnitude form; magFirsts in KT: so are the first times of groups.
const (
	magTimes  = 0x10
	magFirsts = 0x20
)

// colStreams bounds a frame's streams: the fixed ones, then at most 8
// planes of time differences, 3 of ranks, 2 of pair indexes and 2 of
// clock ids, then (version 9) 8 of target rkey differences, 3 of target
// DID ranks and the target literals, then (version 10) the mantissas of
// the first times of groups. (A column in its magnitude form, version 10,
// takes 2 streams where its planes took 1 to 8.)
const colStreams = stFixed + 8 + 3 + 2 + 2 + 8 + 3 + 1 + 1

// Stream modes.
const (
	modeRaw    = 0
	modeRepeat = 1
	modeHuff1X = 2
	modeHuff4X = 3
)

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
