package ingest

import (
	"context"
	"errors"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
)

// A writer of an earlier term cannot publish after another term's writer
// did: its edit is built on the generation it last saw, not the node's
// current one, so the compare-and-set refuses it whole. Accepted, its
// buffered delete would go in with stamps below the newer writer's create
// of the same record (the deleted link live for good) and its cursor would
// skip past what the newer writer had published.
func TestStaleWriterCannotPublish(t *testing.T) {
	w0, node, store, _ := testWriterOf(t, 1<<20)
	ctx := context.Background()
	did := "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	tgt := "at://did:plc:bbbbbbbbbbbbbbbbbbbbbbbb/app.bsky.feed.post/3jzfcijpj2z2a"
	rec := func() map[string]any {
		return map[string]any{"subject": strongRef(tgt), "createdAt": "2024-01-01T00:00:00Z"}
	}
	// An earlier record of the account: its flush commits the outlines, so
	// that only the generation can tell the two writers apart.
	first := jsCommit(t, 50, did, "create", "app.bsky.feed.like", "3mptbypluud2b", rec())
	if err := w0.Apply(ctx, "jetstream", "50", &first); err != nil {
		t.Fatal(err)
	}
	if err := w0.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	newWriter := func() *Writer {
		w, err := NewWriter(ctx, Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), MemtableBytes: 1 << 20, Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// Term T: writer A buffers a create and its delete.
	wA := newWriter()
	create := jsCommit(t, 100, did, "create", "app.bsky.feed.like", "3mptbypluud2a", rec())
	del := jsCommit(t, 300, did, "delete", "app.bsky.feed.like", "3mptbypluud2a", nil)
	if err := wA.Apply(ctx, "jetstream", "100", &create); err != nil {
		t.Fatal(err)
	}
	if err := wA.Apply(ctx, "jetstream", "300", &del); err != nil {
		t.Fatal(err)
	}
	// Term T+1: writer B resumes from cursor 50, writes the create again at
	// its own (higher) stamps and publishes cursor 200.
	wB := newWriter()
	again := jsCommit(t, 100, did, "create", "app.bsky.feed.like", "3mptbypluud2a", rec())
	if err := wB.Apply(ctx, "jetstream", "200", &again); err != nil {
		t.Fatal(err)
	}
	if err := wB.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	gen := node.FSM.Manifest().Generation
	// Term T+2, on A's node again: A's final flush is refused.
	if err := wA.Flush(ctx); !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("the stale writer's flush: %v, want ErrLeadershipLost", err)
	}
	if g, c := node.FSM.Manifest().Generation, node.FSM.Cursor("jetstream"); g != gen || c != "200" {
		t.Fatalf("after the stale flush: generation %d (want %d), cursor %q (want 200)", g, gen, c)
	}
	// Both likes are live: the delete is replayed from cursor 200.
	tg, err := link.ParseTarget(tgt)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := wB.Codec().TargetKeys(&tg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := lsm.OpenView(ctx, lsm.NewCatalog(t.TempDir(), store), node.FSM.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, k := range keys {
		res, err := lsm.NewReader(store, nil).Backlinks(ctx, v, lsm.Query{Target: k})
		if err != nil {
			t.Fatal(err)
		}
		live += len(res.Links)
	}
	if live != 2 {
		t.Fatalf("%d live links, want 2", live)
	}
	// A stale writer also cannot reserve stamps after another's block.
	wC := newWriter()
	newWriter() // reserves the block after wC's
	wC.mu.Lock()
	wC.mu.clockNext = wC.mu.clockEnd + 1 // its block used up
	_, err = wC.stampLocked(ctx)
	wC.mu.Unlock()
	if !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("a stamp past the block after another writer reserved: %v", err)
	}
}
