package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
)

// refusingBackups is a real store that refuses to put state backups
// while refuse is set.
type refusingBackups struct {
	objstore.Store
	refuse       bool
	refuseDelete bool // and to delete them
}

func (s *refusingBackups) Delete(ctx context.Context, key string) error {
	if s.refuseDelete && strings.HasPrefix(key, StateBackupPrefix) {
		return errors.New("refused")
	}
	return s.Store.Delete(ctx, key)
}

func (s *refusingBackups) Put(ctx context.Context, key string, data []byte) error {
	if s.refuse && strings.HasPrefix(key, StateBackupPrefix) {
		return errors.New("refused")
	}
	return s.Store.Put(ctx, key, data)
}

// stateBackups lists the backups' keys in the store.
func stateBackups(t *testing.T, store objstore.Store) []string {
	t.Helper()
	var keys []string
	if err := store.List(context.Background(), StateBackupPrefix, func(k string, _ int64) error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// Replaced tables are deleted only once a state backup at or past the
// generation that removed them is in the bucket, so the newest backup
// never names a deleted table; a failed backup holds the deletion back;
// each backup deletes the older ones; and a new cluster restored from the
// newest (cluster.Config.Restore) has its manifest and cursors, every
// table it names still in the bucket.
func TestStateBackupBeforeDeletion(t *testing.T) {
	f := newGCFixture(t)
	store := &refusingBackups{Store: f.store, refuse: true}
	f.w.cfg.Store = store
	ctx := context.Background()
	r1, r2 := f.table("r1"), f.table("r2")
	f.served.Store(f.publish([]lsm.Run{r1, r2}, nil))
	c1 := f.table("c1")
	gen := f.publish([]lsm.Run{c1}, []string{"r1", "r2"})
	f.served.Store(gen)
	c := newCollector(f.w)
	c.collect(ctx) // sees the garbage: its grace starts
	time.Sleep(testGrace)
	c.collect(ctx) // due, every member past it, but no backup can be put
	if !f.exists(r1) || !f.exists(r2) || len(f.node.FSM.Garbage()) != 2 {
		t.Fatal("replaced tables deleted without a state backup")
	}
	store.refuse = false
	c.collect(ctx)
	if f.exists(r1) || f.exists(r2) || !f.exists(c1) {
		t.Fatalf("after a backup: r1 %v r2 %v c1 %v", f.exists(r1), f.exists(r2), f.exists(c1))
	}
	keys := stateBackups(t, f.store)
	if len(keys) != 1 {
		t.Fatalf("backups %v; want one", keys)
	}
	if g, ok := parseStateBackupKey(keys[0]); !ok || g < gen {
		t.Fatalf("backup %s: generation %d, want at least %d, the one that removed r1 and r2", keys[0], g, gen)
	}
	m := metricstest.Values(t, f.reg)
	if m["eddy_state_backups_total{result=failed}"] != 1 || m["eddy_state_backups_total{result=ok}"] != 1 || m["eddy_state_backup_generation"] < float64(gen) {
		t.Fatalf("metrics %v", m)
	}

	// A later backup replaces it; the newest names the live tables only,
	// and holds the backfill checkpoint its cursors name.
	const checkpoint = "checkpoints/backfill/0123456789abcdef/00000000000000000003-00000000000000000001.json"
	if err := f.store.Put(ctx, checkpoint, []byte(`{"failed":["did:plc:x"]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.node.Propose(ctx, fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: f.node.FSM.Manifest().Generation},
		Cursors: map[string]string{"jetstream": "1234", "backfill:https://relay" + StateCursorSuffix: checkpoint}, Time: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if err := c.backupState(ctx); err != nil {
		t.Fatal(err)
	}
	keys2 := stateBackups(t, f.store)
	if len(keys2) != 1 || keys2[0] <= keys[0] {
		t.Fatalf("backups %v after %v; want one, newer", keys2, keys)
	}
	key, data, ok, err := NewestStateBackup(ctx, f.store)
	if err != nil || !ok || key != keys2[0] {
		t.Fatalf("newest backup %q %v %v", key, ok, err)
	}
	snap, bm, objects, err := ReadStateBackup(data)
	if err != nil {
		t.Fatal(err)
	}
	if string(objects[checkpoint]) != `{"failed":["did:plc:x"]}` || len(objects) != 1 {
		t.Fatalf("the backup's objects %q; want the backfill checkpoint", objects)
	}
	// The checkpoint gone (its backfill went on): a restore puts it back.
	if err := f.store.Delete(ctx, checkpoint); err != nil {
		t.Fatal(err)
	}
	if n, err := RestoreObjects(ctx, f.store, objects); err != nil || n != 1 {
		t.Fatalf("restore objects: %d, %v", n, err)
	}
	if b, err := f.store.Get(ctx, checkpoint); err != nil || string(b) != `{"failed":["did:plc:x"]}` {
		t.Fatalf("the checkpoint after the restore: %q, %v", b, err)
	}
	if missing, err := MissingTables(ctx, f.store, bm); err != nil || len(missing) != 0 {
		t.Fatalf("the newest backup names missing tables %v (%v)", missing, err)
	}
	var ids []string
	for _, r := range bm.Runs {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"c1"}) {
		t.Fatalf("the backup's runs %v; want c1", ids)
	}
	// A table gone from the bucket: a restore must refuse that backup.
	data1, _ := lsm.TableKeys(c1.Tree, c1.Tables[0].ID)
	if err := f.store.Delete(ctx, data1); err != nil {
		t.Fatal(err)
	}
	if missing, err := MissingTables(ctx, f.store, bm); err != nil || !slices.Equal(missing, []string{data1}) {
		t.Fatalf("missing %v (%v); want %s", missing, err, data1)
	}

	// A cursor naming a checkpoint that is gone for good: backups go on
	// without it.
	if _, err := f.node.Propose(ctx, fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: f.node.FSM.Manifest().Generation},
		Cursors: map[string]string{"backfill:https://old" + StateCursorSuffix: "checkpoints/backfill/gone.json"}, Time: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if err := c.backupState(ctx); err != nil {
		t.Fatalf("a backup with a lost checkpoint: %v", err)
	}
	if _, data, _, err := NewestStateBackup(ctx, f.store); err != nil {
		t.Fatal(err)
	} else if _, _, objs, err := ReadStateBackup(data); err != nil || len(objs) != 1 || objs[checkpoint] == nil {
		t.Fatalf("the backup's objects %q (%v); want the checkpoint still there alone", objs, err)
	}

	// A new cluster from it: one node, leading, with the backup's state.
	dir := t.TempDir()
	if err := cluster.MakeCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MakeNodeCert(dir, "r1", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.Config{ID: "r1", Dir: filepath.Join(dir, "raft"), RaftBind: freeAddr(t), Certs: cluster.Files(dir, "r1"), Restore: snap}
	if has, err := cluster.HasState(cfg.Dir); err != nil || has {
		t.Fatalf("an empty data directory holds state: %v %v", has, err)
	}
	n, err := cluster.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the restored node never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, want := n.FSM.Manifest().Generation, bm.Generation; got != want || n.FSM.Cursor("jetstream") != "1234" {
		t.Fatalf("restored generation %d, cursor %q; want %d, 1234", got, n.FSM.Cursor("jetstream"), want)
	}
	// It goes on: a flush commits on the restored state.
	if _, err := n.Propose(ctx, fsm.TypeFlush, 0, fsm.Flush{Edit: lsm.Edit{Base: n.FSM.Manifest().Generation}, Time: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Its data directory holds state now: a restore there is refused.
	if has, err := cluster.HasState(cfg.Dir); err != nil || !has {
		t.Fatalf("a restored node's data directory holds no state: %v %v", has, err)
	}
	cfg.RaftBind = freeAddr(t)
	if n, err := cluster.Open(cfg); err == nil || !strings.Contains(err.Error(), "already holds Raft state") {
		if n != nil {
			n.Close(ctx)
		}
		t.Fatalf("a restore over existing Raft state: %v; want it refused", err)
	}
}

// putForeignBackup puts, as another history's leader would have, a backup
// of generation gen holding f's state as it is now (its manifest names
// the tables f's manifest names now).
func putForeignBackup(t *testing.T, f *gcFixture, gen uint64) string {
	t.Helper()
	b, err := f.node.FSM.Backup()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(&stateBackupFile{V: 1, Snapshot: b.Snapshot}); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	key := stateBackupKey(gen, time.Now())
	if err := f.store.Put(context.Background(), key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	return key
}

// newestNamesOnlyLive fails t unless the bucket's newest state backup is
// want and names only tables the bucket holds.
func newestNamesOnlyLive(t *testing.T, f *gcFixture, want string) {
	t.Helper()
	ctx := context.Background()
	key, data, ok, err := NewestStateBackup(ctx, f.store)
	if err != nil || !ok {
		t.Fatalf("newest state backup: %v (%v)", ok, err)
	}
	_, m, _, err := ReadStateBackup(data)
	if err != nil {
		t.Fatal(err)
	}
	if missing, err := MissingTables(ctx, f.store, m); err != nil || len(missing) > 0 || key != want {
		t.Fatalf("newest backup %s (want %s) names %d deleted objects (%v): %v", key, want, len(missing), err, missing)
	}
}

// A backup of another history, of a generation past this leader's state
// (a survivor recovered with peers.json after its peers, ahead of it, had
// backed up and were lost), sorts after this leader's backups: the leader
// deletes it before it deletes a table that backup may name, replaced
// tables and orphans alike, so that a restore never reads a backup whose
// tables are gone. (It stayed the newest and named deleted tables.)
func TestStateBackupOfAnotherHistory(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	r1, r2 := f.table("r1"), f.table("r2")
	f.served.Store(f.publish([]lsm.Run{r1, r2}, nil))
	foreign := putForeignBackup(t, f, 1000) // names r1 and r2
	c1 := f.table("c1")
	gen := f.publish([]lsm.Run{c1}, []string{"r1", "r2"})
	f.served.Store(gen)
	c := newCollector(f.w)
	c.collect(ctx)
	time.Sleep(testGrace)
	c.collect(ctx)
	if f.exists(r1) || f.exists(r2) || !f.exists(c1) {
		t.Fatalf("after the grace: r1 %v r2 %v c1 %v", f.exists(r1), f.exists(r2), f.exists(c1))
	}
	if keys := stateBackups(t, f.store); len(keys) != 1 || keys[0] == foreign {
		t.Fatalf("backups %v; want this leader's alone", keys)
	}
	newestNamesOnlyLive(t, f, c.backedUpKey)

	// Once this leader has a backup at the generation it needs (its
	// interval's), another history's that appears after it still goes
	// before a deletion.
	c2 := f.table("c2")
	f.served.Store(f.publish([]lsm.Run{c2}, []string{"c1"}))
	c.collect(ctx)
	if err := c.backupState(ctx); err != nil {
		t.Fatal(err)
	}
	foreign = putForeignBackup(t, f, 2000) // names c1
	time.Sleep(testGrace)
	c.collect(ctx)
	if f.exists(c1) || !f.exists(c2) {
		t.Fatalf("after the grace: c1 %v c2 %v", f.exists(c1), f.exists(c2))
	}
	if keys := stateBackups(t, f.store); len(keys) != 1 || keys[0] == foreign {
		t.Fatalf("backups %v; want this leader's alone", keys)
	}
	newestNamesOnlyLive(t, f, c.backedUpKey)

	// An orphan (here a table uploaded and never published: in the
	// recovered cluster, a table of the lost history's leader, which its
	// backup may name) goes only once this leader's backup is the newest.
	store := &refusingBackups{Store: f.store, refuseDelete: true}
	f.w.cfg.Store = store
	foreign = putForeignBackup(t, f, 3000)
	o := f.table("o")
	if err := c.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testGrace)
	if err := c.sweep(ctx); err == nil || !f.exists(o) {
		t.Fatalf("an orphan deleted (%v) while another history's backup %s, which could not be deleted, was the newest", err, foreign)
	}
	store.refuseDelete = false
	if err := c.sweep(ctx); err != nil || f.exists(o) {
		t.Fatalf("the orphan after the other history's backup went: exists %v (%v)", f.exists(o), err)
	}
	if keys := stateBackups(t, f.store); len(keys) != 1 || keys[0] == foreign {
		t.Fatalf("backups %v; want this leader's alone", keys)
	}
}
