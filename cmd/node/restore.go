package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/hashicorp/go-hclog"
)

// stateToRestore reads the newest backup of the replicated state in the
// bucket (--restore-from-bucket) and checks that every table it names is
// there, returning the snapshot a new cluster starts from.
func stateToRestore(ctx context.Context, bucket objstore.Store, log hclog.Logger) ([]byte, error) {
	key, data, ok, err := ingest.NewestStateBackup(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("--restore-from-bucket: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("--restore-from-bucket: the bucket holds no state backup under %s", ingest.StateBackupPrefix)
	}
	snap, m, err := fsm.BackupSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("--restore-from-bucket: %s: %w", key, err)
	}
	missing, err := ingest.MissingTables(ctx, bucket, m)
	if err != nil {
		return nil, fmt.Errorf("--restore-from-bucket: %w", err)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("--restore-from-bucket: %s names %d table objects the bucket does not hold (%s): not restored", key, len(missing), strings.Join(missing[:min(len(missing), 5)], ", "))
	}
	tables := 0
	for _, r := range m.Runs {
		tables += len(r.Tables)
	}
	log.Warn("restoring the replicated state from the bucket: a new cluster of this node; its sources read again from the backup's cursors",
		"backup", key, "generation", m.Generation, "tables", tables)
	return snap, nil
}
