package lsm

import (
	"encoding/binary"
	"fmt"
)

// blockSource yields a sorted sequence of records a block at a time: a
// spill's sequence, or an input table's frames decoded one by one.
type blockSource interface {
	// nextBlock returns the sequence's next records, whole (nil at its
	// end). They stay valid until the next call.
	nextBlock() ([]byte, error)
}

// cursor is a sequence's place in a merge: its current block, the
// record at, and that record's first three 8-byte words as big-endian
// integers (a backlink's target), which order most pairs of records
// without reading them again: a follow's target is an account, whose
// first two words are 0, so one word left every pair of them to a
// comparison of the records.
type cursor struct {
	key  [3]uint64
	recs []byte
	at   int
	done bool
	src  blockSource
}

// fill loads the source's next non-empty block, or marks the cursor done.
func (c *cursor) fill(w int) error {
	for {
		b, err := c.src.nextBlock()
		if err != nil {
			return err
		}
		if b == nil {
			c.done, c.recs, c.at = true, nil, 0
			return nil
		}
		if len(b)%w != 0 {
			return fmt.Errorf("merge: a block of %d bytes, records of %d: %w", len(b), w, ErrCorrupt)
		}
		if len(b) > 0 {
			c.recs, c.at = b, 0
			c.key = recordKeys(b, w)
			return nil
		}
	}
}

// recordKeys is the first three 8-byte words of the record at rec (zero
// past a record narrower than 24 bytes), big-endian: records in bytewise
// order have keys in order.
func recordKeys(rec []byte, w int) [3]uint64 {
	if w >= 24 {
		return [3]uint64{binary.BigEndian.Uint64(rec), binary.BigEndian.Uint64(rec[8:]), binary.BigEndian.Uint64(rec[16:])}
	}
	var b [24]byte
	copy(b[:], rec[:w])
	return [3]uint64{binary.BigEndian.Uint64(b[:]), binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:])}
}

// cursorHeap is a binary min-heap of cursors by their head records,
// most pairs ordered by their head keys alone. (A tournament of losers,
// log2(k) comparisons a record where the heap makes up to twice as many,
// was no faster on Zipf-distributed targets, and slower at eight inputs:
// a popular target's records come in runs from one input, and the root
// then stays on top after one comparison: mergeEach keeps its smaller
// child.)
type cursorHeap struct {
	cs []*cursor
	w  int
}

// less reports whether cursor a's record comes before cursor b's.
func (h *cursorHeap) less(a, b *cursor) bool {
	if a.key[0] != b.key[0] {
		return a.key[0] < b.key[0]
	}
	if a.key[1] != b.key[1] {
		return a.key[1] < b.key[1]
	}
	if a.key[2] != b.key[2] {
		return a.key[2] < b.key[2]
	}
	if h.w == 64 { // the first three words are equal: the keys
		return compare64(3, (*[64]byte)(a.recs[a.at:a.at+64]), (*[64]byte)(b.recs[b.at:b.at+64])) < 0
	}
	return compareRecords(a.recs[a.at:a.at+h.w], b.recs[b.at:b.at+h.w]) < 0
}

func (h *cursorHeap) down(i int) {
	cs := h.cs
	for {
		c := 2*i + 1
		if c >= len(cs) {
			return
		}
		if c+1 < len(cs) && h.less(cs[c+1], cs[c]) {
			c++
		}
		if !h.less(cs[c], cs[i]) {
			return
		}
		cs[i], cs[c] = cs[c], cs[i]
		i = c
	}
}

// mergeCursors appends the records of the sorted sequences cs (size bytes
// together, records of width w), merged into order, to dst (grown to hold
// them) and returns it.
func mergeCursors(cs []*cursor, w, size int, dst []byte) ([]byte, error) {
	start := len(dst)
	if cap(dst)-start < size {
		// With headroom: the next shard may be a little larger again,
		// and fresh memory costs its page faults each time.
		dst = append(make([]byte, 0, start+size+size/8), dst...)
	}
	err := mergeEach(cs, w, func(rec []byte) error {
		dst = append(dst, rec...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(dst)-start != size {
		return nil, fmt.Errorf("merge gave %d bytes, want %d: %w", len(dst)-start, size, ErrCorrupt)
	}
	return dst, nil
}

// mergeEach calls emit with each record of the sorted sequences cs
// (records of width w), merged into order; rec is valid during the call
// only. It stops at emit's first error and returns it.
func mergeEach(cs []*cursor, w int, emit func(rec []byte) error) error {
	h := cursorHeap{cs: make([]*cursor, 0, len(cs)), w: w}
	for _, c := range cs {
		if err := c.fill(w); err != nil {
			return err
		}
		if !c.done {
			h.cs = append(h.cs, c)
		}
	}
	for i := len(h.cs)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	// The root's smaller child (0: not known), kept while the root stays
	// on top: its children do not change then, and the root's next record
	// is compared with it alone, where down compares the two children
	// first (a popular target's links come in runs from one input).
	second := 0
	for len(h.cs) > 0 {
		c := h.cs[0]
		if err := emit(c.recs[c.at : c.at+w]); err != nil {
			return err
		}
		if c.at += w; c.at < len(c.recs) {
			c.key = recordKeys(c.recs[c.at:], w)
		} else {
			if err := c.fill(w); err != nil {
				return err
			}
			if c.done {
				last := len(h.cs) - 1
				h.cs[0] = h.cs[last]
				h.cs = h.cs[:last]
				h.down(0)
				second = 0
				continue
			}
		}
		if second == 0 {
			switch {
			case len(h.cs) > 2 && h.less(h.cs[2], h.cs[1]):
				second = 2
			case len(h.cs) > 1:
				second = 1
			default:
				continue // one input left
			}
		}
		if h.less(h.cs[second], c) { // as down decides: the root moves
			h.down(0)
			second = 0
		}
	}
	return nil
}
