package fsm

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Raft log entry encoding. Every entry is
//
//	offset size field
//	0      1    version  (EntryVersion; an entry of a newer version panics Apply: upgrade this node)
//	1      1    type     (Type; Unknown = 0 is never written)
//	2      1    flags    (FlagSkippable: an older binary that does not know the type may skip it)
//	3      n    payload  (JSON of the type's struct)
//
// Only this file encodes and decodes entries. Entries stay small (a flush
// names its tables, it never carries their data): EntryBytesMax.
//
// Versions: 1, every entry but those below; 2, a flush whose edit adds a
// run of the names tree (lsm.TreeNames), which a version-1 build would
// refuse as a bad edit while the others apply it (its manifest would part
// from theirs for good): such a build stops at the entry instead, and
// applies it once upgraded.
const (
	EntryVersion  = 2 // the newest this build decodes
	EntryBytesMax = 4 << 20
	headerBytes   = 3
)

// entryVersion is the version an entry of type t with payload v is
// written in: the oldest that can decode it.
func entryVersion(t Type, v any) byte {
	var f *Flush
	switch x := v.(type) {
	case Flush:
		f = &x
	case *Flush:
		f = x
	}
	if t == TypeFlush && f != nil {
		for _, r := range f.Edit.Add {
			if r.Tree == lsm.TreeNames {
				return 2
			}
		}
	}
	return 1
}

// Type is an entry's type.
type Type uint8

const (
	TypeUnknown Type = iota
	// TypeReserveClock reserves a block of ingestion stamps for the leader.
	TypeReserveClock
	// TypeFlush publishes a flush or a compaction: a manifest edit
	// (compare-and-set on the generation), the outlines its tables use,
	// source cursors and the clock; applied atomically.
	TypeFlush
	// TypeNodeInfo records a node's public and admin addresses.
	TypeNodeInfo
	// TypeSetting sets a cluster setting.
	TypeSetting
	// TypeNoop does nothing; written by tests of skippable types.
	TypeNoop
	// TypeCollect removes deleted tables from the garbage list (Collect);
	// proposed FlagSkippable, since an older build keeps no such list.
	TypeCollect
	typeEnd
)

func (t Type) String() string {
	switch t {
	case TypeReserveClock:
		return "reserve-clock"
	case TypeFlush:
		return "flush"
	case TypeNodeInfo:
		return "node-info"
	case TypeSetting:
		return "setting"
	case TypeNoop:
		return "noop"
	case TypeCollect:
		return "collect"
	}
	if name, _, ok := nextType(t); ok {
		return name
	}
	return fmt.Sprintf("type-%d", uint8(t))
}

// Flags of an entry.
const (
	// FlagSkippable: an older binary that does not know this type may
	// apply the entry as a no-op (it changes nothing an older binary reads).
	FlagSkippable uint8 = 1 << 0
)

// ReserveClock reserves stamps (Through-Count, Through]: Apply checks that
// the previous reservation ended at After (a deposed leader's reservation
// fails and changes nothing).
type ReserveClock struct {
	After uint64 `json:"after"`
	Count uint64 `json:"count"`
}

// Outline is one new intern assignment.
type Outline struct {
	Kind link.OutlineKind `json:"k"`
	ID   uint64           `json:"id"`
	S    string           `json:"s"`
}

// OutlineEntryBytes is o's bytes in a flush entry's payload (its JSON and
// a comma): what a writer that splits a flush's outlines over several
// entries counts against EntryBytesMax.
func OutlineEntryBytes(o *Outline) int {
	b, _ := json.Marshal(o) // an Outline always encodes
	return len(b) + 1
}

// Flush is one atomic publication.
type Flush struct {
	Edit     lsm.Edit          `json:"edit"`
	Outlines []Outline         `json:"outlines,omitempty"`
	Cursors  map[string]string `json:"cursors,omitempty"` // ingest source -> cursor; "" deletes the entry
	// Clock is the highest stamp the flushed data uses; Apply raises the
	// committed clock to it (never lowers).
	Clock uint64 `json:"clock,omitempty"`
	// Time is the leader's clock when it proposed the entry (unix
	// nanoseconds), recorded as the removed tables' Garbage.Since. Apply
	// never reads a clock of its own.
	Time int64 `json:"time,omitempty"`
}

// NodeInfo records a node's addresses, or that it was removed: a removed
// node ID is refused (its Raft connections and a re-join); a replacement
// joins under a new ID.
type NodeInfo struct {
	ID      string `json:"id"`
	HTTP    string `json:"http"`
	Admin   string `json:"admin"`
	Raft    string `json:"raft"`
	Removed bool   `json:"removed,omitempty"`
}

// Setting sets a cluster setting (empty Value deletes it).
type Setting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Errors of entry decoding. An entry that does not decode is a bug or
// corruption: Apply panics on it rather than diverge.
var (
	ErrEntryTooBig  = errors.New("fsm: entry too big")
	ErrEntryVersion = errors.New("fsm: entry from a newer version")
	ErrEntryType    = errors.New("fsm: unknown entry type")
)

// Encode encodes an entry of type t with payload v.
func Encode(t Type, flags uint8, v any) ([]byte, error) {
	if t == TypeUnknown {
		return nil, fmt.Errorf("encode: %w", ErrEntryType)
	}
	p, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", t, err)
	}
	b := make([]byte, 0, headerBytes+len(p))
	b = append(b, entryVersion(t, v), byte(t), flags)
	b = append(b, p...)
	if len(b) > EntryBytesMax {
		return nil, fmt.Errorf("encode %s: %d bytes: %w", t, len(b), ErrEntryTooBig)
	}
	return b, nil
}

// Decoded is a decoded entry: Payload is a *ReserveClock, *Flush,
// *NodeInfo, *Setting, *Collect, a type only a -tags eddy_next build knows (next.go),
// or nil for a skipped or no-op entry.
type Decoded struct {
	Type    Type
	Flags   uint8
	Payload any
	Skipped bool // an unknown skippable type
}

// Decode decodes an entry.
func Decode(b []byte) (Decoded, error) {
	if len(b) < headerBytes {
		return Decoded{}, fmt.Errorf("entry of %d bytes: %w", len(b), ErrEntryType)
	}
	if len(b) > EntryBytesMax {
		return Decoded{}, ErrEntryTooBig
	}
	if b[0] > EntryVersion || b[0] == 0 {
		return Decoded{}, fmt.Errorf("entry version %d, this build knows %d: %w", b[0], EntryVersion, ErrEntryVersion)
	}
	d := Decoded{Type: Type(b[1]), Flags: b[2]}
	var p any
	switch d.Type {
	case TypeReserveClock:
		p = &ReserveClock{}
	case TypeFlush:
		p = &Flush{}
	case TypeNodeInfo:
		p = &NodeInfo{}
	case TypeSetting:
		p = &Setting{}
	case TypeCollect:
		p = &Collect{}
	case TypeNoop:
		return d, nil
	default:
		if _, np, ok := nextType(d.Type); ok {
			p = np
			break
		}
		if d.Flags&FlagSkippable != 0 {
			d.Skipped = true
			return d, nil
		}
		return Decoded{}, fmt.Errorf("entry type %d: %w", b[1], ErrEntryType)
	}
	if err := json.Unmarshal(b[headerBytes:], p); err != nil {
		return Decoded{}, fmt.Errorf("decode %s: %w", d.Type, err)
	}
	d.Payload = p
	return d, nil
}

// LeaderEntry is an entry a build proposes each time one of its nodes
// becomes leader.
type LeaderEntry struct {
	Type  Type
	Flags uint8
	Data  []byte // encoded
}

// LeaderEntries returns the entries a new leader of this build proposes,
// after recording its own addresses. A default build has none; a build with
// -tags eddy_next proposes one entry of a type older builds do not know,
// flagged FlagSkippable (next.go): the rehearsal of a Raft format change
// that the rolling-upgrade test (e2e/roll_test.go) runs.
func LeaderEntries(node, version string) ([]LeaderEntry, error) {
	return leaderEntries(node, version)
}
