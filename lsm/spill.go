package lsm

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
)

// spill holds an input table's records, split by a compaction's output
// shards, until those shards are built: a temporary file of compressed blocks (each up to spillBlockBytes of
// records, shuffled and S2-compressed: a fast codec, as the spill is
// written and read once) and, in memory, each output shard's sorted
// sequences of blocks. A sequence is one input table's records of the
// shard, in order (a spill per input table: one sequence a shard).
type spill struct {
	file     *os.File
	bw       *bufio.Writer
	w        int
	perBlock int          // records a block holds at most
	pend     [][]byte     // per shard, records not yet in a block
	pendSum  int          // bytes in pend
	pendCap  int          // a pending block's first capacity
	open     []bool       // per shard, a sequence is open (the current table has records of it)
	shards   [][]spillSeq // per shard, its sequences
	records  []int        // per shard, the records spilled
	off      int64        // bytes written
	comp     []byte       // a block's compressed bytes
	tmp      []byte       // a block's transformed records
}

// spillSeq is a sorted sequence of blocks.
type spillSeq struct {
	blocks []spillBlock
}

// spillBlock is one block of the spill file.
type spillBlock struct {
	off  int64
	clen int32 // compressed bytes
	n    int32 // records
}

// spillTransform is what a spill block's records go through before S2:
// shuffled (byte k of every 8-byte word together). On the blocks of a
// 20M-link backfill's tables (a delta run's and a compacted run's, split
// by 8 output shards) shuffled blocks took 15.6-17.2 bytes a record and
// ~80 ns a record to write and read back, against 15.7-17.4 bytes and
// ~100-150 ns differenced with the previous record first (the transform
// before), 24-25 bytes and ~110-120 ns with S2 alone.
const spillTransform = transformShuffle

// spillBlockBytes bounds a spill block's records (uncompressed); the
// pending blocks of all shards together are bounded by spillPendMax. It
// does not depend on the tables' frames.
const spillBlockBytes = 64 << 10

// newSpill creates the spill file in dir (os.TempDir() when "") for
// records of width w split into shards.
func newSpill(dir string, w, shards int) (*spill, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("compaction spill: %w", err)
	}
	spillsCreated.Add(1)
	file, err := os.CreateTemp(dir, "compaction-*.spill")
	if err != nil {
		return nil, fmt.Errorf("compaction spill: %w", err)
	}
	return &spill{
		file: file, bw: bufio.NewWriterSize(file, 1<<20), w: w, perBlock: spillBlockBytes / w,
		// Small at first (most shards' buffers stay short), smaller still
		// with many shards, so that their first allocations stay near
		// spillPendMax together; a record at least.
		pendCap: max(w, min(4<<10, spillPendMax/shards)/w*w),
		pend:    make([][]byte, shards), open: make([]bool, shards), shards: make([][]spillSeq, shards), records: make([]int, shards),
	}, nil
}

// close removes the spill file.
func (sp *spill) close() {
	sp.file.Close()
	os.Remove(sp.file.Name())
}

// add appends records (whole, in order) to shard s's open sequence
// (opening one if the current table had none of s yet), writing a block
// each time one fills.
func (sp *spill) add(s int, recs []byte) error {
	if !sp.open[s] {
		sp.open[s] = true
		sp.shards[s] = append(sp.shards[s], spillSeq{})
		if sp.pend[s] == nil {
			sp.pend[s] = make([]byte, 0, min(sp.pendCap, sp.perBlock*sp.w))
		}
	}
	for len(recs) > 0 {
		room := sp.perBlock*sp.w - len(sp.pend[s])
		n := min(room, len(recs))
		sp.pend[s] = append(sp.pend[s], recs[:n]...)
		sp.pendSum += n
		recs = recs[n:]
		if n == room {
			if err := sp.writeBlock(s); err != nil {
				return err
			}
		}
	}
	if sp.pendSum > spillPendMax {
		for s := range sp.pend {
			if len(sp.pend[s]) > 0 {
				if err := sp.writeBlock(s); err != nil {
					return err
				}
			}
			if cap(sp.pend[s]) > sp.pendCap {
				// Grown buffers go back to the first size, so that
				// their capacity, too, stays near the bound.
				sp.pend[s] = make([]byte, 0, sp.pendCap)
			}
		}
	}
	return nil
}

// spillPendMax bounds the bytes of a spill's pending blocks: past it,
// every pending block is written, shorter. A table split over thousands
// of output shards (a delta run's in a full compaction) would otherwise
// hold most of its records in memory until it ends.
var spillPendMax = 16 << 20 // a var for tests

// endSequence closes every open sequence: the next records of a shard
// start a new one.
func (sp *spill) endSequence() error {
	for s, open := range sp.open {
		if !open {
			continue
		}
		if len(sp.pend[s]) > 0 {
			if err := sp.writeBlock(s); err != nil {
				return err
			}
		}
		sp.open[s] = false
	}
	return nil
}

// writeBlock writes shard s's pending records as a block of its open
// sequence.
func (sp *spill) writeBlock(s int) error {
	recs := sp.pend[s]
	sp.tmp = growLen(sp.tmp, len(recs))
	encodeTransform(spillTransform, sp.tmp, recs, sp.w)
	sp.comp = s2.Encode(sp.comp[:cap(sp.comp)], sp.tmp)
	if _, err := sp.bw.Write(sp.comp); err != nil {
		return fmt.Errorf("compaction spill: %w", err)
	}
	seq := &sp.shards[s][len(sp.shards[s])-1]
	n := len(recs) / sp.w
	seq.blocks = append(seq.blocks, spillBlock{off: sp.off, clen: int32(len(sp.comp)), n: int32(n)})
	sp.records[s] += n
	sp.off += int64(len(sp.comp))
	sp.pend[s] = recs[:0]
	sp.pendSum -= len(recs)
	return nil
}

// finish writes what is buffered and frees the pending buffers: the spill
// is ready to be read.
func (sp *spill) finish() error {
	if err := sp.endSequence(); err != nil {
		return err
	}
	sp.pend = nil
	if err := sp.bw.Flush(); err != nil {
		return fmt.Errorf("compaction spill: %w", err)
	}
	return nil
}

// spillIter reads one sequence, block by block (a blockSource).
type spillIter struct {
	sp    *spill
	seq   *spillSeq
	block int    // the next block to read
	recs  []byte // the current block's records
	comp  []byte
	tmp   []byte
}

// nextBlock reads the sequence's next block (nil after its last).
func (it *spillIter) nextBlock() ([]byte, error) {
	if it.block == len(it.seq.blocks) {
		return nil, nil
	}
	b := it.seq.blocks[it.block]
	it.block++
	if err := it.sp.readBlock(b, &it.comp, &it.tmp, &it.recs); err != nil {
		return nil, err
	}
	return it.recs, nil
}

// readBlock reads block b into *recs, through the buffers *comp and *tmp
// (each grown as needed).
func (sp *spill) readBlock(b spillBlock, comp, tmp, recs *[]byte) error {
	*comp = growLen(*comp, int(b.clen))
	if _, err := sp.file.ReadAt(*comp, b.off); err != nil {
		return fmt.Errorf("read compaction spill: %w", err)
	}
	size := int(b.n) * sp.w
	if n, err := s2.DecodedLen(*comp); err != nil || n != size {
		return fmt.Errorf("compaction spill block at %d: %d bytes, want %d (%v): %w", b.off, n, size, err, ErrCorrupt)
	}
	*tmp = growLen(*tmp, size)
	var err error
	*tmp, err = s2.Decode(*tmp, *comp)
	if err != nil || len(*tmp) != size {
		return fmt.Errorf("compaction spill block at %d: %d bytes, want %d (%v): %w", b.off, len(*tmp), size, err, ErrCorrupt)
	}
	*recs = growLen(*recs, size)
	decodeTransform(spillTransform, *recs, *tmp, sp.w)
	return nil
}

// growLen returns b with length n, reallocated if its capacity is short.
func growLen(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// RemoveSpills removes the spill files a compaction cut short (a crash)
// left in dir; it returns how many.
func RemoveSpills(dir string) (int, error) {
	if dir == "" {
		return 0, nil
	}
	names, err := filepath.Glob(filepath.Join(dir, "compaction-*.spill"))
	if err != nil {
		return 0, err
	}
	for _, n := range names {
		if err := os.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	return len(names), nil
}

// spillsCreated counts the spill files made (one per input table of a
// compaction); the tests read it.
var spillsCreated atomic.Int64

// spillsOpenPeak is the most spill files a compaction had at once; the
// tests read it.
var spillsOpenPeak atomic.Int64

// spillPeak is the most local disk a compaction's spill files took at
// once (those of the input tables open together).
var spillPeak atomic.Int64

// noteSpillBytes records n bytes of spill files at once.
func noteSpillBytes(n int64) { storeMax(&spillPeak, n) }

// storeMax raises v to n if it is lower.
func storeMax(v *atomic.Int64, n int64) {
	for {
		p := v.Load()
		if n <= p || v.CompareAndSwap(p, n) {
			return
		}
	}
}

// SpillPeakBytes is the most local disk the spill files of one compaction
// took at once, over every compaction of this process since it started or
// since ResetSpillPeak.
func SpillPeakBytes() int64 { return spillPeak.Load() }

// ResetSpillPeak starts SpillPeakBytes again from 0 (a benchmark's next
// phase).
func ResetSpillPeak() { spillPeak.Store(0) }

// mergeBufCache keeps the last compaction's merge buffer (its largest
// output shard's records) for the next one (idleCache: faulting in
// hundreds of megabytes of fresh memory cost more than the merge on the
// VM of the measurements).
var mergeBufCache idleCache[[]byte]

// getMergeBuf returns an empty buffer of capacity at least n.
func getMergeBuf(n int) []byte {
	b := mergeBufCache.take()
	if cap(b) < n {
		b = make([]byte, 0, n)
	}
	return b[:0]
}

// putMergeBuf keeps b for the next compaction.
func putMergeBuf(b []byte) {
	mergeBufCache.keep(b[:0], func(kept, b []byte) bool { return cap(kept) < cap(b) })
}
