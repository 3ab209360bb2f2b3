package lsm

// The names tree: strings stored under the 64-bit field values the index
// writes in their place when the value is derived from the string's hash
// (package link: a record key that is not a TID, a DID of a method other
// than did:plc; and the text of a hashed target that a forward entry
// holds, under its hash's high half: link.Codec.NameTarget). Such strings can number
// in the millions, so they live in the bucket, in a tree of this engine
// (same tables, runs and compaction as the PLC map), not in every node's
// Raft state as outlines do. A name is never deleted: the value a string
// was given stays its value.
//
//	names (64 B, prefix 16):
//	0   1   kind (link.NameRKey, link.NameDID, link.NameTarget)
//	1   7   zero
//	8   8   value (u64 BE): the field value, tag bits included
//	16  1   chunk: the string's bytes [38*chunk, 38*chunk+len)
//	17  1   len: 1..38; a chunk shorter than 38 bytes is the last
//	18  38  the chunk's bytes, zero-padded
//	56  8   zero (the fold keeps one of records equal in all else)
//
// A string of 38*k bytes ends with an empty chunk k (len 0). One string a
// value: the leader reads a value's entry before it gives the value out
// (link.Codec probes the next value when another string holds it), and a
// value found holding two different strings is a *CorruptError.

import (
	"container/list"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/link"
)

// TreeNames holds the names of hashed field values.
const TreeNames Tree = "names"

// NamesFormat is the names tree's format.
var NamesFormat = Format{Width: 64, PrefixLen: 16}

// NameKind says which field a name's value is of (link.NameRKey,
// link.NameDID, link.NameTarget): the records' first byte.
type NameKind = link.NameKind

const (
	nameChunkBytes = 38
	nameChunkOff   = 18
	// NameBytesMax is the longest name (an at-uri's limit; record keys
	// are at most 512 bytes).
	NameBytesMax = 8192
)

type nameKey struct {
	kind NameKind
	v    uint64
}

func (k nameKey) prefix() [16]byte {
	var p [16]byte
	p[0] = byte(k.kind)
	binary.BigEndian.PutUint64(p[8:], k.v)
	return p
}

// NameRecords appends the records of name s under (kind, v) to dst.
func NameRecords(dst []byte, kind NameKind, v uint64, s string) []byte {
	p := nameKey{kind, v}.prefix()
	for chunk := 0; ; chunk++ {
		part := s[min(len(s), chunk*nameChunkBytes):min(len(s), (chunk+1)*nameChunkBytes)]
		var r [64]byte
		copy(r[:16], p[:])
		r[16] = byte(chunk)
		r[17] = byte(len(part))
		copy(r[nameChunkOff:], part)
		dst = append(dst, r[:]...)
		if len(part) < nameChunkBytes {
			return dst
		}
	}
}

// nameOf assembles the name from the sorted, distinct records of one
// (kind, value); false if there are none.
func nameOf(recs [][]byte) (string, bool, error) {
	if len(recs) == 0 {
		return "", false, nil
	}
	var b []byte
	for i, r := range recs {
		if int(r[16]) != i || int(r[17]) > nameChunkBytes {
			return "", false, nameCorrupt("value %#x: chunk %d where %d was expected (two strings, or one missing a part)", binary.BigEndian.Uint64(r[8:16]), r[16], i)
		}
		b = append(b, r[nameChunkOff:nameChunkOff+int(r[17])]...)
		if int(r[17]) < nameChunkBytes {
			if i != len(recs)-1 {
				return "", false, nameCorrupt("value %#x: %d chunks after the last", binary.BigEndian.Uint64(r[8:16]), len(recs)-1-i)
			}
			return string(b), true, nil
		}
	}
	return "", false, nameCorrupt("value %#x: last chunk missing", binary.BigEndian.Uint64(recs[0][8:16]))
}

// nameCorrupt is the error of a value whose records do not make one
// name.
func nameCorrupt(format string, args ...any) error {
	return &CorruptError{Tree: TreeNames, Table: "(a lookup's records)", Err: fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)}
}

// NameBatch is a set of names not yet visible in the view a NameMap
// reads: the leader's codec adds them, its next flush writes them as a
// run in the same Raft entry as the links that use them.
type NameBatch struct {
	names map[nameKey]string
}

// Len is the number of names.
func (b *NameBatch) Len() int { return len(b.names) }

// Records returns the batch as sorted records of the names tree.
func (b *NameBatch) Records() []byte {
	out := make([]byte, 0, 64*len(b.names))
	for k, s := range b.names {
		out = NameRecords(out, k.kind, k.v, s)
	}
	SortRecords(out, 64)
	return out
}

// DefaultNameCacheBytes bounds a NameMap's cache of resolved names.
const DefaultNameCacheBytes = 16 << 20

// nameEntryOverhead approximates a cached name's memory besides its bytes.
const nameEntryOverhead = 96

// NameMap reads the names tree of a view (the node's newest, through
// view) with a bounded LRU cache of names found, plus, on the leader, the
// names its codec added that the view does not show yet. It implements
// link.Names. Safe for concurrent use.
type NameMap struct {
	reader *Reader
	view   func(context.Context) (*View, error)
	max    int
	// pendingBytes approximates the open batch's memory: read without the
	// lock by the writer's memtable check, on every record.
	pendingBytes atomic.Int64

	mu struct {
		sync.Mutex
		open   *NameBatch
		sealed sealed[NameBatch] // taken by a flush, until the view shows them
		lru    *list.List        // of nameEntry, most recent first
		byKey  map[nameKey]*list.Element
		bytes  int
	}
}

type nameEntry struct {
	k nameKey
	s string
}

// NewNameMap returns a map over the views view returns (each call the
// newest), reading tables through r, caching up to cacheBytes of names
// (DefaultNameCacheBytes when <= 0).
func NewNameMap(r *Reader, view func(context.Context) (*View, error), cacheBytes int) *NameMap {
	if cacheBytes <= 0 {
		cacheBytes = DefaultNameCacheBytes
	}
	m := &NameMap{reader: r, view: view, max: cacheBytes}
	m.mu.open = &NameBatch{names: map[nameKey]string{}}
	m.mu.lru = list.New()
	m.mu.byKey = map[nameKey]*list.Element{}
	return m
}

// Lookup returns the name stored under (kind, v): the cache, the names
// not yet published, then the view's tables. False if v holds none.
func (m *NameMap) Lookup(ctx context.Context, kind NameKind, v uint64) (string, bool, error) {
	k := nameKey{kind, v}
	for attempt := 0; ; attempt++ {
		if s, ok := m.known(k); ok {
			return s, true, nil
		}
		view, err := m.view(ctx)
		if err != nil {
			return "", false, err
		}
		p := k.prefix()
		recs, err := m.reader.lookupAll(ctx, view, TreeNames, p[:])
		if err != nil {
			return "", false, err
		}
		s, ok, err := nameOf(recs)
		if err != nil {
			return "", false, err
		}
		m.mu.Lock()
		if !ok && m.mu.sealed.stale(view.Generation()) && attempt < 8 {
			// A batch was dropped from the pending names (its view
			// holds it) after the check above, by a lookup with a newer
			// view than this one read: ask again, with the newest view.
			m.mu.Unlock()
			continue
		}
		m.pruneLocked(view.Generation())
		if ok {
			m.cachePutLocked(k, s)
		}
		m.mu.Unlock()
		return s, ok, nil
	}
}

// known answers a lookup from memory: a name, once given, never changes,
// so the cache and the pending names answer without a view.
func (m *NameMap) known(k nameKey) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.mu.byKey[k]; ok {
		m.mu.lru.MoveToFront(el)
		return el.Value.(nameEntry).s, true
	}
	return m.pendingLocked(k)
}

// Add gives v to s unless a name not yet published holds v already;
// returns the name v holds then. The caller found v free in the view.
func (m *NameMap) Add(kind NameKind, v uint64, s string) string {
	if s == "" || len(s) > NameBytesMax {
		panic(fmt.Sprintf("lsm: a name of %d bytes (link.Codec gives 1 to %d)", len(s), NameBytesMax))
	}
	k := nameKey{kind, v}
	m.mu.Lock()
	defer m.mu.Unlock()
	if held, ok := m.pendingLocked(k); ok {
		return held
	}
	m.mu.open.names[k] = s
	m.pendingBytes.Add(int64(len(s) + nameEntryOverhead))
	return s
}

// PendingBytes approximates the memory of the names not yet taken by a
// flush.
func (m *NameMap) PendingBytes() int { return int(m.pendingBytes.Load()) }

// Seal takes the pending names for a flush (nil if there are none); they
// stay visible to Name until Published's generation is in the view.
func (m *NameMap) Seal() *NameBatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.open.Len() == 0 {
		return nil
	}
	b := m.mu.open
	m.mu.open = &NameBatch{names: map[nameKey]string{}}
	m.pendingBytes.Store(0)
	m.mu.sealed.add(b)
	return b
}

// Published says that generation gen holds b's tables.
func (m *NameMap) Published(b *NameBatch, gen uint64) {
	m.mu.Lock()
	m.mu.sealed.publish(b, gen)
	m.mu.Unlock()
}

func (m *NameMap) pruneLocked(gen uint64) {
	m.mu.sealed.prune(gen)
}

func (m *NameMap) pendingLocked(k nameKey) (string, bool) {
	if s, ok := m.mu.open.names[k]; ok {
		return s, true
	}
	return find(&m.mu.sealed, func(b *NameBatch) (string, bool) { s, ok := b.names[k]; return s, ok })
}

func (m *NameMap) cachePutLocked(k nameKey, s string) {
	if el, ok := m.mu.byKey[k]; ok {
		m.mu.lru.MoveToFront(el)
		return
	}
	m.mu.byKey[k] = m.mu.lru.PushFront(nameEntry{k: k, s: s})
	m.mu.bytes += len(s) + nameEntryOverhead
	for m.mu.bytes > m.max && m.mu.lru.Len() > 1 {
		last := m.mu.lru.Back()
		e := last.Value.(nameEntry)
		m.mu.lru.Remove(last)
		delete(m.mu.byKey, e.k)
		m.mu.bytes -= len(e.s) + nameEntryOverhead
	}
}

// NameLookupTimeout bounds one lookup made through the context-free
// link.Names methods.
const NameLookupTimeout = 30 * time.Second

// Name implements link.Names: Lookup bounded by NameLookupTimeout.
func (m *NameMap) Name(kind NameKind, v uint64) (string, bool, error) {
	if s, ok := m.known(nameKey{kind, v}); ok {
		return s, true, nil // no timer for what memory answers
	}
	ctx, cancel := context.WithTimeout(context.Background(), NameLookupTimeout)
	defer cancel()
	return m.Lookup(ctx, kind, v)
}

// AddName implements link.Names.
func (m *NameMap) AddName(kind NameKind, v uint64, s string) string { return m.Add(kind, v, s) }

var _ link.Names = (*NameMap)(nil)
