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
// the meta, so a table written with any of them stays readable.
//
// Transforms tried (frameTransform values), on the synthetic workload of
// format_bench_test.go (sorted backlinks: Zipf-popular targets, TID-ordered
// sources, ~30 collections and ~25 paths, increasing revs; revocations
// derived from it), measured by TestMeasureFrameCodecs
// (go test ./lsm -run MeasureFrameCodecs -v -lsm.measure):
//
// MEASUREMENTS-PLACEHOLDER
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

	transformCount = 4
)

// candidateTransforms are the transforms BuildTable chooses from, per table
// (chooseTransform): neither wins everywhere (see the measurements above).
var candidateTransforms = [...]frameTransform{transformXORShuffle, transformDeltaShuffle}

// transformSamples is how many frames chooseTransform compresses with each
// candidate: enough to see the table's shape, a small cost next to the
// table's own frames (a table of one sample's size is not worth choosing
// for).
const transformSamples = 4

// chooseTransform compresses up to transformSamples frames spread over recs
// (n records of width w, perFrame records a frame) with each candidate
// transform and returns the one that makes them smallest (the first
// candidate on a tie, and for tables of a frame or two).
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
	}
	return fmt.Sprintf("transform(%d)", uint8(t))
}

// DefaultCompressionLevel is the zstd level BuildTable uses when
// TableOptions.CompressionLevel is 0 (see the measurements above).
const DefaultCompressionLevel = 1

// encoders holds one zstd encoder per klauspost level, created on first use
// (an encoder is expensive to create; EncodeAll is safe for concurrent use,
// up to GOMAXPROCS at once).
var encoders [5]struct {
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
	e := &encoders[l]
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

// decoder decompresses frames. DecodeAll is safe for concurrent use (up to
// GOMAXPROCS at once; more wait); WithDecodeAllCapLimit makes it decode at
// most cap(dst) bytes, so a frame can never expand past what the meta says.
var decoder = sync.OnceValues(func() (*zstd.Decoder, error) {
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
	case transformShuffle:
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
// of record i goes to dst[j*n+i]. Blocks of 8 records by 8 bytes are
// transposed in registers.
func shuffle(dst, recs []byte, w int) {
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
// transformShuffle, in one pass, for widths that are a multiple of 8: for
// each 8-byte word column, blocks of 8 records are transposed back in
// registers and the column's running previous value is added (or XORed)
// in as they go.
func unshuffleWords(dst, src []byte, w int, t frameTransform) {
	n := len(src) / w
	n8 := n &^ 7
	for j := 0; j < w; j += 8 {
		var prev uint64 // the word of the previous record, byte-swapped as loaded
		s := src[j*n : (j+8)*n]
		for i := 0; i < n8; i += 8 {
			y := [8]uint64{}
			y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7] = transpose8(
				binary.LittleEndian.Uint64(s[i:]),
				binary.LittleEndian.Uint64(s[n+i:]),
				binary.LittleEndian.Uint64(s[2*n+i:]),
				binary.LittleEndian.Uint64(s[3*n+i:]),
				binary.LittleEndian.Uint64(s[4*n+i:]),
				binary.LittleEndian.Uint64(s[5*n+i:]),
				binary.LittleEndian.Uint64(s[6*n+i:]),
				binary.LittleEndian.Uint64(s[7*n+i:]))
			d := dst[i*w+j:]
			switch t {
			case transformShuffle:
				for k := range 8 {
					binary.LittleEndian.PutUint64(d[k*w:], y[k])
				}
			case transformXORShuffle:
				for k := range 8 {
					prev ^= y[k]
					binary.LittleEndian.PutUint64(d[k*w:], prev)
				}
			default:
				for k := range 8 {
					prev += unzigzag(bits.ReverseBytes64(y[k]))
					binary.BigEndian.PutUint64(d[k*w:], prev)
				}
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
