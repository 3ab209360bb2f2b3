package fsm

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"

	"github.com/eddy-backlinks/eddy/lsm"
)

// Backups of the replicated state in the bucket. The state is small (the
// manifest, the outlines, the cursors and the clock) and every node holds
// it in its Raft log and snapshots; if all of them are lost, the tables in
// the bucket are safe but nothing lists them. So the leader also writes the
// state, as a snapshot encodes it, to the bucket (package ingest says when,
// and holds back deleting any table a backup may still name), and a node
// can start a new cluster from the newest one (cluster.Config.Restore).

// Backup is one backup of the state: its encoding (a snapshot's, gzipped),
// the generation of the manifest in it and the index of the last entry
// applied to it.
type Backup struct {
	Generation, Index uint64
	Data              []byte
}

// Backup encodes the state as a snapshot (gzipped JSON), copied under one
// read lock with its generation and index.
func (s *State) Backup() (Backup, error) {
	v, index := s.capture()
	m, err := lsm.DecodeManifest(v.Manifest)
	if err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(&v); err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	if err := zw.Close(); err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	return Backup{Generation: m.Generation, Index: index, Data: buf.Bytes()}, nil
}

// BackupSnapshot decodes a backup into the snapshot it holds (what
// Restore reads) and the manifest in it; an error if it is not a backup
// this build can restore.
func BackupSnapshot(data []byte) ([]byte, *lsm.Manifest, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, nil, fmt.Errorf("state backup: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, backupBytesMax+1))
	if err != nil {
		return nil, nil, fmt.Errorf("state backup: %w", err)
	}
	if len(raw) > backupBytesMax {
		return nil, nil, fmt.Errorf("state backup: more than %d bytes decoded", backupBytesMax)
	}
	var v snapshotJSON
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, nil, fmt.Errorf("state backup: %w", err)
	}
	if v.V < 1 || v.V > SnapshotVersion {
		return nil, nil, fmt.Errorf("state backup: snapshot version %d, this build reads up to %d", v.V, SnapshotVersion)
	}
	m, err := lsm.DecodeManifest(v.Manifest)
	if err != nil {
		return nil, nil, fmt.Errorf("state backup: %w", err)
	}
	return raw, m, nil
}

// backupBytesMax bounds a decoded backup: far above the state of 40M
// accounts with 1% of their DIDs outlined (a 14 MB snapshot).
const backupBytesMax = 4 << 30
