package lsm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Frame codecs. A frame is a run of whole records, transformed (below), then
// compressed on its own as one zstd frame (no zstd checksum: the meta holds
// an xxh3 of the compressed bytes). The codec is recorded once per table in
// the meta, so a table written with any of them stays readable. Format
// version 2 adds transformColumns (codec.go), which stores columns coded
// with huff0 instead of one zstd frame.
//
// # Measurements
//
// Transforms tried (frameTransform values) with zstd levels 1 (fastest), 3
// (default), 7 (better) and 11 (best), on the synthetic workload of
// format_bench_test.go: 1M sorted distinct backlinks (Zipf-popular post
// targets, repository targets for follows/blocks, 4% hashed URLs; sources
// with TID rkeys in time order and random clock ids, 1M Zipf-active
// authors among 40M DIDs, ~30 collections and ~25 paths; revs increasing)
// and 512K revocations derived from them. Frames of 64 KiB. Single
// core of a shared 2-vCPU VM (AMD EPYC, Go 1.26, klauspost/compress
// v1.20.4), best of 3; speeds are noisy (other tenants), sizes exact.
// Reproduce: go test ./lsm -run TestMeasureFrameCodecs -v -lsm.measure
//
//	                       backlinks (64 B)              revocations (32 B)
//	transform     level  B/rec  enc MB/s  dec us/64K   B/rec  enc MB/s  dec us/64K
//	none              1  17.45       286        47     10.87       243        77
//	none              3  17.25       247        50      9.71       207        68
//	none             11  15.43        26        45      8.90        22        67
//	shuffle           1  14.69       645        84      8.38       595        64
//	shuffle           3  14.22       495        87      7.90       439        78
//	xor+shuffle       1  14.12       558        61      7.12       493        60
//	xor+shuffle       3  14.36       448        61      6.86       342        64
//	xor+shuffle       7  14.32       242        66      6.84       199        74
//	xor+shuffle      11  13.90        60       114      7.05        48       110
//	delta+shuffle     1  14.25       538        63      6.52       503        59
//	delta+shuffle     3  14.44       432        63      6.30       399        66
//	delta+shuffle     7  14.39       243        66      6.29       225        67
//	delta+shuffle    11  13.88        56       105      6.51        52       107
//
// (dec: zstd plus the inverse transform, without DecodeFrame's checks.) A
// plain (two's complement) word delta instead of zigzag measured 15.54 /
// 7.27 B/rec at level 1: worse than XOR for backlinks, because a
// collection or DID that steps down when the target changes fills its
// column's high bytes with 0xff.
//
// What BuildTable did in format version 1, and why:
//
//   - A transform, always: shuffling alone saves 16-23% over raw records.
//     XOR and zigzag delta with the previous record save a little more, and
//     neither wins everywhere (XOR for the backlinks, delta for the
//     revocations, by 1-8%), so BuildTable picks one of the two per table
//     by compressing a few sample frames with each (chooseTransform); the
//     meta records the choice. It still does so for formats the columnar
//     codec does not know (widths other than the two trees').
//   - zstd level 1 (DefaultCompressionLevel): within 4% of levels 3 and 7
//     in size (smaller for backlinks), faster to encode (compaction runs on
//     2-core nodes) and as fast to decode; level 11 gains at most 2% at a
//     tenth of the speed.
//   - Decoding a full 64 KiB backlink frame (DecodeFrame with its checks,
//     BenchmarkDecodeFrame) takes 83-115 us here depending on the other
//     tenants: ~70% zstd, ~20% the inverse shuffle and delta, ~6% the
//     fence and order checks, ~1% the checksum. zstd dominates. Raw
//     records would decode in ~50 us (47 against 61 in the table): the
//     transform costs about a quarter of the decode time, for a fifth
//     fewer bytes to store and to fetch.
//
// That left ~14 B per backlink of the synthetic corpus (13.49 B per live
// link in the 2M-link `eddy-ctl bench lsm`): byte-wise transforms cannot
// see that a TID is microseconds and a clock id, that the clock id belongs
// to the DID's account, that accounts repeat across the table (not within
// a frame), or that a rev follows its source's time.
//
// # Format version 2: the columnar codec
//
// BuildTable now stores backlink and revocation tables with
// transformColumns (codec.go): a column per field, huff0 per column, an
// account dictionary per table. Measured the same way (synthetic corpus,
// -lsm.measure; the last columns include BuildTable's filter and
// self-check, and DecodeFrame's checks):
//
//	                       backlinks (64 B)              revocations (32 B)
//	                       B/rec  +dict                  B/rec  +dict
//	columns                 8.05  0.23                    2.67  0.25
//
// and back to back with version 1 (BenchmarkBuildTable, BenchmarkDecodeFrame,
// process CPU, load 9-12 on the 2 vCPUs, two runs each):
//
//	                       build links/cpu-s   decode cpu-us per 64 KiB frame
//	version 1 (xor+zstd)   3.1M, 3.5M          111, 113
//	version 2 (columns)    2.3M, 2.4M          76, 72
//
// Decoding is faster (huff0 streams and one pass to rebuild the records,
// no zstd match copying); encoding is slower (a Huffman table per column
// per frame, and the dictionary's counting pass). On the bench's workload
// (TestMeasureColumns) the links tree costs 6.41 B per live link: account
// ranks 1.88 and literals 0.15 (order-0 entropy of the accounts: 1.84),
// time differences 2.20 and first times of groups 0.35, targets 0.66, revs
// 0.23, (collection, location) indexes 0.22, the meta 0.63 (dictionary
// 0.36, filter 0.18).
type frameTransform uint8

const (
	// transformNone compresses the records as they are.
	transformNone frameTransform = 0
	// transformShuffle stores the bytes column-major ("byte shuffle"):
	// byte j of every record, then byte j+1... so the nearly constant high
	// bytes of TIDs, collections and DIDs form long runs.
	transformShuffle frameTransform = 1
	// transformXORShuffle XORs each record with the previous one, then
	// shuffles: a prefix shared with the previous record becomes zeros.
	transformXORShuffle frameTransform = 2
	// transformDeltaShuffle subtracts the previous record from each record
	// word by word (big-endian 64-bit words, wrapping), zigzag-encodes the
	// difference (0, -1, 1, -2... as 0, 1, 2, 3...), then shuffles: sorted
	// columns become small numbers, and so does a small step down (a
	// collection or DID when the target changes), whose plain two's
	// complement difference would fill the high bytes with 0xff. A
	// trailing partial word is XORed.
	transformDeltaShuffle frameTransform = 3
	// transformColumns (4) is the columnar codec of codec.go (format
	// version 2).

	// transformShuffleS2 (format version 11) shuffles like
	// transformShuffle, then compresses the frame with S2 instead of
	// zstd: the form of a flush's table (TableOptions.Fast), which the
	// next merge reads and rewrites within seconds to minutes. It
	// builds and decodes several times faster than the columns, at about
	// twice their bytes.
	transformShuffleS2 frameTransform = 5

	transformCount = 6
)

// candidateTransforms are the transforms BuildTable chooses from, per table
// (chooseTransform): neither wins everywhere (see the measurements above).
var candidateTransforms = [...]frameTransform{transformXORShuffle, transformDeltaShuffle}

// transformSamples is how many frames chooseTransform compresses with each
// candidate: enough to see the table's shape, a small cost next to the
// table's own frames (a table of one sample's size is not worth choosing
// for).
const transformSamples = 4

// chooseTransform compresses transformSamples frames spread over recs
// (records of width w, perFrame records a frame) with each candidate
// transform and returns the one that makes them smallest (the first
// candidate on a tie). Tables of two frames or less take delta+shuffle
// without sampling.
func chooseTransform(enc *zstd.Encoder, recs []byte, w, perFrame int) frameTransform {
	n := len(recs) / w
	if n <= 2*perFrame {
		return candidateTransforms[len(candidateTransforms)-1]
	}
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	tmp := (*bp)[:perFrame*w]
	var dst []byte
	best, bestSize := candidateTransforms[0], -1
	for _, t := range candidateTransforms {
		size := 0
		for k := range transformSamples {
			s := k * (n - perFrame) / (transformSamples - 1)
			raw := recs[s*w : (s+perFrame)*w]
			encodeTransform(t, tmp, raw, w)
			dst = enc.EncodeAll(tmp, dst[:0])
			size += len(dst)
		}
		if bestSize < 0 || size < bestSize {
			best, bestSize = t, size
		}
	}
	return best
}

func (t frameTransform) String() string {
	switch t {
	case transformNone:
		return "none"
	case transformShuffle:
		return "shuffle"
	case transformXORShuffle:
		return "xor+shuffle"
	case transformDeltaShuffle:
		return "delta+shuffle"
	case transformColumns:
		return "columns"
	case transformShuffleS2:
		return "shuffle+s2"
	}
	return fmt.Sprintf("transform(%d)", uint8(t))
}

// DefaultCompressionLevel is the zstd level BuildTable uses when
// TableOptions.CompressionLevel is 0 (see the measurements above).
const DefaultCompressionLevel = 1

// frameEncoders holds one zstd encoder per klauspost level, created on
// first use (an encoder is expensive to create; EncodeAll is safe for
// concurrent use, up to GOMAXPROCS at once).
var frameEncoders [5]struct {
	once sync.Once
	enc  *zstd.Encoder
	err  error
}

func encoderFor(level int) (*zstd.Encoder, error) {
	if level == 0 {
		level = DefaultCompressionLevel
	}
	if level < 1 || level > 22 {
		return nil, fmt.Errorf("lsm: compression level %d outside [1, 22]", level)
	}
	l := zstd.EncoderLevelFromZstd(level)
	e := &frameEncoders[l]
	e.once.Do(func() {
		e.enc, e.err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(l),
			zstd.WithEncoderCRC(false),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithWindowSize(frameWindow),
			zstd.WithSingleSegment(true),
			zstd.WithZeroFrames(true),
		)
	})
	return e.enc, e.err
}

// frameWindow is the zstd window: a frame is at most FrameBytesMax, so a
// window that covers it loses nothing and bounds the decoder's memory.
const frameWindow = FrameBytesMax

// frameDecoder decompresses frames. DecodeAll is safe for concurrent use
// (up to GOMAXPROCS at once; more wait); WithDecodeAllCapLimit makes it
// decode at most cap(dst) bytes, so a frame can never expand past what the
// meta says (plus zstdSlack).
var frameDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(FrameBytesMax),
		zstd.WithDecoderMaxWindow(max(frameWindow, zstd.MinWindowSize)),
		zstd.WithDecodeAllCapLimit(true),
	)
})

// zstdSlack is the spare capacity the zstd decoder needs past a block's
// output to use its fast copy loops (it falls back to slower, exact ones
// otherwise); DecodeFrame gives it that much more than the frame's size.
const zstdSlack = 64

// scratchPool holds FrameBytesMax (+ zstdSlack) buffers for transformed
// frames.
var scratchPool = sync.Pool{New: func() any {
	b := make([]byte, FrameBytesMax+zstdSlack)
	return &b
}}

// encodeTransform writes the transform of recs (whole records of width w)
// into dst (len(recs) bytes).
func encodeTransform(t frameTransform, dst, recs []byte, w int) {
	switch t {
	case transformNone:
		copy(dst, recs)
	case transformShuffle, transformShuffleS2:
		shuffle(dst, recs, w)
	case transformXORShuffle, transformDeltaShuffle:
		// Difference each record with its predecessor (the first with a
		// record of zeros) into a scratch, then shuffle that.
		bp := scratchPool.Get().(*[]byte)
		tmp := (*bp)[:len(recs)]
		diffPrev(tmp, recs, w, t == transformDeltaShuffle)
		shuffle(dst, tmp, w)
		scratchPool.Put(bp)
	default:
		panic("lsm: unknown transform")
	}
}

// decodeTransform inverts encodeTransform: src (transformed) to dst (plain
// records), both the same whole number of records of width w.
func decodeTransform(t frameTransform, dst, src []byte, w int) {
	if t == transformShuffleS2 { // the same transform, another compressor
		t = transformShuffle
	}
	switch {
	case t == transformNone:
		copy(dst, src)
	case w%8 == 0:
		unshuffleWords(dst, src, w, t)
	default:
		unshuffle(dst, src, w)
		if t != transformShuffle {
			undiffPrev(dst, w, t == transformDeltaShuffle)
		}
	}
}

// zigzag maps a wrapping difference to an integer whose magnitude is the
// difference's: 0, -1, 1, -2, 2... become 0, 1, 2, 3, 4...
func zigzag(d uint64) uint64   { return d<<1 ^ uint64(int64(d)>>63) }
func unzigzag(z uint64) uint64 { return z>>1 ^ -(z & 1) }

// diffPrev writes each record of recs minus the previous one (the first
// minus a record of zeros) into dst: big-endian 64-bit words subtracted and
// zigzag-encoded if delta, else XORed; a trailing partial word is XORed.
func diffPrev(dst, recs []byte, w int, delta bool) {
	words := w / 8
	for off := 0; off < len(recs); off += w {
		for k := range words {
			o := off + k*8
			cur := binary.BigEndian.Uint64(recs[o:])
			var prev uint64
			if off > 0 {
				prev = binary.BigEndian.Uint64(recs[o-w:])
			}
			if delta {
				binary.BigEndian.PutUint64(dst[o:], zigzag(cur-prev))
			} else {
				binary.BigEndian.PutUint64(dst[o:], cur^prev)
			}
		}
		for o := off + words*8; o < off+w; o++ {
			if off > 0 {
				dst[o] = recs[o] ^ recs[o-w]
			} else {
				dst[o] = recs[o]
			}
		}
	}
}

// undiffPrev undoes diffPrev in place.
func undiffPrev(b []byte, w int, delta bool) {
	words := w / 8
	for off := 0; off < len(b); off += w {
		for k := range words {
			o := off + k*8
			v := binary.BigEndian.Uint64(b[o:])
			var prev uint64
			if off > 0 {
				prev = binary.BigEndian.Uint64(b[o-w:])
			}
			if delta {
				v = unzigzag(v) + prev
			} else {
				v ^= prev
			}
			binary.BigEndian.PutUint64(b[o:], v)
		}
		if off > 0 {
			for o := off + words*8; o < off+w; o++ {
				b[o] ^= b[o-w]
			}
		}
	}
}

// shuffle writes recs (n records of w bytes) column-major into dst: byte j
// of record i goes to dst[j*n+i]. On amd64, when w is a multiple of 8, 16
// records at a time in SSE2 (shuffle_amd64.s); otherwise shuffleGo.
func shuffle(dst, recs []byte, w int) {
	n := len(recs) / w
	if shuffleAsm && w%8 == 0 && n >= 16 {
		// 16 records at a time in SSE2, the last n%16 here.
		n16 := n &^ 15
		_ = dst[n*w-1]
		shuffle16(&dst[0], &recs[0], w, n, n16)
		for j := range w {
			for i := n16; i < n; i++ {
				dst[j*n+i] = recs[i*w+j]
			}
		}
		return
	}
	shuffleGo(dst, recs, w)
}

// shuffleGo is shuffle in Go: blocks of 8 records by 8 bytes are
// transposed in registers.
func shuffleGo(dst, recs []byte, w int) {
	n := len(recs) / w
	n8 := n &^ 7
	w8 := w &^ 7
	for i := 0; i < n8; i += 8 {
		r := recs[i*w : (i+8)*w]
		for j := 0; j < w8; j += 8 {
			y0, y1, y2, y3, y4, y5, y6, y7 := transpose8(
				binary.LittleEndian.Uint64(r[j:]),
				binary.LittleEndian.Uint64(r[w+j:]),
				binary.LittleEndian.Uint64(r[2*w+j:]),
				binary.LittleEndian.Uint64(r[3*w+j:]),
				binary.LittleEndian.Uint64(r[4*w+j:]),
				binary.LittleEndian.Uint64(r[5*w+j:]),
				binary.LittleEndian.Uint64(r[6*w+j:]),
				binary.LittleEndian.Uint64(r[7*w+j:]))
			d := dst[j*n+i:]
			binary.LittleEndian.PutUint64(d, y0)
			binary.LittleEndian.PutUint64(d[n:], y1)
			binary.LittleEndian.PutUint64(d[2*n:], y2)
			binary.LittleEndian.PutUint64(d[3*n:], y3)
			binary.LittleEndian.PutUint64(d[4*n:], y4)
			binary.LittleEndian.PutUint64(d[5*n:], y5)
			binary.LittleEndian.PutUint64(d[6*n:], y6)
			binary.LittleEndian.PutUint64(d[7*n:], y7)
		}
	}
	// The ragged edges: columns past w8 for every record, records past n8
	// for every column.
	for j := w8; j < w; j++ {
		for i := range n {
			dst[j*n+i] = recs[i*w+j]
		}
	}
	for j := range w8 {
		for i := n8; i < n; i++ {
			dst[j*n+i] = recs[i*w+j]
		}
	}
}

// unshuffle inverts shuffle (any width).
func unshuffle(dst, src []byte, w int) {
	n := len(src) / w
	for j := range w {
		col := src[j*n : (j+1)*n]
		for i, c := range col {
			dst[i*w+j] = c
		}
	}
}

// unshuffleWords inverts shuffle, and then diffPrev unless t is
// transformShuffle, in one pass, for widths that are a multiple of 8:
// transformShuffle on amd64 in SSE2 (shuffle_amd64.s), the rest in
// unshuffleWordsGo.
func unshuffleWords(dst, src []byte, w int, t frameTransform) {
	n := len(src) / w
	if shuffleAsm && t == transformShuffle && w%8 == 0 && n >= 16 {
		n16 := n &^ 15
		_ = dst[n*w-1]
		unshuffle16(&dst[0], &src[0], w, n, n16)
		for j := range w {
			for i := n16; i < n; i++ {
				dst[i*w+j] = src[j*n+i]
			}
		}
		return
	}
	unshuffleWordsGo(dst, src, w, t)
}

// unshuffleWordsGo is unshuffleWords in Go: for each 8-byte word column,
// blocks of 8 records are transposed back in registers and the column's
// running previous value is added (or XORed) in as they go.
func unshuffleWordsGo(dst, src []byte, w int, t frameTransform) {
	n := len(src) / w
	n8 := n &^ 7
	for j := 0; j < w; j += 8 {
		s := src[j*n : (j+8)*n]
		s0, s1, s2, s3 := s[:n], s[n:2*n], s[2*n:3*n], s[3*n:4*n]
		s4, s5, s6, s7 := s[4*n:5*n], s[5*n:6*n], s[6*n:7*n], s[7*n:8*n]
		var prev uint64 // the previous record's word (as loaded, for XOR; big-endian value, for delta)
		for i := 0; i < n8; i += 8 {
			y0, y1, y2, y3, y4, y5, y6, y7 := transpose8(
				binary.LittleEndian.Uint64(s0[i:]), binary.LittleEndian.Uint64(s1[i:]),
				binary.LittleEndian.Uint64(s2[i:]), binary.LittleEndian.Uint64(s3[i:]),
				binary.LittleEndian.Uint64(s4[i:]), binary.LittleEndian.Uint64(s5[i:]),
				binary.LittleEndian.Uint64(s6[i:]), binary.LittleEndian.Uint64(s7[i:]))
			d := dst[i*w+j : (i+7)*w+j+8]
			switch t {
			case transformShuffle:
				binary.LittleEndian.PutUint64(d, y0)
				binary.LittleEndian.PutUint64(d[w:], y1)
				binary.LittleEndian.PutUint64(d[2*w:], y2)
				binary.LittleEndian.PutUint64(d[3*w:], y3)
				binary.LittleEndian.PutUint64(d[4*w:], y4)
				binary.LittleEndian.PutUint64(d[5*w:], y5)
				binary.LittleEndian.PutUint64(d[6*w:], y6)
				binary.LittleEndian.PutUint64(d[7*w:], y7)
			case transformXORShuffle:
				y0 ^= prev
				y1 ^= y0
				y2 ^= y1
				y3 ^= y2
				y4 ^= y3
				y5 ^= y4
				y6 ^= y5
				y7 ^= y6
				prev = y7
				binary.LittleEndian.PutUint64(d, y0)
				binary.LittleEndian.PutUint64(d[w:], y1)
				binary.LittleEndian.PutUint64(d[2*w:], y2)
				binary.LittleEndian.PutUint64(d[3*w:], y3)
				binary.LittleEndian.PutUint64(d[4*w:], y4)
				binary.LittleEndian.PutUint64(d[5*w:], y5)
				binary.LittleEndian.PutUint64(d[6*w:], y6)
				binary.LittleEndian.PutUint64(d[7*w:], y7)
			default:
				v0 := prev + unzigzag(bits.ReverseBytes64(y0))
				v1 := v0 + unzigzag(bits.ReverseBytes64(y1))
				v2 := v1 + unzigzag(bits.ReverseBytes64(y2))
				v3 := v2 + unzigzag(bits.ReverseBytes64(y3))
				v4 := v3 + unzigzag(bits.ReverseBytes64(y4))
				v5 := v4 + unzigzag(bits.ReverseBytes64(y5))
				v6 := v5 + unzigzag(bits.ReverseBytes64(y6))
				v7 := v6 + unzigzag(bits.ReverseBytes64(y7))
				prev = v7
				binary.BigEndian.PutUint64(d, v0)
				binary.BigEndian.PutUint64(d[w:], v1)
				binary.BigEndian.PutUint64(d[2*w:], v2)
				binary.BigEndian.PutUint64(d[3*w:], v3)
				binary.BigEndian.PutUint64(d[4*w:], v4)
				binary.BigEndian.PutUint64(d[5*w:], v5)
				binary.BigEndian.PutUint64(d[6*w:], v6)
				binary.BigEndian.PutUint64(d[7*w:], v7)
			}
		}
		for i := n8; i < n; i++ {
			var v uint64
			for b := 7; b >= 0; b-- {
				v = v<<8 | uint64(s[b*n+i])
			}
			// v is the word as a little-endian load of its bytes.
			switch t {
			case transformShuffle:
			case transformXORShuffle:
				prev ^= v
				v = prev
			default:
				prev += unzigzag(bits.ReverseBytes64(v))
				v = bits.ReverseBytes64(prev)
			}
			binary.LittleEndian.PutUint64(dst[i*w+j:], v)
		}
	}
}

// transpose8 transposes the 8x8 byte matrix whose row r is xr (byte c of a
// row is bits 8c..8c+7): byte c of result r is byte r of xc. Three rounds
// of swapping 1-, 2- and 4-byte blocks.
func transpose8(x0, x1, x2, x3, x4, x5, x6, x7 uint64) (y0, y1, y2, y3, y4, y5, y6, y7 uint64) {
	const m1, m2, m4 = 0x00ff00ff00ff00ff, 0x0000ffff0000ffff, 0x00000000ffffffff
	var t uint64
	t = (x0>>8 ^ x1) & m1
	x1 ^= t
	x0 ^= t << 8
	t = (x2>>8 ^ x3) & m1
	x3 ^= t
	x2 ^= t << 8
	t = (x4>>8 ^ x5) & m1
	x5 ^= t
	x4 ^= t << 8
	t = (x6>>8 ^ x7) & m1
	x7 ^= t
	x6 ^= t << 8

	t = (x0>>16 ^ x2) & m2
	x2 ^= t
	x0 ^= t << 16
	t = (x1>>16 ^ x3) & m2
	x3 ^= t
	x1 ^= t << 16
	t = (x4>>16 ^ x6) & m2
	x6 ^= t
	x4 ^= t << 16
	t = (x5>>16 ^ x7) & m2
	x7 ^= t
	x5 ^= t << 16

	t = (x0>>32 ^ x4) & m4
	x4 ^= t
	x0 ^= t << 32
	t = (x1>>32 ^ x5) & m4
	x5 ^= t
	x1 ^= t << 32
	t = (x2>>32 ^ x6) & m4
	x6 ^= t
	x2 ^= t << 32
	t = (x3>>32 ^ x7) & m4
	x7 ^= t
	x3 ^= t << 32
	return x0, x1, x2, x3, x4, x5, x6, x7
}
