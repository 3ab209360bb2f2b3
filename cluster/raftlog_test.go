package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// failingLogs refuses the next fail.Load() writes of entries (a full disk).
type failingLogs struct {
	raft.LogStore
	fail *atomic.Int64
}

func (f failingLogs) StoreLogs(logs []*raft.Log) error {
	if f.fail.Add(-1) >= 0 {
		return errors.New("test: the disk is full")
	}
	return f.LogStore.StoreLogs(logs)
}

func (f failingLogs) StoreLog(l *raft.Log) error { return f.StoreLogs([]*raft.Log{l}) }

// TestFollowerPastItsSnapshotCatchesUp: a node that joined by the leader's
// snapshot, so that its log starts past it, and then failed to write a few
// appends, catches up. hashicorp/raft alone refuses the append whose
// previous entry is the snapshot's last (its log does not hold it), and
// the leader sends the same snapshot again and again until it takes a
// newer one, which this cluster never does.
func TestFollowerPastItsSnapshotCatchesUp(t *testing.T) {
	c := newTCluster(t)
	var fail atomic.Int64
	c.tune = func(id string, cfg *Config) {
		cfg.SnapshotThreshold = 1 << 40 // only the snapshot the test takes
		cfg.SnapshotInterval = time.Hour
		if id == "n3" {
			cfg.testLogs = func(l raft.LogStore) raft.LogStore { return failingLogs{LogStore: l, fail: &fail} }
		}
	}
	n1 := c.start("n1", true)
	c.leader(5 * time.Second)
	n2 := c.start("n2", false)
	if err := c.join(n1, n2); err != nil {
		t.Fatal(err)
	}
	l := c.leader(5 * time.Second)
	for i := range 100 {
		c.publish(l, fmt.Sprintf("a%d", i))
	}
	l = c.leader(5 * time.Second)
	if err := l.node.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	n3 := c.start("n3", false)
	if err := c.join(l, n3); err != nil {
		t.Fatal(err)
	}
	var g uint64
	for i := range 3 {
		g = c.publish(l, fmt.Sprintf("b%d", i))
	}
	c.waitGen(g, 10*time.Second)

	st := n3.node.raft.Stats()
	snap, _ := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
	last, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
	first, err := n3.node.store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if snap == 0 || first != snap+1 || last <= snap {
		t.Fatalf("n3 did not join by the snapshot: snapshot at %d, log %d-%d", snap, first, last)
	}
	// Enough refused writes for the leader to walk back to the entry
	// after the snapshot: one a refusal, and one more.
	fail.Store(int64(last-snap) + 1)
	g = c.publish(c.leader(5*time.Second), "c")
	c.waitGen(g, 15*time.Second)
	if n := fail.Load(); n >= 0 {
		t.Fatalf("%d refused writes left: the leader never walked back to the snapshot", n+1)
	}
	c.waitGen(c.publish(c.leader(5*time.Second), "d"), 5*time.Second)
}

// TestSnapshotLogsAnswersOnlyForTheSnapshotsEntry: the store answers for
// the last entry of the snapshot Raft stands on only when it holds nothing
// up to it, and not before Raft has started.
func TestSnapshotLogsAnswersOnlyForTheSnapshotsEntry(t *testing.T) {
	var snapIndex, snapTerm uint64
	started := false
	store := raft.NewInmemStore()
	logs := snapshotLogs{LogStore: store, lastSnapshot: func() (uint64, uint64, bool) { return snapIndex, snapTerm, started }}
	put := func(from, to, term uint64) {
		for i := from; i <= to; i++ {
			if err := store.StoreLog(&raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte{byte(i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	get := func(index uint64) (raft.Log, error) {
		var l raft.Log
		err := logs.GetLog(index, &l)
		return l, err
	}
	missing := func(index uint64, what string) {
		t.Helper()
		if l, err := get(index); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("%s: entry %d: %+v, %v", what, index, l, err)
		}
	}

	snapIndex, snapTerm, started = 10, 3, true
	missing(10, "an empty log")
	put(11, 20, 4) // the log starts past the snapshot
	if l, err := get(10); err != nil || l.Index != 10 || l.Term != 3 || l.Type != raft.LogNoop {
		t.Fatalf("the snapshot's entry: %+v %v", l, err)
	}
	missing(9, "below the snapshot's")
	missing(21, "past the log")
	if l, err := get(15); err != nil || l.Type != raft.LogCommand || l.Term != 4 {
		t.Fatalf("a stored entry: %+v %v", l, err)
	}
	started = false // Raft replaying at start: a snapshot it passed over is not the one it stands on
	missing(10, "before Raft has started")
	started = true
	snapIndex, snapTerm = 12, 4 // a newer snapshot inside the log
	missing(10, "an older snapshot's entry")
	if l, err := get(12); err != nil || l.Type != raft.LogCommand {
		t.Fatalf("a stored entry at the snapshot: %+v %v", l, err)
	}

	// A gap inside the log: the store holds entries below the snapshot's,
	// which a leader would send on into the gap.
	store = raft.NewInmemStore()
	logs.LogStore = store
	put(5, 11, 4)
	put(13, 20, 4)
	missing(12, "a gap inside the log")

	// Index 1: a leader sends it without asking for the entry before it.
	snapIndex, snapTerm = 1, 5
	store = raft.NewInmemStore()
	logs.LogStore = store
	put(2, 4, 5)
	missing(1, "index 1")
}
