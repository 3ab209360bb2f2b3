package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// Every node's data directory lost while the cluster ingests: a node
// started with --restore-from-bucket forms a new cluster from the newest
// state backup the leaders put in the bucket, the other two join it again
// with empty data directories, the stream is read again from the backup's
// cursor, and every node answers every target of the model exactly; the
// tables the dead cluster wrote after the backup are swept as orphans, so
// the bucket comes back to its live tables.
// (Over 120 lines: one scenario, phase after phase.)
func TestRestoreFromBucket(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 31, Accounts: 120})
	world.Step(300)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	backfill := "backfill+" + sim.RelayURL() + "?plc=" + url.QueryEscape(sim.PLCURL()) + "&didweb=" + url.QueryEscape(sim.PLCURL())
	lc := up(t, "--flush-interval", "200ms", "--source", "jetstream+"+sim.JetstreamURL(), "--source", backfill,
		"--node-arg=--gc-grace="+gcGrace.String(), "--node-arg=--compaction-fan-in=2", "--node-arg=--compaction-interval=300ms",
		"--node-arg=--state-backup-interval=2s")
	store, err := local.New(filepath.Join(lc.dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stepDone := stepInBackground(world, 30, 150, 150*time.Millisecond)

	// Mid-stream, with a backup in the bucket and flushes after it, every
	// node is SIGKILLed and its data directory wiped.
	lc.waitFor(t, "a state backup past a few flushes", 30*time.Second, func() error {
		key, _, ok, err := ingest.NewestStateBackup(ctx, store)
		if err == nil && (!ok || key < fmt.Sprintf("%s%020d", ingest.StateBackupPrefix, 4)) {
			err = fmt.Errorf("newest backup %q", key)
		}
		return err
	})
	time.Sleep(time.Second) // flushes after it (backups every 2 s)
	for _, n := range lc.Nodes {
		if err := syscall.Kill(n.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	key, data, ok, err := ingest.NewestStateBackup(ctx, store)
	if err != nil || !ok {
		t.Fatalf("newest backup: %v %v", ok, err)
	}
	snap, bm, _, err := ingest.ReadStateBackup(data)
	if err != nil {
		t.Fatal(err)
	}
	var backed struct {
		Cursors map[string]string `json:"cursors"`
		Garbage []fsm.Garbage     `json:"garbage"`
	}
	if err := json.Unmarshal(snap, &backed); err != nil {
		t.Fatal(err)
	}
	// The tables the dead cluster wrote after the backup: neither in its
	// manifest nor on its garbage list.
	named := map[string]bool{}
	for _, r := range bm.Runs {
		for _, tb := range r.Tables {
			named[tb.ID] = true
		}
	}
	for _, g := range backed.Garbage {
		named[g.ID] = true
	}
	var after []string
	if err := store.List(ctx, "tables/", func(k string, _ int64) error {
		id := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(k), ".data"), ".meta")
		if !named[id] {
			after = append(after, k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(after) == 0 {
		t.Fatal("no table written after the newest backup: the test would prove nothing")
	}
	t.Logf("all nodes killed; the newest backup %s: generation %d, jetstream cursor %q; %d table objects written after it", key, bm.Generation, backed.Cursors["jetstream"], len(after))
	for _, n := range lc.Nodes {
		dir := argValue(n.Args, "--data-dir")
		if dir == "" {
			t.Fatalf("%s: no --data-dir in %v", n.ID, n.Args)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}

	// n1 from the bucket; then the others, with --join as before.
	n1 := lc.Nodes[0]
	n1.Args = append(slices.Clone(n1.Args), "--restore-from-bucket")
	lc.Nodes[0].PID = restart(t, n1)
	var restoredGen uint64
	lc.waitFor(t, "the restored node leads", 30*time.Second, func() error {
		st, err := lc.status(lc.Nodes[0])
		if err != nil {
			return err
		}
		if st.State != "Leader" {
			return fmt.Errorf("n1 is %s", st.State)
		}
		restoredGen = st.Generation
		return nil
	})
	if restoredGen < bm.Generation {
		t.Fatalf("the restored cluster is at generation %d, before the backup's %d: it did not start from it", restoredGen, bm.Generation)
	}
	for i := 1; i < len(lc.Nodes); i++ {
		lc.Nodes[i].PID = restart(t, lc.Nodes[i])
	}
	<-stepDone
	want := fmt.Sprint(world.LastTimeUS())
	lc.waitCaughtUp(t, "backfill done, stream caught up, every node serving it", 120*time.Second, ingestProgress{stream: want}, nil)
	targets, links := lc.assertModel(t, world)
	t.Logf("restored from %s: %d targets, %d links on %d nodes, all equal to the model", key, targets, links, len(lc.Nodes))

	// What the dead cluster wrote after the backup is swept; the bucket
	// holds the live tables and one backup.
	lc.waitFor(t, "the bucket down to the live tables", 60*time.Second, func() error {
		bucket, tables, err := bucketBytes(store)
		if err != nil {
			return err
		}
		live, pending, err := lc.gcLive()
		if err != nil {
			return err
		}
		var backups []string
		if err := store.List(ctx, ingest.StateBackupPrefix, func(k string, _ int64) error {
			backups = append(backups, k)
			return nil
		}); err != nil {
			return err
		}
		for _, k := range after {
			if _, err := store.Size(ctx, k); err == nil {
				return fmt.Errorf("%s, written after the backup, is still there", k)
			}
		}
		if live == 0 || pending > 0 || float64(tables) > 1.1*float64(live) || len(backups) != 1 {
			return fmt.Errorf("bucket %d bytes (tables %d), live tables %d, %v pending, backups %v", bucket, tables, live, pending, backups)
		}
		t.Logf("bucket %d bytes: tables %d, live tables %d (%.3fx), backups %v", bucket, tables, live, float64(tables)/float64(live), backups)
		return nil
	})
	if _, _, missing := gcCounters(t, lc); missing != 0 {
		t.Fatalf("eddy_query_missing_table_total %v", missing)
	}
	// n1 restored, and read the stream again from the backup's cursor.
	b, err := os.ReadFile(n1.Log)
	if err != nil || !strings.Contains(string(b), "restoring the replicated state from the bucket") ||
		!strings.Contains(string(b), "cursor="+backed.Cursors["jetstream"]) {
		t.Fatalf("n1's log does not say it restored and read from cursor %s (%v)", backed.Cursors["jetstream"], err)
	}
}

// argValue returns the value of a flag given as "--name value" in args.
func argValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}
