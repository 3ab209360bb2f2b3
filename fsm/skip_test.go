//go:build !eddy_next

package fsm

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/raft"
)

// nextBuildInfoEntry is, byte for byte, the entry a build with -tags
// eddy_next proposes when node n1 of version v2 becomes leader
// (next_test.go checks that build produces exactly these bytes).
var nextBuildInfoEntry = []byte("\x01\x07\x01" + `{"node":"n1","version":"v2"}`)

// An entry of a type this build does not know, flagged skippable, changes
// nothing but the applied index and the skipped count, which snapshots
// keep; unflagged, the same type stops the node with a message to upgrade.
func TestSkippableUnknownType(t *testing.T) {
	s := New()
	apply(t, s, TypeReserveClock, ReserveClock{After: 0, Count: 10})
	apply(t, s, TypeFlush, Flush{Edit: lsm.Edit{Add: []lsm.Run{run("r1")}}, Cursors: map[string]string{"a": "1"}, Clock: 5})
	before := s.Summary()
	snapBefore := snapshotBytes(t, s)

	for i, data := range [][]byte{nextBuildInfoEntry, {EntryVersion, 250, FlagSkippable | 0x80}, {EntryVersion, 99, FlagSkippable, 0xff, 0x00}} {
		d, err := Decode(data)
		if err != nil || !d.Skipped || d.Payload != nil {
			t.Fatalf("entry %d: decoded %+v, %v; want skipped", i, d, err)
		}
		l := &raft.Log{Index: before.Index + uint64(i) + 1, Type: raft.LogCommand, Data: data}
		if r := s.Apply(l); r != nil {
			t.Fatalf("entry %d: Apply returned %v", i, r)
		}
	}
	after := s.Summary()
	if after.Skipped != 3 || after.Index != before.Index+3 {
		t.Fatalf("skipped %d, index %d (was %d)", after.Skipped, after.Index, before.Index)
	}
	after.Skipped, after.Index = before.Skipped, before.Index
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("a skipped entry changed the state:\n%+v\n%+v", before, after)
	}
	// The snapshot differs only in the count and the applied index, and a
	// restore keeps them.
	snapAfter := snapshotBytes(t, s)
	was := bytes.Replace(snapAfter, []byte(`"skipped":3`), []byte(`"skipped":0`), 1)
	was = bytes.Replace(was, []byte(fmt.Sprintf(`"index":%d`, before.Index+3)), []byte(fmt.Sprintf(`"index":%d`, before.Index)), 1)
	if bytes.Equal(snapBefore, snapAfter) || !bytes.Equal(was, snapBefore) {
		t.Fatalf("snapshots:\n%s\n%s", snapBefore, snapAfter)
	}
	r := New()
	if err := r.Restore(io.NopCloser(bytes.NewReader(snapAfter))); err != nil {
		t.Fatal(err)
	}
	if got := r.Summary().Skipped; got != 3 {
		t.Fatalf("restored skipped count %d", got)
	}

	// The same unknown types without the flag: refused, with a message that
	// says what to do; the state is untouched.
	for _, data := range [][]byte{
		append([]byte{EntryVersion, nextBuildInfoEntry[1], 0}, nextBuildInfoEntry[headerBytes:]...),
		{EntryVersion, 250, 0x80},
	} {
		if _, err := Decode(data); err == nil || !strings.Contains(err.Error(), "unknown entry type") {
			t.Fatalf("Decode(%v): %v; want an unknown type error", data, err)
		}
		msg := func() (msg string) {
			defer func() { msg, _ = recover().(string) }()
			s.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data})
			return ""
		}()
		if !strings.Contains(msg, "entry 100") || !strings.Contains(msg, "upgrade this node") {
			t.Fatalf("Apply of a non-skippable unknown type: panic %q", msg)
		}
	}
	if got := s.Summary(); got.Skipped != 3 || got.Index != before.Index+3 {
		t.Fatalf("a refused entry changed the state: %+v", got)
	}
}

// A default build proposes nothing extra when it becomes leader.
// (This file is the default build's view: next_test.go is the eddy_next one.)
func TestLeaderEntriesDefaultBuild(t *testing.T) {
	es, err := LeaderEntries("n1", "v1")
	if err != nil || len(es) != 0 {
		t.Fatalf("LeaderEntries: %v, %v", es, err)
	}
}

// TestFlushOfNamesIsVersion2: a flush that adds a run of the names tree is
// written as version 2, which a version-1 build refuses to decode (its
// Apply stops the node: "upgrade this node") instead of refusing the edit
// as bad and parting from the cluster's manifest; every other entry stays
// version 1, and this build decodes both.
func TestFlushOfNamesIsVersion2(t *testing.T) {
	run := func(tree lsm.Tree) lsm.Run {
		return lsm.Run{ID: "r-" + string(tree), Tree: tree, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: "t-" + string(tree), Records: 1}}}
	}
	for _, c := range []struct {
		payload any
		t       Type
		want    byte
	}{
		{Flush{Edit: lsm.Edit{Add: []lsm.Run{run(lsm.TreeLinks), run(lsm.TreeNames)}}}, TypeFlush, 2},
		{&Flush{Edit: lsm.Edit{Add: []lsm.Run{run(lsm.TreeNames)}}}, TypeFlush, 2},
		{Flush{Edit: lsm.Edit{Add: []lsm.Run{run(lsm.TreeLinks), run(lsm.TreePLCDID)}}}, TypeFlush, 1},
		{Setting{Key: "k", Value: string(lsm.TreeNames)}, TypeSetting, 1},
	} {
		b, err := Encode(c.t, 0, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != c.want {
			t.Errorf("%s %+v: version %d, want %d", c.t, c.payload, b[0], c.want)
		}
		if _, err := Decode(b); err != nil {
			t.Errorf("%s version %d: %v", c.t, b[0], err)
		}
	}
}
