package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// raftDBFile is the Raft log and stable store in a node's Config.Dir.
const raftDBFile = "raft.db"

// HasState reports whether dir (a Config.Dir) holds a node's Raft store,
// without opening it (Open does, and locks it): for a check made before
// a node starts, such as a restore's refusal over existing state before
// it writes anything. Open's own check (raft.HasExistingState) decides.
func HasState(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, raftDBFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// installRestore writes state as the Raft snapshot a new cluster starts
// from: index and term 1, this node its one voter. NewRaft restores the
// state machine from it and the node elects itself, as after a recovery
// with peers.json.
func installRestore(snaps raft.SnapshotStore, trans raft.Transport, id raft.ServerID, addr string, state []byte) error {
	conf := raft.Configuration{Servers: []raft.Server{{ID: id, Address: raft.ServerAddress(addr), Suffrage: raft.Voter}}}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 1, 1, conf, 1, trans)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if _, err := sink.Write(state); err != nil {
		sink.Cancel()
		return fmt.Errorf("restore: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}
