package lsm

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"sort"
	"time"
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
//     radix-sorted by key, stably: counting-sort passes (MSD) on the highest
//     byte that varies until a bucket fits the L2 cache, then LSD passes
//     over the bytes that vary (TIDs have nearly constant top bytes, which
//     cost nothing). The records are then moved into that order through a
//     scratch buffer: for a large buffer by two streaming passes
//     (scatterPartitioned), for a small one by a gather. Now every run of
//     records sharing their first 8 bytes is contiguous, in buffer order.
//  2. Each such run is sorted where it lies, by the same method on its
//     first word that varies (found with one sequential scan: a backlink
//     target's collection and DID after its rkey usually do not vary),
//     recursing on runs of equal words; short runs take an insertion sort,
//     and runs already in order (one target's links, filled in arrival
//     order, are nearly in source TID order) are left alone.
//
// Measured on 2M synthetic backlinks (128 MB), one core of a shared 2-vCPU
// VM, warm scratch, CPU time: in arrival order, keys 5 ms, radix 50 ms,
// scatter 115 ms, runs 50 ms, 225-260 ms in all; shuffled, ~330 ms (its
// runs all need sorting). BenchmarkSortRecords reports both CPU and wall
// time; the latter there includes other tenants' load.
//
// Extra memory: the pairs and their radix scratch (32 bytes a record) and a
// scratch of len(buf): 1.5x a backlink buffer, kept for the next sort until
// SortRecords has not run for sortCacheIdle.
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
	s := getSorter(n, width)
	s.sortFrom(buf, 0)
	putSorter(s)
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
	tmp     []sortEntry // radix scratch, as long as ents
	scratch []byte      // gather scratch, as long as the buffer
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
	if s.sorted(run, d) {
		return
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

// sorted reports whether the records of run, which agree on words [0, d),
// are in order already (often, for a run of one target's links: see
// radixSortKeys).
func (s *sorter) sorted(run []byte, d int) bool {
	w := s.width
	off := d * 8
	for o := w; o < len(run); o += w {
		if compareRecords(run[o-w+off:o], run[o+off:o+w]) > 0 {
			return false
		}
	}
	return true
}

// gather moves the records of run into the order of ents (ents[k].idx is
// the record that belongs at position k), through the scratch buffer.
// ents is clobbered.
func (s *sorter) gather(run []byte, ents []sortEntry) {
	if len(run) > partitionMin {
		s.scatterPartitioned(run, ents)
		return
	}
	w := s.width
	out := s.scratch[:len(run)]
	// A 64-byte record is copied as one array (a call of memmove for 64
	// bytes: faster here than eight word copies with their bounds checks,
	// and than an inline copy through a local array, BenchmarkSortRecords);
	// narrower ones word by word.
	switch w {
	case 64:
		for k := range ents {
			*(*[64]byte)(out[k*64:]) = *(*[64]byte)(run[int(ents[k].idx)*64:])
		}
	case 32:
		for k := range ents {
			gatherWords(out[k*32:][:32], run[int(ents[k].idx)*32:][:32])
		}
	case 16:
		for k := range ents {
			gatherWords(out[k*16:][:16], run[int(ents[k].idx)*16:][:16])
		}
	default:
		for k := range ents {
			src := int(ents[k].idx) * w
			copy(out[k*w:(k+1)*w], run[src:src+w])
		}
	}
	copy(run, out)
}

// partitionMin is the run size (bytes) above which gather partitions
// instead: in a run larger than the caches a random read is a cache and TLB
// miss (on a VM with 4 KiB pages, a two-dimensional page walk), and they
// hardly overlap.
const partitionMin = 4 << 20

// partitionBlock is the size of a destination block in scatterPartitioned:
// its records, placed at random within it, stay in the L2 cache and TLB.
const partitionBlock = 1 << 20

// scatterPartitioned permutes a large run with sequential passes only.
// Pass 1 reads the records in place order and appends each to the scratch
// region of its destination block (a hundred or so sequential write
// streams); pass 2 reads the scratch in order and writes each record to its
// exact position, which lies in the current block. Each record moves twice,
// but memory is streamed, not probed: measured on 2M backlinks (128 MB,
// warm memory, one core), 70 ms against 255 ms for a plain gather (random
// reads) plus copy back; an in-place American flag pass by destination
// block followed by cycles within blocks, which needs no scratch, took
// 540 ms, and following the permutation's cycles in place 360-600 ms.
func (s *sorter) scatterPartitioned(run []byte, ents []sortEntry) {
	w := s.width
	n := len(ents)
	shift := uint(bits.Len(uint(max(partitionBlock/w, 1))) - 1)
	nBlocks := (n + 1<<shift - 1) >> shift
	// pos[i].idx: the destination of record i (in the radix scratch, free
	// now).
	pos := s.tmp[:n]
	for k := range ents {
		pos[ents[k].idx].idx = uint32(k)
	}
	next := make([]uint32, nBlocks)
	for b := range next {
		next[b] = uint32(b) << shift
	}
	out := s.scratch[:len(run)]
	// Records copied as gather copies them: a 64-byte one as one array.
	words := w%8 == 0 && w <= 64
	for i := range pos {
		p := pos[i].idx
		b := p >> shift
		j := next[b]
		next[b]++
		switch {
		case w == 64:
			*(*[64]byte)(out[int(j)*64:]) = *(*[64]byte)(run[i*64:])
		case words:
			gatherWords(out[int(j)*w:][:w], run[i*w:][:w])
		default:
			copy(out[int(j)*w:][:w], run[i*w:][:w])
		}
		ents[j].idx = p
	}
	for j := range ents {
		p := int(ents[j].idx)
		switch {
		case w == 64:
			*(*[64]byte)(run[p*64:]) = *(*[64]byte)(out[j*64:])
		case words:
			gatherWords(run[p*w:][:w], out[j*w:][:w])
		default:
			copy(run[p*w:][:w], out[j*w:][:w])
		}
	}
}

// gatherWords copies src to dst (same length, a multiple of 8 up to 64) a
// word at a time.
func gatherWords(dst, src []byte) {
	for o := 0; o+8 <= len(src) && o+8 <= len(dst); o += 8 {
		binary.LittleEndian.PutUint64(dst[o:], binary.LittleEndian.Uint64(src[o:]))
	}
}

// radixSortKeys sorts ents by key, stably, using tmp (as long as ents) as
// scratch. Large inputs take counting-sort passes (MSD) on their highest
// eight varying bits until a bucket fits the L2 cache (lsdMax entries);
// there, LSD passes over the varying bytes finish the job. Stability keeps records
// with equal keys in buffer order: a memtable is filled in arrival order,
// nearly the order of the source TIDs, so the runs sortFrom sorts next are
// often sorted already.
func radixSortKeys(ents, tmp []sortEntry) {
	n := len(ents)
	if n <= 32 {
		slices.SortStableFunc(ents, func(a, b sortEntry) int { return cmpUint64(a.key, b.key) })
		return
	}
	// The bits that vary: which bytes LSD passes skip, and where an MSD
	// pass splits.
	first := ents[0].key
	var diff uint64
	for i := range ents {
		diff |= ents[i].key ^ first
	}
	if diff == 0 {
		return // all keys equal
	}
	if n > lsdMax {
		// Split on the highest eight bits that vary, wherever they lie: a
		// memtable's target rkeys are mostly TIDs, whose top byte takes
		// two or three values, so a split on whole bytes spent its first
		// pass on three buckets.
		shift := uint(max(bits.Len64(diff)-8, 0))
		var c [256]uint32
		for i := range ents {
			c[byte(ents[i].key>>shift)]++
		}
		var starts [257]uint32
		var sum uint32
		for b := range c {
			starts[b] = sum
			sum += c[b]
		}
		starts[256] = sum
		next := starts
		for _, e := range ents {
			b := byte(e.key >> shift)
			tmp[next[b]] = e
			next[b]++
		}
		copy(ents, tmp[:n])
		for b := range 256 {
			lo, hi := starts[b], starts[b+1]
			if hi-lo > 1 {
				radixSortKeys(ents[lo:hi], tmp[lo:hi])
			}
		}
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
	varies := func(d int) bool { return byte(diff>>(8*d)) != 0 }
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

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sortCache keeps the last sort's scratch memory (1.5x a backlink buffer)
// for the next sort (idleCache: a memtable is sorted every few seconds).
var sortCache idleCache[*sorter]

// sortCacheIdle is how long sort scratch memory outlives its last use.
const sortCacheIdle = 30 * time.Second

func getSorter(n, width int) *sorter {
	s := sortCache.take()
	if s == nil {
		s = &sorter{}
	}
	s.width, s.words = width, (width+7)/8
	if cap(s.ents) < n {
		s.ents = make([]sortEntry, n)
	}
	if cap(s.tmp) < n {
		s.tmp = make([]sortEntry, n)
	}
	s.ents, s.tmp = s.ents[:n], s.tmp[:n]
	if cap(s.scratch) < n*width {
		s.scratch = make([]byte, n*width)
	}
	s.scratch = s.scratch[:n*width]
	return s
}

func putSorter(s *sorter) {
	sortCache.keep(s, func(kept, s *sorter) bool { return kept == nil || cap(kept.scratch) < cap(s.scratch) })
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
