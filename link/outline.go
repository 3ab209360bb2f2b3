package link

import (
	"errors"
	"fmt"
	"sync"
)

// OutlineKind names one intern table.
type OutlineKind uint8

const (
	OutlineUnknown    OutlineKind = iota
	OutlineDID                    // DIDs that are not inline did:plc sequence numbers
	OutlineRKey                   // record keys that are not TIDs
	OutlineCollection             // collection NSIDs
	OutlinePath                   // link paths inside records
	outlineKinds
)

// OutlineKinds lists every kind, in order.
var OutlineKinds = []OutlineKind{OutlineDID, OutlineRKey, OutlineCollection, OutlinePath}

func (k OutlineKind) String() string {
	switch k {
	case OutlineDID:
		return "did"
	case OutlineRKey:
		return "rkey"
	case OutlineCollection:
		return "collection"
	case OutlinePath:
		return "path"
	}
	return "unknown"
}

// Limits of outline strings: a longer string is never interned (the
// extractor and decoders drop it before it gets here).
const (
	OutlineBytesMax = 8192 // an at-uri's limit; DIDs are at most 2 KiB, rkeys 512 B
)

// ErrOutlineMissing is returned when a counter has no string.
var ErrOutlineMissing = errors.New("outline not found")

// Outlines are the intern tables: per kind, a dense map between strings and
// counters starting at 1. Counters are raw; the codec adds tag bits.
//
// Lookup and Name never change the tables. Assign returns the existing
// counter of s, or hands out the next one. In a cluster, the FSM implements
// Outlines and only the leader assigns, committing new outlines through Raft
// with the flush that first uses them.
type Outlines interface {
	Lookup(kind OutlineKind, s string) (uint64, bool)
	Name(kind OutlineKind, id uint64) (string, bool)
	Assign(kind OutlineKind, s string) (uint64, error)
}

// MemOutlines is an in-memory Outlines, safe for concurrent use.
type MemOutlines struct {
	mu    sync.RWMutex
	ids   [outlineKinds]map[string]uint64
	names [outlineKinds][]string // names[k][id-1]
}

var _ Outlines = (*MemOutlines)(nil)

// NewMemOutlines returns empty tables.
func NewMemOutlines() *MemOutlines {
	m := &MemOutlines{}
	for k := range m.ids {
		m.ids[k] = make(map[string]uint64)
	}
	return m
}

func (m *MemOutlines) Lookup(kind OutlineKind, s string) (uint64, bool) {
	if kind == OutlineUnknown || kind >= outlineKinds {
		return 0, false
	}
	m.mu.RLock()
	id, ok := m.ids[kind][s]
	m.mu.RUnlock()
	return id, ok
}

func (m *MemOutlines) Name(kind OutlineKind, id uint64) (string, bool) {
	if kind == OutlineUnknown || kind >= outlineKinds || id == 0 {
		return "", false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if id > uint64(len(m.names[kind])) {
		return "", false
	}
	return m.names[kind][id-1], true
}

func (m *MemOutlines) Assign(kind OutlineKind, s string) (uint64, error) {
	if kind == OutlineUnknown || kind >= outlineKinds {
		return 0, fmt.Errorf("assign outline: unknown kind %d", kind)
	}
	if len(s) == 0 || len(s) > OutlineBytesMax {
		return 0, fmt.Errorf("assign %s outline: length %d out of range", kind, len(s))
	}
	if id, ok := m.Lookup(kind, s); ok {
		return id, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id, ok := m.ids[kind][s]; ok {
		return id, nil
	}
	m.names[kind] = append(m.names[kind], s)
	id := uint64(len(m.names[kind]))
	m.ids[kind][s] = id
	return id, nil
}

// Len returns the number of strings of a kind.
func (m *MemOutlines) Len(kind OutlineKind) int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.names[kind])
}
