package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/raft"
)

// randomLog builds a log of valid and stale entries of every type, as a
// leader (and a deposed one) would write them.
func randomLog(t *testing.T, seed uint64, n int) []*raft.Log {
	r := rand.New(rand.NewPCG(seed, 7))
	shadow := New() // tracks what the proposer believes
	var log []*raft.Log
	add := func(typ Type, flags uint8, v any) {
		b, err := Encode(typ, flags, v)
		if err != nil {
			t.Fatal(err)
		}
		l := &raft.Log{Index: uint64(len(log) + 1), Type: raft.LogCommand, Data: b}
		log = append(log, l)
		shadow.Apply(l)
	}
	p := NewPending(shadow)
	runs := 0
	for i := 0; i < n; i++ {
		switch k := r.IntN(10); {
		case k < 2:
			after := shadow.Clock()
			if r.IntN(5) == 0 {
				after = 0 // a stale reservation
			}
			add(TypeReserveClock, 0, ReserveClock{After: after, Count: uint64(1 + r.IntN(1000))})
		case k < 7:
			for j := r.IntN(4); j > 0; j-- {
				p.Assign(link.OutlineKinds[r.IntN(4)], fmt.Sprintf("s%d", r.IntN(50)))
			}
			m := shadow.Manifest()
			e := lsm.Edit{Base: m.Generation}
			if r.IntN(6) == 0 && m.Generation > 0 {
				e.Base-- // a deposed leader's flush
			}
			runs++
			e.Add = []lsm.Run{{ID: fmt.Sprintf("r%d", runs), Tree: lsm.TreeLinks, Kind: lsm.RunDelta, Tables: []lsm.TableRef{{ID: fmt.Sprintf("t%d", runs)}}}}
			if rs := m.RunsOf(lsm.TreeLinks); len(rs) > 2 && r.IntN(3) == 0 {
				e.Remove = []string{rs[0].ID, rs[1].ID}
			}
			add(TypeFlush, 0, Flush{Edit: e, Outlines: p.Take(), Cursors: map[string]string{"src": fmt.Sprint(i)}, Clock: shadow.Clock()})
			p.Committed()
		case k < 8:
			add(TypeNodeInfo, 0, NodeInfo{ID: fmt.Sprintf("n%d", r.IntN(3)), HTTP: fmt.Sprint(i), Removed: r.IntN(4) == 0})
		case k < 9:
			add(TypeSetting, 0, Setting{Key: fmt.Sprintf("k%d", r.IntN(3)), Value: fmt.Sprint(r.IntN(3))})
		default:
			b := []byte{EntryVersion, byte(100 + r.IntN(50)), FlagSkippable, '{', '}'}
			l := &raft.Log{Index: uint64(len(log) + 1), Type: raft.LogCommand, Data: b}
			log = append(log, l)
			shadow.Apply(l)
		}
	}
	return log
}

func snapshotBytes(t *testing.T, s *State) []byte {
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sk sink
	if err := snap.Persist(&sk); err != nil {
		t.Fatal(err)
	}
	return sk.Bytes()
}

// The same log applied twice gives byte-identical snapshots; a snapshot
// restored and snapshotted again is byte-identical.
func TestDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		log := randomLog(t, seed, 400)
		a, b := New(), New()
		for _, l := range log {
			a.Apply(l)
		}
		for _, l := range log {
			b.Apply(l)
		}
		sa, sb := snapshotBytes(t, a), snapshotBytes(t, b)
		if !bytes.Equal(sa, sb) {
			t.Fatalf("seed %d: snapshots differ", seed)
		}
		c := New()
		if err := c.Restore(io.NopCloser(bytes.NewReader(sa))); err != nil {
			t.Fatal(err)
		}
		if sc := snapshotBytes(t, c); !bytes.Equal(sa, sc) {
			t.Fatalf("seed %d: restored snapshot differs", seed)
		}
		if a.Manifest().Generation == 0 || a.OutlineLen(link.OutlinePath) == 0 {
			t.Fatalf("seed %d: the log did nothing", seed)
		}
	}
}
