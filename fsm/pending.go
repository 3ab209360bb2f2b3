package fsm

import (
	"fmt"
	"sync"

	"github.com/eddy-backlinks/eddy/link"
)

// Pending is the leader's overlay of outlines it has assigned but not yet
// committed: it reads through to the State, and hands out the next counters
// itself. The flush that first writes tables using them carries them (Take);
// once that flush is applied, Committed forgets them. A leader creates a
// new Pending when it takes office (its counters start after the State's).
type Pending struct {
	s  *State
	mu sync.Mutex
	// per kind: next counter, and assigned-but-uncommitted strings by ID order
	next  [5]uint64
	added [5][]Outline
	ids   [5]map[string]uint64
	bytes int // of the strings in added
}

var _ link.Outlines = (*Pending)(nil)

// NewPending starts an overlay over s.
func NewPending(s *State) *Pending {
	p := &Pending{s: s}
	for _, k := range link.OutlineKinds {
		p.next[k] = uint64(s.OutlineLen(k)) + 1
		p.ids[k] = map[string]uint64{}
	}
	return p
}

func (p *Pending) Lookup(kind link.OutlineKind, str string) (uint64, bool) {
	if id, ok := p.s.Lookup(kind, str); ok {
		return id, true
	}
	if kind == link.OutlineUnknown || int(kind) >= len(p.ids) {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.ids[kind][str]
	return id, ok
}

func (p *Pending) Name(kind link.OutlineKind, id uint64) (string, bool) {
	if s, ok := p.s.Name(kind, id); ok {
		return s, true
	}
	if kind == link.OutlineUnknown || int(kind) >= len(p.ids) {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.added[kind] {
		if o.ID == id {
			return o.S, true
		}
	}
	return "", false
}

func (p *Pending) Assign(kind link.OutlineKind, str string) (uint64, error) {
	if kind == link.OutlineUnknown || int(kind) >= len(p.ids) {
		return 0, fmt.Errorf("assign outline: unknown kind %d", kind)
	}
	if len(str) == 0 || len(str) > link.OutlineBytesMax {
		return 0, fmt.Errorf("assign %s outline: length %d out of range", kind, len(str))
	}
	if id, ok := p.s.Lookup(kind, str); ok {
		return id, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.ids[kind][str]; ok {
		return id, nil
	}
	id := p.next[kind]
	p.next[kind]++
	p.ids[kind][str] = id
	p.added[kind] = append(p.added[kind], Outline{Kind: kind, ID: id, S: str})
	p.bytes += len(str)
	return id, nil
}

// Len is the number of outlines of kind, committed and pending
// (link.OutlineCounter: the bound of link.Codec.PathOutlinesMax).
func (p *Pending) Len(kind link.OutlineKind) int {
	if kind == link.OutlineUnknown || int(kind) >= len(p.ids) {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.next[kind] - 1)
}

// Bytes is the length of the uncommitted outlines' strings together: what
// the next flush entry carries of them (a writer flushes before it grows
// past a bound, as it does for its memtables).
func (p *Pending) Bytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// Take returns every uncommitted outline, in counter order per kind, for
// the next flush entry. They stay readable until Committed.
func (p *Pending) Take() []Outline {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Outline
	for _, k := range link.OutlineKinds {
		out = append(out, p.added[k]...)
	}
	return out
}

// Committed forgets the outlines that the State now has.
func (p *Pending) Committed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range link.OutlineKinds {
		n := uint64(p.s.OutlineLen(k))
		keep := p.added[k][:0]
		for _, o := range p.added[k] {
			if o.ID > n {
				keep = append(keep, o)
			} else {
				delete(p.ids[k], o.S)
				p.bytes -= len(o.S)
			}
		}
		p.added[k] = keep
	}
}
