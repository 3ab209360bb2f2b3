package cluster

import (
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// snapshotLogs is the Raft log store as a node opens it: the Bolt store,
// which answers for the entry its newest snapshot ends at when the store
// holds no entry up to it.
//
// Raft's consistency check takes an append's previous entry from the log,
// or from the snapshot when the entry is the last one the node has; a
// follower whose log starts past its snapshot (it joined, or was restored
// or lagged, by a snapshot, and its log holds only what came after) has
// neither for the snapshot's own index once its log is longer. hashicorp/raft
// v1.8.0 then refuses the append. The leader walks back to its log's
// start and sends the snapshot again; if that is still the snapshot the
// follower has, the same refusal follows, for as long as the leader takes
// no newer snapshot (thousands of entries on a quiet cluster). Meanwhile
// each install sets the follower's state back to the snapshot's. It takes
// only a few refused appends in a row to get there: a follower that joined
// by a snapshot and then failed to write a few appends (a full disk), or
// was sent entries of a deposed leader's that it must drop.
//
// A snapshot's last index and term are the entry it ends at, as the Raft
// paper has the consistency check use them, so the store answers with an
// entry of that index and term (a no-op: its command is in the snapshot).
// Only when the store holds nothing up to that index: then nothing in
// Raft reads the entry but that check. A leader sends entries from a
// follower's next index on, and asks the entry before it first; with
// every entry below the snapshot's missing too that ask fails and the
// leader sends the snapshot instead, so the no-op is never sent as an
// entry. Index 1 is excluded: a leader sends a follower's first entry
// without asking for one before it.
//
// The snapshot is the one Raft stands on (lastSnapshot, ok false until
// Raft has started): not the newest in the snapshot store, which may be
// one Raft failed to restore at start and passed over for an older one,
// whose next entry Raft then reads from the log, and must not be given
// a no-op for.
type snapshotLogs struct {
	raft.LogStore
	lastSnapshot func() (index, term uint64, ok bool)
}

// GetLog returns the entry at index from the store, or the entry the
// node's snapshot ends at (its index and term) when that is index and the
// store holds nothing up to it.
func (s snapshotLogs) GetLog(index uint64, out *raft.Log) error {
	err := s.LogStore.GetLog(index, out)
	if !errors.Is(err, raft.ErrLogNotFound) || index <= 1 {
		return err
	}
	first, ferr := s.LogStore.FirstIndex()
	if ferr != nil || first <= index {
		return err // an empty store (0), or a gap inside the log
	}
	snap, term, ok := s.lastSnapshot()
	if !ok || snap != index {
		return err
	}
	*out = raft.Log{Index: index, Term: term, Type: raft.LogNoop}
	return nil
}

// raftSnapshot reads the snapshot r stands on from its stats (which wait
// on nothing); ok is false before r is set.
func raftSnapshot(r *atomic.Pointer[raft.Raft]) func() (uint64, uint64, bool) {
	return func() (uint64, uint64, bool) {
		rf := r.Load()
		if rf == nil {
			return 0, 0, false // Raft starting: replaying its own log
		}
		st := rf.Stats()
		index, err1 := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
		term, err2 := strconv.ParseUint(st["last_snapshot_term"], 10, 64)
		return index, term, err1 == nil && err2 == nil && index > 0
	}
}
