package fsm

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/raft"
)

func entry(t *testing.T, typ Type, flags uint8, v any) *raft.Log {
	t.Helper()
	b, err := Encode(typ, flags, v)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Type: raft.LogCommand, Data: b}
}

var index uint64

func apply(t *testing.T, s *State, typ Type, v any) any {
	t.Helper()
	l := entry(t, typ, 0, v)
	index++
	l.Index = index
	return s.Apply(l)
}

func run(id string) lsm.Run {
	return lsm.Run{ID: id, Tree: lsm.TreeLinks, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "t" + id, Records: 1}}}
}

func TestApply(t *testing.T) {
	s := New()
	if got := apply(t, s, TypeReserveClock, ReserveClock{After: 0, Count: 100}); got != uint64(100) {
		t.Fatalf("reserve: %v", got)
	}
	// A reservation on a stale clock (a deposed leader) fails, changes nothing.
	if got := apply(t, s, TypeReserveClock, ReserveClock{After: 0, Count: 100}); !errors.Is(got.(error), ErrStale) || s.Clock() != 100 {
		t.Fatalf("stale reserve: %v, clock %d", got, s.Clock())
	}
	p := NewPending(s)
	a, _ := p.Assign(link.OutlineCollection, "app.bsky.feed.like")
	b, _ := p.Assign(link.OutlineCollection, "app.bsky.feed.post")
	a2, _ := p.Assign(link.OutlineCollection, "app.bsky.feed.like")
	if a != 1 || b != 2 || a2 != 1 {
		t.Fatalf("pending ids %d %d %d", a, b, a2)
	}
	f := Flush{Edit: lsm.Edit{Base: 0, Add: []lsm.Run{run("r1")}}, Outlines: p.Take(), Cursors: map[string]string{"jetstream": "123"}, Clock: 50}
	res := apply(t, s, TypeFlush, f)
	fr, ok := res.(FlushResult)
	if !ok || fr.Generation != 1 {
		t.Fatalf("flush: %v", res)
	}
	p.Committed()
	if id, ok := s.Lookup(link.OutlineCollection, "app.bsky.feed.post"); !ok || id != 2 {
		t.Fatal("outline not committed")
	}
	if s.Cursor("jetstream") != "123" || s.Manifest().Generation != 1 {
		t.Fatal("cursor or manifest not applied")
	}
	// The same flush again (a deposed leader's replay): the generation no
	// longer matches; nothing changes, not even its outlines or cursor.
	before := s.Summary()
	f.Cursors = map[string]string{"jetstream": "999"}
	f.Outlines = []Outline{{Kind: link.OutlineCollection, ID: 3, S: "x.y.z"}}
	if err, _ := apply(t, s, TypeFlush, f).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("stale flush: %v", err)
	}
	after := s.Summary()
	before.Index, after.Index = 0, 0
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("a rejected flush changed state:\n%+v\n%+v", before, after)
	}
	// Outline IDs that do not follow the table are refused.
	bad := Flush{Edit: lsm.Edit{Base: 1, Add: []lsm.Run{run("r2")}}, Outlines: []Outline{{Kind: link.OutlineDID, ID: 5, S: "did:web:a.example"}}}
	if err, _ := apply(t, s, TypeFlush, bad).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("bad outline id: %v", err)
	}
	// A flush beyond the reserved clock is refused.
	beyond := Flush{Edit: lsm.Edit{Base: 1, Add: []lsm.Run{run("r3")}}, Clock: 101}
	if err, _ := apply(t, s, TypeFlush, beyond).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("flush beyond clock: %v", err)
	}
	// An unknown type flagged skippable is skipped; unflagged it panics.
	l := &raft.Log{Type: raft.LogCommand, Data: []byte{EntryVersion, 200, FlagSkippable, '{', '}'}}
	if r := s.Apply(l); r != nil || s.Summary().Skipped != 1 {
		t.Fatalf("skippable: %v", r)
	}
	for _, data := range [][]byte{{EntryVersion, 200, 0}, {EntryVersion + 1, byte(TypeNoop), 0}, {EntryVersion, byte(TypeFlush), 0, '{'}, {1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("entry %v applied without panic", data)
				}
			}()
			s.Apply(&raft.Log{Type: raft.LogCommand, Data: data})
		}()
	}
}

type sink struct {
	bytes.Buffer
	cancelled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { s.cancelled = true; return nil }
func (s *sink) Close() error  { return nil }

func TestSnapshotRestore(t *testing.T) {
	s := New()
	apply(t, s, TypeReserveClock, ReserveClock{After: 0, Count: 10})
	p := NewPending(s)
	for _, d := range []string{"did:web:a.example", "did:web:b.example"} {
		p.Assign(link.OutlineDID, d)
	}
	p.Assign(link.OutlinePath, ".subject.uri")
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Add: []lsm.Run{run("r1")}}, Outlines: p.Take(), Cursors: map[string]string{"a": "1"}, Clock: 9})
	apply(t, s, TypeNodeInfo, NodeInfo{ID: "n1", HTTP: "127.0.0.1:1", Admin: "127.0.0.1:2", Raft: "127.0.0.1:3"})
	apply(t, s, TypeSetting, Setting{Key: "plc", Value: "off"})
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Apply continues while the snapshot is persisted; the snapshot keeps
	// the state of its moment.
	p.Assign(link.OutlineDID, "did:web:c.example")
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 1, Add: []lsm.Run{run("r2")}}, Outlines: p.Take(), Clock: 10})
	var sk sink
	if err := snap.Persist(&sk); err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.Restore(io.NopCloser(bytes.NewReader(sk.Bytes()))); err != nil {
		t.Fatal(err)
	}
	got := r.Summary()
	if got.Generation != 1 || got.Outlines["did"] != 2 || got.Clock != 10 || got.Cursors["a"] != "1" || got.Settings["plc"] != "off" || got.Nodes["n1"].Admin != "127.0.0.1:2" {
		t.Fatalf("restored %+v", got)
	}
	if name, ok := r.Name(link.OutlineDID, 2); !ok || name != "did:web:b.example" {
		t.Fatalf("restored outline %q", name)
	}
	if _, ok := r.Lookup(link.OutlineDID, "did:web:c.example"); ok {
		t.Fatal("snapshot saw a later outline")
	}
	// It knows how far it applied: a node restarted from a snapshot of an
	// idle cluster is caught up before any new entry (its readiness waited
	// for one, up to --ready-lag-max).
	if got, want := r.AppliedIndex(), index-1; got != want {
		t.Fatalf("restored applied index %d, want the snapshot's %d", got, want)
	}
	// A state backup starts a new log: no index.
	b, err := r.Backup()
	if err != nil {
		t.Fatal(err)
	}
	b2 := New()
	if err := b2.Restore(io.NopCloser(bytes.NewReader(b.Snapshot))); err != nil || b2.AppliedIndex() != 0 {
		t.Fatalf("a backup restored at applied index %d (%v), want 0", b2.AppliedIndex(), err)
	}
}
