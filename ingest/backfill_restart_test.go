package ingest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/hashicorp/go-hclog"
)

// TestBackfillRestartCrawlsAgain: a backfill that is done crawls the
// network again when asked, from the first page with a new checkpoint, and
// the index then equals the network as it is now (records created,
// deleted and accounts gone since the first crawl, which no stream
// followed), every link once; the crawl's end asks for a full compaction
// again.
func TestBackfillRestartCrawlsAgain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	world, sim := servedWorld(t, 11)
	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bf := &Backfill{Relay: sim.RelayURL(), PLC: sim.PLCURL(), DIDWeb: sim.PLCURL()}
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), FlushInterval: 100 * time.Millisecond, MemtableBytes: 1 << 20, GCGrace: time.Nanosecond,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})}, Sources: []Source{bf}, CompactionInterval: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: cursor %q, backfill %v", what, node.FSM.Cursor(bf.Name()), bf.Stats().Snapshot())
			}
		}
	}
	waitFor("the first crawl", func() bool {
		return Done(node.FSM.Cursor(bf.Name())) && node.FSM.Setting(backfillCompactedKey+bf.Name()) != ""
	})
	first, _ := bf.Progress()
	key := node.FSM.Cursor(bf.Name() + StateCursorSuffix)

	// The network goes on, and no stream follows it.
	world.Step(3000)
	req, err := RequestBackfillRestart(ctx, node, []string{bf.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if node.FSM.Setting(backfillCompactedKey+bf.Name()) != "" {
		t.Fatal("the restart left the first crawl's full compaction marked as asked")
	}
	waitFor("the second crawl", func() bool {
		return node.FSM.Cursor(backfillRestartedKey+bf.Name()) == req && Done(node.FSM.Cursor(bf.Name())) &&
			node.FSM.Setting(backfillCompactedKey+bf.Name()) != "" && node.FSM.Cursor(bf.Name()+StateCursorSuffix) != key
	})
	second, _ := bf.Progress()
	t.Logf("first crawl %v, second %v", first, second)
	if second["inactive"] == 0 || second["gone"] != second["inactive"] {
		t.Fatalf("the second crawl met %d accounts gone and revoked %d: the world has none to check, or they were skipped", second["inactive"], second["gone"])
	}
	if second["listed"] != first["listed"] || second["done"] < first["done"]/2 {
		t.Fatalf("the second crawl's checkpoint counts %v, the first's %v: not a crawl from the first page with a new state", second, first)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	compareModel(t, node, store, world)
}

// A leader without a backfill source that crawls (none, or resync_only)
// has nothing to carry a restart out with: the admin API answers 409.
func TestBackfillRestartWithoutBackfill(t *testing.T) {
	node := oneNode(t)
	for _, sources := range [][]Source{nil, {&Backfill{Relay: "https://relay.example", ResyncOnly: true}}} {
		if _, err := AdminBackfillRestart(node, sources)(context.Background()); !errors.Is(err, cluster.ErrNothingToDo) {
			t.Fatalf("sources %v: %v, want ErrNothingToDo", sources, err)
		}
	}
	out, err := AdminBackfillRestart(node, []Source{&Backfill{Relay: "https://relay.example"}})(context.Background())
	if err != nil || node.FSM.Setting(backfillRestartKey+"backfill:https://relay.example") != out["request"] {
		t.Fatalf("%v %v: the request is not the setting", out, err)
	}
}
