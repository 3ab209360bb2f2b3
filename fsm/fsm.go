// Package fsm is the state the nodes of an Eddy cluster agree on through
// Raft: the ingestion clock, the outline (intern) tables, each ingest
// source's cursor, the manifest of live tables, node addresses and cluster
// settings. Bulk data never goes through it: a flush names its tables.
//
// Apply is a pure function of the state and the entry: every node that
// applies the same log has the same state. An entry that does not decode
// panics Apply (a replica must never silently diverge); an entry that is
// well-formed but stale (a deposed leader's flush, a clock reservation on
// an old clock) is rejected as a whole and changes nothing: its error is
// the Apply response the proposer sees.
package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/raft"
)

// SnapshotVersion is the encoding version of snapshots.
//
//	1: JSON of snapshotJSON without garbage
//	2: JSON of snapshotJSON: version 1 plus the garbage list (a version 1
//	   snapshot restores with an empty one; its tables are left to the
//	   leader's orphan sweep)
//	3: version 2 whose manifest has a run of the names tree
//	   (lsm.TreeNames): a build that reads up to 2 cannot render named
//	   values and would outline strings already named, so it refuses the
//	   snapshot, as it stops at the Raft entry that added the run
//	   (EntryVersion). Written only then; otherwise 2.
const SnapshotVersion = 3

// snapshotVersion is the version a snapshot of manifest m is written in.
func snapshotVersion(m *lsm.Manifest) int {
	if len(m.RunsOf(lsm.TreeNames)) > 0 {
		return 3
	}
	return 2
}

// ErrStale: an entry built on state that has since changed (a deposed
// leader's reservation or flush). Nothing was applied.
var ErrStale = errors.New("fsm: stale entry")

// outlineTable is one kind's intern table: append-only, so a snapshot can
// read a prefix without holding the lock.
type outlineTable struct {
	names []string
	ids   map[string]uint64
}

// State is the replicated state machine. It implements raft.FSM and, for
// reads, link.Outlines (Assign is refused: new outlines only enter through
// a committed flush; see Pending).
type State struct {
	mu struct {
		sync.RWMutex
		clock     uint64 // stamps reserved through this value
		published uint64 // highest stamp used by published data
		outlines  [5]outlineTable
		cursors   map[string]string
		manifest  *lsm.Manifest
		nodes     map[string]NodeInfo
		settings  map[string]string
		index     uint64    // last applied log index
		skipped   uint64    // skippable entries of unknown types
		garbage   []Garbage // tables that left the manifest, not yet deleted (garbage.go)
	}
	watchMu  sync.Mutex
	watchers []chan struct{}
}

var (
	_ raft.FSM      = (*State)(nil)
	_ link.Outlines = (*State)(nil)
)

// New returns an empty state.
func New() *State {
	s := &State{}
	s.reset()
	return s
}

func (s *State) reset() {
	for k := range s.mu.outlines {
		s.mu.outlines[k] = outlineTable{ids: map[string]uint64{}}
	}
	s.mu.cursors = map[string]string{}
	s.mu.manifest = &lsm.Manifest{}
	s.mu.nodes = map[string]NodeInfo{}
	s.mu.settings = map[string]string{}
	s.mu.garbage = nil
	s.mu.clock, s.mu.published, s.mu.index, s.mu.skipped = 0, 0, 0, 0
}

// FlushResult is the Apply response of a flush.
type FlushResult struct {
	Generation uint64
	Garbage    []lsm.TableRef
}

// Apply applies one committed log entry.
func (s *State) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	d, err := Decode(l.Data)
	if err != nil {
		// Never diverge: a node that cannot read the log must stop.
		panic(fmt.Sprintf("fsm: cannot apply Raft log entry %d (%v): this binary is older than the cluster's log or the entry is corrupt; stop and upgrade this node to the cluster's version", l.Index, err))
	}
	s.mu.Lock()
	res := s.applyLocked(d)
	s.mu.index = l.Index
	s.mu.Unlock()
	if d.Type == TypeFlush {
		s.notify()
	}
	return res
}

func (s *State) applyLocked(d Decoded) any {
	if d.Skipped {
		s.mu.skipped++
		return nil
	}
	switch p := d.Payload.(type) {
	case *ReserveClock:
		if p.After != s.mu.clock {
			return fmt.Errorf("reserve after %d, clock at %d: %w", p.After, s.mu.clock, ErrStale)
		}
		if p.Count == 0 || p.Count > 1<<40 {
			return fmt.Errorf("reserve %d stamps: out of range", p.Count)
		}
		s.mu.clock += p.Count
		return s.mu.clock
	case *Flush:
		return s.applyFlushLocked(p)
	case *NodeInfo:
		if p.ID == "" {
			return errors.New("node info without an ID")
		}
		s.mu.nodes[p.ID] = *p
		return nil
	case *Setting:
		if p.Value == "" {
			delete(s.mu.settings, p.Key)
		} else {
			s.mu.settings[p.Key] = p.Value
		}
		return nil
	case *Collect:
		return s.applyCollectLocked(p)
	}
	return nil // TypeNoop
}

func (s *State) applyFlushLocked(f *Flush) any {
	// Validate everything before changing anything: a flush applies whole
	// or not at all.
	next, garbage, err := s.mu.manifest.Apply(f.Edit)
	if err != nil {
		return fmt.Errorf("flush: %w: %w", err, ErrStale)
	}
	if f.Clock > s.mu.clock {
		return fmt.Errorf("flush uses stamp %d beyond the reserved clock %d: %w", f.Clock, s.mu.clock, ErrStale)
	}
	want := map[link.OutlineKind]uint64{}
	for _, o := range f.Outlines {
		if o.Kind == link.OutlineUnknown || int(o.Kind) >= len(s.mu.outlines) || o.S == "" || len(o.S) > link.OutlineBytesMax {
			return fmt.Errorf("flush: bad outline %+v", o)
		}
		t := &s.mu.outlines[o.Kind]
		if want[o.Kind] == 0 {
			want[o.Kind] = uint64(len(t.names)) + 1
		}
		if o.ID != want[o.Kind] {
			return fmt.Errorf("flush: outline %s %q as %d, next is %d: %w", o.Kind, o.S, o.ID, want[o.Kind], ErrStale)
		}
		if _, dup := t.ids[o.S]; dup {
			return fmt.Errorf("flush: outline %s %q assigned twice: %w", o.Kind, o.S, ErrStale)
		}
		want[o.Kind]++
	}
	seen := map[link.OutlineKind]map[string]bool{}
	for _, o := range f.Outlines {
		if seen[o.Kind] == nil {
			seen[o.Kind] = map[string]bool{}
		}
		if seen[o.Kind][o.S] {
			return fmt.Errorf("flush: outline %s %q twice in one flush", o.Kind, o.S)
		}
		seen[o.Kind][o.S] = true
	}
	for _, o := range f.Outlines {
		t := &s.mu.outlines[o.Kind]
		t.names = append(t.names, o.S)
		t.ids[o.S] = o.ID
	}
	s.mu.garbage = append(s.mu.garbage, removedTables(s.mu.manifest, f.Edit, next.Generation, f.Time)...)
	s.mu.manifest = next
	for k, v := range f.Cursors {
		if v == "" {
			delete(s.mu.cursors, k) // a finished entry (e.g. a pending resync)
			continue
		}
		s.mu.cursors[k] = v
	}
	s.mu.published = max(s.mu.published, f.Clock)
	return FlushResult{Generation: next.Generation, Garbage: garbage}
}

// Watch returns a channel that receives (without blocking the FSM) after
// every applied flush: followers use it to open new manifests.
func (s *State) Watch() <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.watchMu.Lock()
	s.watchers = append(s.watchers, ch)
	s.watchMu.Unlock()
	return ch
}

func (s *State) notify() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for _, ch := range s.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Lookup implements link.Outlines.
func (s *State) Lookup(kind link.OutlineKind, str string) (uint64, bool) {
	if kind == link.OutlineUnknown || int(kind) >= len(s.mu.outlines) {
		return 0, false
	}
	s.mu.RLock()
	id, ok := s.mu.outlines[kind].ids[str]
	s.mu.RUnlock()
	return id, ok
}

// Name implements link.Outlines.
func (s *State) Name(kind link.OutlineKind, id uint64) (string, bool) {
	if kind == link.OutlineUnknown || int(kind) >= len(s.mu.outlines) || id == 0 {
		return "", false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := s.mu.outlines[kind].names
	if id > uint64(len(names)) {
		return "", false
	}
	return names[id-1], true
}

// Assign implements link.Outlines: it always fails, because outlines are
// only assigned by a committed flush. Writers use a Pending overlay.
func (s *State) Assign(kind link.OutlineKind, str string) (uint64, error) {
	return 0, errors.New("fsm: outlines are assigned through a flush (use Pending)")
}

// OutlineLen is the number of outlines of a kind.
func (s *State) OutlineLen(kind link.OutlineKind) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.mu.outlines[kind].names)
}

// Summary is a copy of the small parts of the state.
type Summary struct {
	Clock      uint64            `json:"clock"`
	Published  uint64            `json:"published_clock"`
	Generation uint64            `json:"generation"`
	Cursors    map[string]string `json:"cursors"`
	Nodes      map[string]NodeInfo
	Settings   map[string]string `json:"settings"`
	Index      uint64            `json:"applied_index"`
	Outlines   map[string]int    `json:"outlines"`
	Skipped    uint64            `json:"skipped_entries"`
}

// Summary returns the small parts of the state.
func (s *State) Summary() Summary {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := Summary{
		Clock: s.mu.clock, Published: s.mu.published, Generation: s.mu.manifest.Generation,
		Cursors: maps.Clone(s.mu.cursors), Nodes: maps.Clone(s.mu.nodes), Settings: maps.Clone(s.mu.settings),
		Index: s.mu.index, Outlines: map[string]int{}, Skipped: s.mu.skipped,
	}
	for _, k := range link.OutlineKinds {
		out.Outlines[k.String()] = len(s.mu.outlines[k].names)
	}
	return out
}

// Manifest returns the current manifest (immutable).
func (s *State) Manifest() *lsm.Manifest {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.manifest
}

// AppliedIndex is the index of the last log entry this state applied
// (commands only; 0 before any since start or restore). Raft's own
// AppliedIndex moves when an entry is handed to the state machine, before
// it is applied.
func (s *State) AppliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.index
}

// Clock returns the reserved clock.
func (s *State) Clock() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.clock
}

// Cursor returns an ingest source's committed cursor.
func (s *State) Cursor(source string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.cursors[source]
}

// Setting returns a cluster setting.
func (s *State) Setting(key string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.settings[key]
}

// SettingsWithPrefix returns the cluster settings whose keys start with
// prefix (a new map; nil if none).
func (s *State) SettingsWithPrefix(prefix string) map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out map[string]string
	for k, v := range s.mu.settings {
		if strings.HasPrefix(k, prefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// CursorsWithPrefix returns the cursors whose names start with prefix (a
// new map; nil if none).
func (s *State) CursorsWithPrefix(prefix string) map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out map[string]string
	for k, v := range s.mu.cursors {
		if strings.HasPrefix(k, prefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// Node returns a node's addresses.
func (s *State) Node(id string) (NodeInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.mu.nodes[id]
	return n, ok
}

// snapshotJSON is a snapshot's encoding (SnapshotVersion says which
// fields a version has).
type snapshotJSON struct {
	V         int                 `json:"v"`
	Clock     uint64              `json:"clock"`
	Published uint64              `json:"published"`
	Outlines  map[string][]string `json:"outlines"`
	Cursors   map[string]string   `json:"cursors"`
	Manifest  json.RawMessage     `json:"manifest"`
	Nodes     map[string]NodeInfo `json:"nodes"`
	Settings  map[string]string   `json:"settings"`
	Skipped   uint64              `json:"skipped"`
	Garbage   []Garbage           `json:"garbage,omitempty"` // version 2
	// Index is the last log index the state applied (0 in a state backup,
	// which a new cluster installs as its first snapshot, and in earlier
	// builds' snapshots): a node restarted from a snapshot, or sent one,
	// knows it has applied that far (readiness compares it with the log's
	// last command) before the next entry comes.
	Index uint64 `json:"index,omitempty"`
}

type snapshot struct{ v snapshotJSON }

// Snapshot captures the state. It holds the lock only to copy the small
// maps, the garbage list and the lengths of the append-only outline tables; encoding runs in
// Persist, concurrently with Apply.
func (s *State) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{v: s.capture()}, nil
}

// capture copies what a snapshot holds.
func (s *State) capture() snapshotJSON {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := snapshotJSON{
		V: snapshotVersion(s.mu.manifest), Clock: s.mu.clock, Published: s.mu.published, Outlines: map[string][]string{},
		Cursors: maps.Clone(s.mu.cursors), Manifest: s.mu.manifest.Encode(), Nodes: maps.Clone(s.mu.nodes),
		Settings: maps.Clone(s.mu.settings), Skipped: s.mu.skipped, Garbage: slices.Clone(s.mu.garbage), Index: s.mu.index,
	}
	for _, k := range link.OutlineKinds {
		names := s.mu.outlines[k].names
		v.Outlines[k.String()] = names[:len(names):len(names)] // a prefix that appends never change
	}
	return v
}

func (sn *snapshot) Persist(sink raft.SnapshotSink) error {
	enc := json.NewEncoder(sink)
	if err := enc.Encode(&sn.v); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (sn *snapshot) Release() {}

// Restore replaces the state with a snapshot.
func (s *State) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var v snapshotJSON
	if err := json.NewDecoder(rc).Decode(&v); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if v.V < 1 || v.V > SnapshotVersion {
		return fmt.Errorf("snapshot version %d, this build reads up to %d", v.V, SnapshotVersion)
	}
	m, err := lsm.DecodeManifest(v.Manifest)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	s.mu.Lock()
	s.reset()
	s.mu.clock, s.mu.published, s.mu.skipped, s.mu.index = v.Clock, v.Published, v.Skipped, v.Index
	s.mu.manifest = m
	if v.V >= 2 {
		s.mu.garbage = v.Garbage
	}
	maps.Copy(s.mu.cursors, v.Cursors)
	maps.Copy(s.mu.nodes, v.Nodes)
	maps.Copy(s.mu.settings, v.Settings)
	for _, k := range link.OutlineKinds {
		t := &s.mu.outlines[k]
		for i, name := range v.Outlines[k.String()] {
			t.names = append(t.names, name)
			t.ids[name] = uint64(i + 1)
		}
	}
	s.mu.Unlock()
	s.notify()
	return nil
}
