//go:build eddy_next

package fsm

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// The eddy_next build (run: go test -tags eddy_next ./fsm) proposes one
// BuildInfo entry per leadership, flagged skippable, with exactly the bytes
// skip_test.go shows a default build skipping; this build applies it
// without counting it as skipped.
func TestLeaderEntriesNextBuild(t *testing.T) {
	es, err := LeaderEntries("n1", "v2")
	if err != nil || len(es) != 1 || es[0].Type != TypeBuildInfo {
		t.Fatalf("LeaderEntries: %+v, %v", es, err)
	}
	want := []byte("\x01\x07\x01" + `{"node":"n1","version":"v2"}`)
	if !bytes.Equal(es[0].Data, want) {
		t.Fatalf("entry %q, want %q", es[0].Data, want)
	}
	d, err := Decode(es[0].Data)
	if err != nil || d.Skipped || d.Flags&FlagSkippable == 0 {
		t.Fatalf("decoded %+v, %v", d, err)
	}
	if bi, ok := d.Payload.(*BuildInfo); !ok || *bi != (BuildInfo{Node: "n1", Version: "v2"}) {
		t.Fatalf("payload %#v", d.Payload)
	}
	if TypeBuildInfo.String() != "build-info" {
		t.Fatalf("name %q", TypeBuildInfo)
	}
	s := New()
	if r := s.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: es[0].Data}); r != nil {
		t.Fatalf("Apply: %v", r)
	}
	if sum := s.Summary(); sum.Skipped != 0 || sum.Index != 1 {
		t.Fatalf("summary %+v", sum)
	}
}
