package fsm

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"

	"github.com/eddy-backlinks/eddy/lsm"
)

// snapRestore persists s's snapshot and restores it into a new state.
func snapRestore(t *testing.T, s *State) *State {
	t.Helper()
	r := New()
	if err := r.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, s)))); err != nil {
		t.Fatal(err)
	}
	return r
}

// A compaction's flush puts the replaced tables on the replicated garbage
// list with the generation that removed them and the leader's time; a
// snapshot carries the list; a Collect removes what it names (twice is
// harmless); a stale flush adds nothing.
func TestGarbageList(t *testing.T) {
	s := New()
	apply(t, s, TypeReserveClock, ReserveClock{After: 0, Count: 10})
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 0, Add: []lsm.Run{run("r1"), run("r2")}}})
	rev := lsm.Run{ID: "r3", Tree: lsm.TreeRevocations, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "tr3", DataBytes: 7, MetaBytes: 3}}}
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 1, Add: []lsm.Run{rev}}})
	if g := s.Garbage(); len(g) != 0 {
		t.Fatalf("garbage before any compaction: %v", g)
	}
	comp := lsm.Run{ID: "c1", Tree: lsm.TreeLinks, Kind: lsm.RunCompacted, Tables: []lsm.TableRef{{ID: "tc1", Records: 2}}}
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 2, Add: []lsm.Run{comp}, Remove: []string{"r1", "r2"}}, Time: 1000})
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 3, Remove: []string{"r3"}}, Time: 2000})
	want := []Garbage{
		{Tree: lsm.TreeLinks, ID: "tr1", Generation: 3, Since: 1000},
		{Tree: lsm.TreeLinks, ID: "tr2", Generation: 3, Since: 1000},
		{Tree: lsm.TreeRevocations, ID: "tr3", DataBytes: 7, MetaBytes: 3, Generation: 4, Since: 2000},
	}
	if g := s.Garbage(); !reflect.DeepEqual(g, want) {
		t.Fatalf("garbage %+v\nwant %+v", g, want)
	}
	if st := s.GarbageStats(); st.Tables != 3 || st.Bytes != 10 {
		t.Fatalf("stats %+v", st)
	}
	// A deposed leader's compaction (stale base) adds nothing.
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 2, Remove: []string{"c1"}}, Time: 3000})
	r := snapRestore(t, s)
	if g := r.Garbage(); !reflect.DeepEqual(g, want) {
		t.Fatalf("restored garbage %+v", g)
	}
	c := Collect{Tables: []TableKey{{Tree: lsm.TreeLinks, ID: "tr1"}, {Tree: lsm.TreeRevocations, ID: "tr1"}}}
	for range 2 {
		if got := apply(t, r, TypeCollect, c); got != 1 && got != 0 {
			t.Fatalf("collect: %v", got)
		}
	}
	if g := r.Garbage(); !reflect.DeepEqual(g, want[1:]) {
		t.Fatalf("after collect %+v", g)
	}
}

// A version 1 snapshot (no garbage list) still restores, with an empty
// list; a snapshot of a newer version is refused.
func TestSnapshotV1Restores(t *testing.T) {
	m := (&lsm.Manifest{Generation: 4, NextSeq: 1}).Encode()
	v1, err := json.Marshal(map[string]any{"v": 1, "clock": 5, "manifest": json.RawMessage(m), "cursors": map[string]string{"a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	if err := s.Restore(io.NopCloser(bytes.NewReader(v1))); err != nil {
		t.Fatal(err)
	}
	if sum := s.Summary(); sum.Generation != 4 || sum.Clock != 5 || sum.Cursors["a"] != "1" || len(s.Garbage()) != 0 {
		t.Fatalf("restored %+v, garbage %v", sum, s.Garbage())
	}
	v9, _ := json.Marshal(map[string]any{"v": SnapshotVersion + 1, "manifest": json.RawMessage(m)})
	if err := s.Restore(io.NopCloser(bytes.NewReader(v9))); err == nil {
		t.Fatal("a newer snapshot restored")
	}
}

// A snapshot is version 2 until the manifest has a run of the names tree,
// then version 3 (which a build reading up to 2 refuses, as it stops at
// the entry that added the run); both restore here.
func TestSnapshotVersionOfNames(t *testing.T) {
	s := New()
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 0, Add: []lsm.Run{run("r1")}}})
	version := func(s *State) int {
		var v struct {
			V int `json:"v"`
		}
		if err := json.Unmarshal(snapshotBytes(t, s), &v); err != nil {
			t.Fatal(err)
		}
		return v.V
	}
	if v := version(s); v != 2 {
		t.Fatalf("snapshot version %d without names, want 2", v)
	}
	names := lsm.Run{ID: "n1", Tree: lsm.TreeNames, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "tn1", Records: 1}}}
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Base: 1, Add: []lsm.Run{names}}})
	if v := version(s); v != 3 {
		t.Fatalf("snapshot version %d with a names run, want 3", v)
	}
	r := snapRestore(t, s)
	if got := r.Manifest().RunsOf(lsm.TreeNames); len(got) != 1 || got[0].ID != "n1" {
		t.Fatalf("restored names runs %+v", got)
	}
}
