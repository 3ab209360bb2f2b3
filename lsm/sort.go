package lsm

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"sort"
	"sync"
)

// SortRecords sorts the fixed-width records in buf in place by their bytes
// (the order of every tree: a Backlink's or a Revocation's byte order).
// len(buf) should be a multiple of width; a trailing partial record is left
// where it is. Duplicates are kept (they are byte-identical, so their order
// does not matter).
//
// The sort never compares records in random places of a large buffer (each
// such access is a cache and TLB miss); it works in two phases:
//
//  1. A side array of (8-byte key, index) pairs, 16 bytes a record, is
//     loaded sequentially with every record's first 8 bytes (big-endian) and
//     radix-sorted by key: in-place MSD passes (American flag sort) on the
//     highest byte that varies until a bucket fits the L2 cache, then LSD
//     passes over the bytes that vary (TIDs have nearly constant top bytes,
//     which cost nothing). The records are then gathered into that order in
//     a scratch buffer (independent random reads, which overlap) and copied
//     back. Now every run of records sharing their first 8 bytes is
//     contiguous.
//  2. Each such run is sorted where it lies, by the same method on its
//     first word that varies (found with one sequential scan; a backlink
//     target's collection and DID after its rkey usually do not), recursing
//     on runs of equal words; short runs take an insertion sort.
//
// Extra memory: the pairs (16 bytes a record) and a scratch of len(buf),
// kept in a sync.Pool for the next sort (a memtable is sorted every few
// seconds, and a fresh buffer costs a page fault every 4 KiB).
//
// Measured figures are in frame.go's comment (BenchmarkSortRecords).
func SortRecords(buf []byte, width int) {
	if width <= 0 {
		return
	}
	n := len(buf) / width
	if n < 2 {
		return
	}
	buf = buf[:n*width]
	if n <= insertionMax {
		insertionSortRecords(buf, width, 0)
		return
	}
	if uint64(n) >= math.MaxUint32 {
		// Indexes are 32 bits; a buffer of four billion records is far
		// beyond any memtable, but stay correct.
		sort.Sort(recordSlice{buf: buf, width: width, tmp: make([]byte, width)})
		return
	}
	s := sorter{width: width, words: (width + 7) / 8}
	s.ents = make([]sortEntry, n)
	s.tmp = make([]sortEntry, min(n, lsdMax))
	bp := getSortScratch(len(buf))
	s.scratch = (*bp)[:len(buf)]
	s.sortFrom(buf, 0)
	sortScratch.Put(bp)
}

// insertionMax is the longest run sorted by insertion: records that share
// a prefix and sit next to each other in memory compare cheaply.
const insertionMax = 16

// sortEntry is one record during SortRecords: 8 bytes of its key (at the
// current word) and its index in the run.
type sortEntry struct {
	key uint64
	idx uint32
}

type sorter struct {
	width   int
	words   int         // 8-byte words a record spans (the last may be partial)
	ents    []sortEntry // keys, as long as the buffer
	tmp     []sortEntry // LSD radix scratch, lsdMax long
	scratch []byte      // gather scratch, as long as the buffer
	pos     []uint32    // scatterPartitioned's inverse permutation
}

// word returns bytes [8w, 8w+8) of the record at off as a big-endian
// integer, padded with zeros past the record's end.
func (s *sorter) word(b []byte, off int, w int) uint64 {
	at := off + w*8
	end := off + s.width
	if at+8 <= end {
		return binary.BigEndian.Uint64(b[at:])
	}
	var k uint64
	for j := at; j < at+8; j++ {
		k <<= 8
		if j < end {
			k |= uint64(b[j])
		}
	}
	return k
}

// sortFrom sorts the records of run (contiguous, at least two), which agree
// on words [0, from), by the rest of their bytes.
func (s *sorter) sortFrom(run []byte, from int) {
	w := s.width
	n := len(run) / w
	if n <= insertionMax {
		insertionSortRecords(run, w, from*8)
		return
	}
	// The first word on which the run's records differ.
	d := s.words
	for off := w; off < len(run); off += w {
		for j := from; j < d; j++ {
			if s.word(run, off, j) != s.word(run, 0, j) {
				d = j
				break
			}
		}
		if d == from {
			break
		}
	}
	if d == s.words {
		return // all equal
	}
	ents := s.ents[:n]
	for i := range ents {
		ents[i] = sortEntry{key: s.word(run, i*w, d), idx: uint32(i)}
	}
	radixSortKeys(ents, s.tmp)
	s.gather(run, ents)
	if d+1 == s.words {
		return // the key covered the rest of the records
	}
	// Runs of equal words d: sort them by the following words. (ents is
	// reused by the recursion, so find the runs on the records.)
	for i := 0; i < n; {
		k := s.word(run, i*w, d)
		j := i + 1
		for j < n && s.word(run, j*w, d) == k {
			j++
		}
		if j-i > 1 {
			s.sortFrom(run[i*w:j*w], d+1)
		}
		i = j
	}
}

// gather moves the records of run into the order of ents (ents[k].idx is
// the record that belongs at position k) through the scratch buffer. ents
// is clobbered.
func (s *sorter) gather(run []byte, ents []sortEntry) {
	if len(run) > partitionMin {
		s.scatterPartitioned(run, ents)
		return
	}
	w := s.width
	out := s.scratch[:len(run)]
	if w%8 == 0 && w <= 64 {
		// Whole words: a [w]byte copy would call memmove per record.
		for k := range ents {
			src := run[int(ents[k].idx)*w:][:w]
			dst := out[k*w:][:w]
			for o := 0; o < w; o += 8 {
				binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(src[o:]))
			}
		}
	} else {
		for k := range ents {
			src := int(ents[k].idx) * w
			copy(out[k*w:(k+1)*w], run[src:src+w])
		}
	}
	copy(run, out)
}

// partitionMin is the run size (bytes) above which gather partitions: a
// run larger than the caches makes each random read a cache and TLB miss.
const partitionMin = 4 << 20

// partitionBlock is the size of a destination block in scatterPartitioned:
// small enough that writes within a block stay in the L2 cache.
const partitionBlock = 256 << 10

// scatterPartitioned permutes a large run with sequential passes only.
// Pass 1 reads the records in place order and appends each to the scratch
// region of its destination block (a few hundred sequential write streams);
// pass 2 reads the scratch in order and writes each record to its exact
// position, which lies in the current block (L2-resident). Each record
// moves twice, but memory is streamed, not probed.
func (s *sorter) scatterPartitioned(run []byte, ents []sortEntry) {
	w := s.width
	n := len(ents)
	shift := uint(bits.Len(uint(max(partitionBlock/w, 1))) - 1)
	for (n>>shift)+1 > 2048 {
		shift++ // bound the number of write streams
	}
	nBlocks := (n + 1<<shift - 1) >> shift
	// pos[i]: the destination of record i.
	if cap(s.pos) < n {
		s.pos = make([]uint32, n)
	}
	pos := s.pos[:n]
	for k := range ents {
		pos[ents[k].idx] = uint32(k)
	}
	next := make([]uint32, nBlocks)
	for b := range next {
		next[b] = uint32(b) << shift
	}
	out := s.scratch[:len(run)]
	words := w%8 == 0 && w <= 64
	for i, p := range pos {
		b := p >> shift
		j := next[b]
		next[b]++
		src := run[i*w:][:w]
		dst := out[int(j)*w:][:w]
		if words {
			for o := 0; o < w; o += 8 {
				binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(src[o:]))
			}
		} else {
			copy(dst, src)
		}
		ents[j].idx = p
	}
	for j := range ents {
		p := int(ents[j].idx)
		src := out[j*w:][:w]
		dst := run[p*w:][:w]
		if words {
			for o := 0; o < w; o += 8 {
				binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(src[o:]))
			}
		} else {
			copy(dst, src)
		}
	}
}

// radixSortKeys sorts ents by key, using tmp (at least min(len(ents),
// lsdMax) long) as scratch. Large inputs take in-place MSD passes (American
// flag sort) on their highest varying byte until a bucket fits the L2 cache
// (lsdMax entries); there, LSD passes over the varying bytes, ping-ponging
// with tmp, finish the job.
func radixSortKeys(ents, tmp []sortEntry) {
	n := len(ents)
	if n <= 32 {
		slices.SortFunc(ents, func(a, b sortEntry) int { return cmpU64(a.key, b.key) })
		return
	}
	var counts [8][256]uint32
	for i := range ents {
		k := ents[i].key
		counts[0][byte(k)]++
		counts[1][byte(k>>8)]++
		counts[2][byte(k>>16)]++
		counts[3][byte(k>>24)]++
		counts[4][byte(k>>32)]++
		counts[5][byte(k>>40)]++
		counts[6][byte(k>>48)]++
		counts[7][byte(k>>56)]++
	}
	first := ents[0].key
	varies := func(d int) bool { return counts[d][byte(first>>(8*d))] != uint32(n) }
	if n > lsdMax {
		d := 7
		for d >= 0 && !varies(d) {
			d--
		}
		if d < 0 {
			return // all keys equal
		}
		c := &counts[d]
		var starts, next [257]uint32
		var sum uint32
		for b := range c {
			starts[b] = sum
			sum += c[b]
		}
		starts[256] = sum
		next = starts
		shift := uint(8 * d)
		for b := range 256 {
			end := starts[b+1]
			for next[b] < end {
				e := ents[next[b]]
				db := byte(e.key >> shift)
				for int(db) != b {
					e, ents[next[db]] = ents[next[db]], e
					next[db]++
					db = byte(e.key >> shift)
				}
				ents[next[b]] = e
				next[b]++
			}
		}
		for b := range 256 {
			lo, hi := starts[b], starts[b+1]
			if hi-lo > 1 {
				radixSortKeys(ents[lo:hi], tmp)
			}
		}
		return
	}
	src, dst := ents, tmp[:n]
	for d := range 8 {
		if !varies(d) {
			continue
		}
		c := &counts[d]
		var sum uint32
		for b := range c {
			v := c[b]
			c[b] = sum
			sum += v
		}
		shift := uint(8 * d)
		for i := range src {
			e := src[i]
			b := byte(e.key >> shift)
			dst[c[b]] = e
			c[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &ents[0] {
		copy(ents, src)
	}
}

// lsdMax is the largest input radixSortKeys sorts with LSD passes: two
// arrays of it (entries and scratch, 16 bytes an entry) fit a 1 MiB L2.
const lsdMax = 1 << 15

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sortScratch keeps the last gather buffer for the next sort; the pool
// lets the GC reclaim it when sorts stop.
var sortScratch sync.Pool

func getSortScratch(n int) *[]byte {
	if bp, ok := sortScratch.Get().(*[]byte); ok && cap(*bp) >= n {
		return bp
	}
	b := make([]byte, n)
	return &b
}

// insertionSortRecords sorts a handful of contiguous records that agree on
// their first skip bytes.
func insertionSortRecords(buf []byte, w int, skip int) {
	n := len(buf) / w
	var tmpArr [64]byte
	tmp := tmpArr[:0]
	if w > len(tmpArr) {
		tmp = make([]byte, w)
	} else {
		tmp = tmpArr[:w]
	}
	rec := func(i int) []byte { return buf[i*w+skip : (i+1)*w] }
	for i := 1; i < n; i++ {
		if bytes.Compare(rec(i-1), rec(i)) <= 0 {
			continue
		}
		copy(tmp, buf[i*w:(i+1)*w])
		j := i
		for j > 0 && bytes.Compare(rec(j-1), tmp[skip:]) > 0 {
			copy(buf[j*w:(j+1)*w], buf[(j-1)*w:j*w])
			j--
		}
		copy(buf[j*w:(j+1)*w], tmp)
	}
}

// recordSlice sorts records by swapping them (the fallback for buffers too
// large for 32-bit indexes).
type recordSlice struct {
	buf   []byte
	width int
	tmp   []byte
}

func (r recordSlice) Len() int { return len(r.buf) / r.width }
func (r recordSlice) Less(i, j int) bool {
	w := r.width
	return bytes.Compare(r.buf[i*w:(i+1)*w], r.buf[j*w:(j+1)*w]) < 0
}
func (r recordSlice) Swap(i, j int) {
	w := r.width
	copy(r.tmp, r.buf[i*w:(i+1)*w])
	copy(r.buf[i*w:(i+1)*w], r.buf[j*w:(j+1)*w])
	copy(r.buf[j*w:(j+1)*w], r.tmp)
}
