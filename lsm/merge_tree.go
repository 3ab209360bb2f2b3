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

// cursor is a sequence's place in a merge: its current block and the
// record at.
type cursor struct {
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
			return nil
		}
	}
}

// headKey is the head record's first word (recordKey), all ones once the
// cursor is done.
func (c *cursor) headKey(w int) uint64 {
	if c.done {
		return ^uint64(0)
	}
	return recordKey(c.recs[c.at:], w)
}

// recordKey is the first eight bytes of the record at rec (zero-padded if
// records are narrower), big-endian: records in bytewise order have keys
// in order.
func recordKey(rec []byte, w int) uint64 {
	if w >= 8 {
		return binary.BigEndian.Uint64(rec)
	}
	var b [8]byte
	copy(b[:], rec[:w])
	return binary.BigEndian.Uint64(b[:])
}

// loserTree merges cursors: a tournament whose inner nodes hold the loser
// of the match played there and whose node 0 holds the overall winner.
// After the winner moves on, one match a level is replayed on its path
// to the root: log2(k) comparisons a record. keys holds each cursor's
// head word (all ones once it is done), so that most matches are decided
// by one comparison of two words side by side.
type loserTree struct {
	cs   []*cursor
	keys []uint64
	tree []int32
	w    int
}

// less reports whether cursor a's record comes before cursor b's (a done
// cursor comes after every other).
func (t *loserTree) less(a, b int32) bool {
	if ka, kb := t.keys[a], t.keys[b]; ka != kb {
		return ka < kb
	}
	return t.lessTied(a, b)
}

// lessTied is less for cursors whose head words are equal.
func (t *loserTree) lessTied(a, b int32) bool {
	ca, cb := t.cs[a], t.cs[b]
	if ca.done || cb.done {
		return !ca.done
	}
	w := t.w
	return compareRecords(ca.recs[ca.at:ca.at+w], cb.recs[cb.at:cb.at+w]) < 0
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
	k := len(cs)
	t := loserTree{cs: cs, keys: make([]uint64, k), tree: make([]int32, max(k, 1)), w: w}
	for i, c := range cs {
		if err := c.fill(w); err != nil {
			return nil, err
		}
		t.keys[i] = c.headKey(w)
	}
	if k > 0 {
		// Play the tournament bottom up: leaves are k..2k-1, node n's
		// children 2n and 2n+1; win holds each node's winner.
		win := make([]int32, 2*k)
		for i := range k {
			win[k+i] = int32(i)
		}
		for n := k - 1; n >= 1; n-- {
			a, b := win[2*n], win[2*n+1]
			if t.less(b, a) {
				a, b = b, a
			}
			win[n], t.tree[n] = a, b
		}
		if k > 1 {
			t.tree[0] = win[1]
		}
		for {
			wi := t.tree[0]
			c := cs[wi]
			if c.done {
				break
			}
			dst = append(dst, c.recs[c.at:c.at+w]...)
			if c.at += w; c.at < len(c.recs) {
				t.keys[wi] = recordKey(c.recs[c.at:], w)
			} else {
				if err := c.fill(w); err != nil {
					return nil, err
				}
				t.keys[wi] = c.headKey(w)
			}
			for n := (k + int(wi)) / 2; n >= 1; n /= 2 {
				l := t.tree[n]
				if kl, kw := t.keys[l], t.keys[wi]; kl < kw || kl == kw && t.lessTied(l, wi) {
					t.tree[n], wi = wi, l
				}
			}
			t.tree[0] = wi
		}
	}
	if len(dst)-start != size {
		return nil, fmt.Errorf("merge gave %d bytes, want %d: %w", len(dst)-start, size, ErrCorrupt)
	}
	return dst, nil
}
