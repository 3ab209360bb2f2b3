package lsm

import (
	"errors"
	"fmt"

	"github.com/eddy-backlinks/eddy/link"
)

// DefaultMemtableBytes bounds one tree's memtable: 64 MiB is one million
// backlinks, a few seconds of full-network backfill, and sorts in well
// under a second.
const DefaultMemtableBytes = 64 << 20

// memtableStartBytes is a memtable's first buffer; it doubles as needed.
const memtableStartBytes = 1 << 20

// ErrFull: the memtable is at its bound; flush before adding more.
var ErrFull = errors.New("memtable full")

// Memtable buffers the records of one tree in memory until a flush. It is
// an append buffer of fixed-width records, sorted (and folded) only when it
// is flushed. Not safe for concurrent use.
type Memtable struct {
	format   Format
	maxBytes int
	buf      []byte
}

// NewMemtable returns an empty memtable bounded by maxBytes
// (DefaultMemtableBytes when <= 0).
func NewMemtable(f Format, maxBytes int) *Memtable {
	if maxBytes <= 0 {
		maxBytes = DefaultMemtableBytes
	}
	return &Memtable{format: f, maxBytes: maxBytes}
}

// Add appends one encoded record.
func (m *Memtable) Add(rec []byte) error {
	if len(rec) != m.format.Width {
		return fmt.Errorf("record of %d bytes in a %d-byte tree", len(rec), m.format.Width)
	}
	if len(m.buf)+len(rec) > m.maxBytes {
		return ErrFull
	}
	if len(m.buf)+len(rec) > cap(m.buf) {
		// Doubling from memtableStartBytes up to the bound: append's growth
		// (1.25x at this size) copies the buffer again and again (half the
		// write path's time in measurements), and allocating the whole
		// bound at once costs a 64 MiB clear (and its page faults) for a
		// memtable that may hold a few records (revocations).
		nb := make([]byte, len(m.buf), min(max(2*cap(m.buf), memtableStartBytes, len(m.buf)+len(rec)), m.maxBytes))
		copy(nb, m.buf)
		m.buf = nb
	}
	m.buf = append(m.buf, rec...)
	return nil
}

// AddBacklink appends a backlink (the tree must be a backlink tree).
func (m *Memtable) AddBacklink(l *link.Backlink) error {
	var b [link.BacklinkSize]byte
	l.Put(b[:])
	return m.Add(b[:])
}

// AddRevocation appends a revocation (the tree must be a revocation tree).
func (m *Memtable) AddRevocation(v *link.Revocation) error {
	var b [link.RevocationSize]byte
	v.Put(b[:])
	return m.Add(b[:])
}

// Len is the number of records buffered.
func (m *Memtable) Len() int { return len(m.buf) / m.format.Width }

// Bytes is the number of bytes buffered.
func (m *Memtable) Bytes() int { return len(m.buf) }

// Full reports whether the memtable is at or past a fraction of its bound
// at which the owner should flush.
func (m *Memtable) Full() bool { return len(m.buf)+m.format.Width > m.maxBytes }

// Sorted sorts the buffer, folds duplicates (see Fold) and returns the
// records; the memtable must then be Reset before reuse.
func (m *Memtable) Sorted() []byte {
	SortRecords(m.buf, m.format.Width)
	m.buf = Fold(m.format, m.buf)
	return m.buf
}

// Reset empties the memtable, keeping its buffer.
func (m *Memtable) Reset() { m.buf = m.buf[:0] }

// Fold removes duplicates from sorted records in place: records equal in
// all but their last 8 bytes (a link's sourceRev, a revocation's rev) keep
// only the last (newest) one. Returns the shortened slice.
func Fold(f Format, recs []byte) []byte {
	w := f.Width
	n := len(recs) / w
	if n < 2 {
		return recs
	}
	out := 1
	for i := 1; i < n; i++ {
		cur := recs[i*w : (i+1)*w]
		prev := recs[(out-1)*w : out*w]
		if folds(prev, cur, w) {
			copy(prev, cur) // sorted: cur's rev is >= prev's
			continue
		}
		if out != i {
			copy(recs[out*w:(out+1)*w], cur)
		}
		out++
	}
	return recs[:out*w]
}

// folds reports whether record b folds into record a before it (records of
// width w, in order): equal in all but their last 8 bytes, the rev.
func folds(a, b []byte, w int) bool { return string(a[:w-8]) == string(b[:w-8]) }
