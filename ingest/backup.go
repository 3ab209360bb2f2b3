package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
)

// Backups of the replicated state in the bucket (fsm/backup.go). The
// leader puts the state under state/<generation>-<time>.json.gz every
// StateBackupInterval and, before it deletes replaced tables, whenever
// its newest backup is older than the generation that removed one of
// them. So the newest backup in the bucket never names a deleted table:
// a table is deleted only once a backup at or past the generation that
// removed it is durable, and that backup's manifest no longer has it.
// With the state go the objects its cursors name that their owners
// delete as they go (a backfill's checkpoint). After each backup the
// older ones are deleted. A node started with --restore-from-bucket
// begins a new cluster from the newest one (docs/operations.md); its
// tables written since are orphans to the new leader's sweep, and its
// sources read again from the backup's cursors.

// StateBackupPrefix is where the state backups live in the bucket.
const StateBackupPrefix = "state/"

// DefaultStateBackupInterval is how often the leader backs the state up
// at least: what a cluster restored from the bucket reads again from its
// sources.
const DefaultStateBackupInterval = 10 * time.Minute

// stateBackupFile is a backup's content, gzipped JSON: the snapshot and
// the objects its cursors name (key: content).
type stateBackupFile struct {
	V        int               `json:"v"`
	Snapshot json.RawMessage   `json:"snapshot"`
	Objects  map[string][]byte `json:"objects,omitempty"`
}

// stateBackupBytesMax bounds a backup decompressed (ReadStateBackup): far
// above the state of 40M accounts with 1% of their DIDs outlined (a 14 MB
// snapshot) and a backfill checkpoint.
const stateBackupBytesMax = 4 << 30

// stateBackupKey names a backup: its generation, then the leader's clock,
// zero-padded, so that the newest is the last in the bucket's order (two
// backups of one generation hold the same manifest).
func stateBackupKey(gen uint64, at time.Time) string {
	return fmt.Sprintf("%s%020d-%020d.json.gz", StateBackupPrefix, gen, at.UnixNano())
}

// parseStateBackupKey returns the generation a backup's key names; false
// for any other key.
func parseStateBackupKey(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, StateBackupPrefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".json.gz")
	g, i, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || len(g) != 20 || len(i) != 20 {
		return 0, false
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if _, err2 := strconv.ParseUint(i, 10, 64); err != nil || err2 != nil {
		return 0, false
	}
	return gen, true
}

// NewestStateBackup returns the key and content of the newest state
// backup in store; ok false if there is none.
func NewestStateBackup(ctx context.Context, store objstore.Store) (key string, data []byte, ok bool, err error) {
	err = store.List(ctx, StateBackupPrefix, func(k string, _ int64) error {
		if _, ok := parseStateBackupKey(k); ok {
			key = k // keys come in increasing order
		}
		return nil
	})
	if err != nil || key == "" {
		return "", nil, false, err
	}
	data, err = store.Get(ctx, key)
	if err != nil {
		return "", nil, false, err
	}
	return key, data, true, nil
}

// ReadStateBackup decodes a backup: the snapshot a new cluster starts from
// (cluster.Config.Restore), the manifest in it, and the objects its
// cursors name.
func ReadStateBackup(data []byte) (snapshot []byte, m *lsm.Manifest, objects map[string][]byte, err error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("state backup: %w", err)
	}
	var f stateBackupFile
	lr := &io.LimitedReader{R: zr, N: stateBackupBytesMax + 1}
	if err := json.NewDecoder(lr).Decode(&f); err != nil {
		if lr.N <= 0 {
			return nil, nil, nil, fmt.Errorf("state backup: more than %d bytes decompressed", stateBackupBytesMax)
		}
		return nil, nil, nil, fmt.Errorf("state backup: %w", err)
	}
	if f.V != 1 {
		return nil, nil, nil, fmt.Errorf("state backup: version %d, this build reads 1", f.V)
	}
	if m, err = fsm.SnapshotManifest(f.Snapshot); err != nil {
		return nil, nil, nil, fmt.Errorf("state backup: %w", err)
	}
	return f.Snapshot, m, f.Objects, nil
}

// RestoreObjects puts back the objects a backup holds that the bucket no
// longer does.
func RestoreObjects(ctx context.Context, store objstore.Store, objects map[string][]byte) (int, error) {
	n := 0
	for k, b := range objects {
		if _, err := store.Size(ctx, k); err == nil {
			continue
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return n, err
		}
		if err := store.Put(ctx, k, b); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// MissingTables returns the objects of m's tables that store does not
// hold (a restore refuses a backup that names any), from one listing of
// the tables.
func MissingTables(ctx context.Context, store objstore.Store, m *lsm.Manifest) ([]string, error) {
	held := map[string]bool{}
	if err := store.List(ctx, "tables/", func(k string, _ int64) error {
		held[k] = true
		return nil
	}); err != nil {
		return nil, err
	}
	var missing []string
	for _, r := range m.Runs {
		for _, t := range r.Tables {
			data, meta := lsm.TableKeys(r.Tree, t.ID)
			for _, k := range []string{data, meta} {
				if !held[k] {
					missing = append(missing, k)
				}
			}
		}
	}
	return missing, nil
}

// backupState puts a backup of the current state in the bucket, then
// deletes the older ones.
func (c *collector) backupState(ctx context.Context) error {
	err := c.putBackup(ctx)
	if err != nil {
		c.w.metrics.StateBackups.WithLabelValues("failed").Inc()
		return fmt.Errorf("state backup: %w", err)
	}
	c.w.metrics.StateBackups.WithLabelValues("ok").Inc()
	c.w.metrics.StateBackupGeneration.Set(float64(c.backedUp))
	var old, newer []string
	err = c.w.cfg.Store.List(ctx, StateBackupPrefix, func(k string, _ int64) error {
		if _, ok := parseStateBackupKey(k); ok && k < c.backedUpKey {
			old = append(old, k)
		} else if ok && k > c.backedUpKey {
			newer = append(newer, k)
		}
		return nil
	})
	for _, k := range old {
		if err == nil {
			err = c.w.cfg.Store.Delete(ctx, k)
		}
	}
	if err != nil {
		c.log.Warn("delete older state backups (tried again after the next backup)", "error", err)
	}
	if len(newer) > 0 {
		return c.deleteNewer(ctx, newer)
	}
	return nil
}

// deleteNewer deletes the backups that sort after this leader's newest
// one, so that it is the newest in the bucket, the one a restore reads.
// Such a backup is either of a generation past the state this leader has
// applied, which no leader of its history can have made (a leader applies
// every entry committed before its term, and the flushes that move the
// generation are entries): another history's, e.g. of peers lost after
// the survivor recovered with peers.json fell behind them, naming tables
// this leader never wrote and will sweep as orphans; or one of its own
// generation put by a deposed leader whose clock runs ahead, with the
// same manifest. Both go, but only once this node has checked with a
// quorum that it still leads: a deposed leader must not delete the backup
// of the leader after it, which would be of a later generation.
func (c *collector) deleteNewer(ctx context.Context, newer []string) error {
	if err := c.w.cfg.Node.Raft().VerifyLeader().Error(); err != nil {
		return fmt.Errorf("state backups sort after this leader's newest (%s…), and it could not check that it still leads: %w", newer[0], err)
	}
	for _, k := range newer {
		gen, _ := parseStateBackupKey(k)
		c.log.Warn("deleting a state backup newer than this leader's: another history's (a cluster recovered from fewer nodes than had the newest state) or a deposed leader's", "key", k, "its_generation", gen, "generation", c.backedUp)
		if err := c.w.cfg.Store.Delete(ctx, k); err != nil {
			return fmt.Errorf("delete state backup %s: %w", k, err)
		}
	}
	return nil
}

// newestIsOurs reports whether this leader's newest backup is the newest
// in the bucket: a state backup of another history, or a deposed leader's,
// may sort after it (deleteNewer); deletions wait until it does not.
func (c *collector) newestIsOurs(ctx context.Context) (bool, error) {
	if c.backedUpKey == "" {
		return false, nil
	}
	newest := ""
	err := c.w.cfg.Store.List(ctx, StateBackupPrefix, func(k string, _ int64) error {
		if _, ok := parseStateBackupKey(k); ok {
			newest = k // keys come in increasing order
		}
		return nil
	})
	return newest == c.backedUpKey, err
}

// backupCaptureTries bounds the captures of one backup whose checkpoint
// was replaced between the capture and its read (putBackup).
const backupCaptureTries = 4

// putBackup captures the state with the checkpoints its cursors name and
// puts it. A checkpoint deleted between the two (its backfill published a
// newer one) takes a new capture; one still missing after a few (lost:
// the backfill itself then starts from an empty state, backfill.go) is
// left out, said in the log, rather than fail every backup.
func (c *collector) putBackup(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		b, err := c.w.cfg.Node.FSM.Backup()
		if err != nil {
			return err
		}
		f := stateBackupFile{V: 1, Snapshot: b.Snapshot, Objects: map[string][]byte{}}
		retry := false
		for name, key := range b.Cursors {
			if !strings.HasSuffix(name, StateCursorSuffix) || key == "" {
				continue
			}
			data, err := c.w.cfg.Store.Get(ctx, key)
			if errors.Is(err, objstore.ErrNotFound) && attempt < backupCaptureTries-1 {
				retry = true
				break
			}
			if errors.Is(err, objstore.ErrNotFound) {
				c.log.Warn("state backup without a checkpoint its cursor names: the object is gone", "cursor", name, "key", key)
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			f.Objects[key] = data
		}
		if retry {
			continue
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if err := json.NewEncoder(zw).Encode(&f); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		at := time.Now()
		key := stateBackupKey(b.Generation, at)
		if err := c.w.cfg.Store.Put(ctx, key, buf.Bytes()); err != nil {
			return err
		}
		c.backedUp, c.backedUpAt, c.backedUpKey = b.Generation, at, key
		return nil
	}
}

// ensureBackup puts a backup unless this leader's newest one is at
// generation gen or later and still the newest in the bucket (one LIST of
// the backups, which are few).
func (c *collector) ensureBackup(ctx context.Context, gen uint64) error {
	if !c.backedUpAt.IsZero() && c.backedUp >= gen {
		ours, err := c.newestIsOurs(ctx)
		if err != nil {
			return err
		}
		if ours {
			return nil
		}
	}
	if err := c.backupState(ctx); err != nil {
		return err
	}
	if c.backedUp < gen {
		return fmt.Errorf("state backup at generation %d, before the %d that removed a table", c.backedUp, gen)
	}
	if ours, err := c.newestIsOurs(ctx); err != nil || !ours {
		return fmt.Errorf("this leader's state backup %s is not the newest in the bucket (%v)", c.backedUpKey, err)
	}
	return nil
}
