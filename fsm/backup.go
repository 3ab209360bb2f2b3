package fsm

import (
	"encoding/json"
	"fmt"

	"github.com/eddy-backlinks/eddy/lsm"
)

// Backups of the replicated state in the bucket. The state is small (the
// manifest, the outlines, the cursors and the clock) and every node holds
// it in its Raft log and snapshots; if all of them are lost, the tables in
// the bucket are safe but nothing lists them. So the leader also writes the
// state, as a snapshot encodes it, to the bucket (package ingest says when,
// what goes with it, and holds back deleting any table a backup may still
// name), and a node can start a new cluster from the newest one
// (cluster.Config.Restore).

// Backup is the state as a snapshot encodes it (what Restore reads), the
// generation of the manifest in it, and its cursors.
type Backup struct {
	Generation uint64
	Snapshot   []byte
	Cursors    map[string]string
}

// Backup encodes the state as a snapshot, copied under one read lock.
func (s *State) Backup() (Backup, error) {
	v := s.capture()
	v.Index = 0 // a new cluster's log starts over (cluster.Config.Restore)
	m, err := lsm.DecodeManifest(v.Manifest)
	if err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	b, err := json.Marshal(&v)
	if err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	return Backup{Generation: m.Generation, Snapshot: b, Cursors: v.Cursors}, nil
}

// SnapshotManifest checks that snapshot is one this build can restore and
// returns the manifest in it.
func SnapshotManifest(snapshot []byte) (*lsm.Manifest, error) {
	var v snapshotJSON
	if err := json.Unmarshal(snapshot, &v); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if v.V < 1 || v.V > SnapshotVersion {
		return nil, fmt.Errorf("snapshot version %d, this build reads up to %d", v.V, SnapshotVersion)
	}
	m, err := lsm.DecodeManifest(v.Manifest)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return m, nil
}
