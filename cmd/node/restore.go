package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/hashicorp/go-hclog"
)

// restoreState is the newest backup of the replicated state in the bucket
// (--restore-from-bucket), checked: the snapshot a new cluster starts
// from, and the objects to put back once it is formed.
type restoreState struct {
	key      string
	snapshot []byte
	objects  map[string][]byte
	gen      uint64
	tables   int
	putBackN int
}

// stateToRestore reads the newest backup of the replicated state in the
// bucket and checks that every table it names is there.
func stateToRestore(ctx context.Context, bucket objstore.Store) (*restoreState, error) {
	key, data, ok, err := ingest.NewestStateBackup(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("--restore-from-bucket: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("--restore-from-bucket: the bucket holds no state backup under %s", ingest.StateBackupPrefix)
	}
	snap, m, objects, err := ingest.ReadStateBackup(data)
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
	rs := &restoreState{key: key, snapshot: snap, objects: objects, gen: m.Generation}
	for _, r := range m.Runs {
		rs.tables += len(r.Tables)
	}
	return rs, nil
}

// putBack puts back the objects the backup holds that the bucket lost
// (a backfill's checkpoint, deleted as the lost cluster's backfill went
// on), before the cluster is formed: a restore refused after it leaves
// only objects their owner deletes as it goes.
func (rs *restoreState) putBack(ctx context.Context, bucket objstore.Store) error {
	n, err := ingest.RestoreObjects(ctx, bucket, rs.objects)
	if err != nil {
		return fmt.Errorf("--restore-from-bucket: put back the backup's objects: %w", err)
	}
	rs.putBackN = n
	return nil
}

// logRestored says, once the new cluster is formed, what it came from.
func (rs *restoreState) logRestored(log hclog.Logger) {
	log.Warn("restoring the replicated state from the bucket: a new cluster of this node; its sources read again from the backup's cursors",
		"backup", rs.key, "generation", rs.gen, "tables", rs.tables, "objects_put_back", rs.putBackN)
}

// errFound stops a listing at its first key.
var errFound = errors.New("found")

// clusterObjects returns the first object of a cluster the bucket holds
// (a table, a backup of the replicated state), "" when it holds none.
func clusterObjects(ctx context.Context, bucket objstore.Store) (string, error) {
	for _, prefix := range []string{ingest.StateBackupPrefix, "tables/"} {
		var first string
		err := bucket.List(ctx, prefix, func(k string, _ int64) error { first = k; return errFound })
		if err != nil && !errors.Is(err, errFound) {
			return "", fmt.Errorf("list %s: %w", prefix, err)
		}
		if first != "" {
			return first, nil
		}
	}
	return "", nil
}

// checkBootstrap refuses --bootstrap on a node without Raft state over a
// bucket that holds a cluster's objects: a node whose data directory was
// lost, started again with the settings of the cluster's first start,
// would form a second cluster over the first one's bucket, whose garbage
// collection takes the first one's tables for orphans and its newer state
// backups for another history's, and deletes them.
func checkBootstrap(ctx context.Context, bucket objstore.Store, raftDir string) error {
	has, err := cluster.HasState(raftDir)
	if err != nil {
		return fmt.Errorf("--bootstrap: %w", err)
	}
	if has {
		return nil // ignored: the node is a member already
	}
	key, err := clusterObjects(ctx, bucket)
	if err != nil {
		return fmt.Errorf("--bootstrap: %w", err)
	}
	if key != "" {
		return fmt.Errorf("--bootstrap refused: %s holds no Raft state, but the bucket holds a cluster's objects (%s): "+
			"a node whose data directory was lost must not form a new cluster over its bucket. "+
			"If the cluster's other nodes run, start this node with a new --id and --join instead of --bootstrap "+
			"(and remove its old ID: eddy-ctl remove); if every node's data directory is lost, --restore-from-bucket; "+
			"a new cluster needs a bucket of its own", raftDir, key)
	}
	return nil
}
