package cluster

import (
	"fmt"

	"github.com/hashicorp/raft"
)

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
