package ingest

import (
	"context"
	"errors"
	"testing"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWriterNeverSkipsOnAFailedNameRead: a record key the index named
// ("self") that a new leader cannot read back from the bucket (here its
// names table's data object is gone) fails the operation and stops the
// writer (ErrWriterFailed, wrapping link.ErrLookup): the delete is neither
// skipped as a bad source nor its cursor taken, and the write path starts
// again from the committed state (a new writer, as the supervisor makes),
// which applies it once the names can be read again.
func TestWriterNeverSkipsOnAFailedNameRead(t *testing.T) {
	ctx := context.Background()
	const alice = "did:plc:aliceaaaaaaaaaaaaaaaaaaa"
	profile := jsCommit(t, 1_000, alice, "create", "app.bsky.actor.profile", "self",
		map[string]any{"pinnedPost": strongRef("at://did:plc:bobbbbbbbbbbbbbbbbbbbbbb/app.bsky.feed.post/3mptbyplj5d8b")})
	ln := namesLost(t, &profile)
	store, key, data, m, newWriter := ln.store, ln.key, ln.data, ln.m, ln.newWriter
	w2 := newWriter()
	del := jsCommit(t, 2_000, alice, "delete", "app.bsky.actor.profile", "self", nil)
	err := w2.Apply(ctx, "js", "2", &del)
	if !errors.Is(err, link.ErrLookup) || !errors.Is(err, ErrWriterFailed) {
		t.Fatalf("delete with its name unreadable: %v, want ErrWriterFailed and link.ErrLookup", err)
	}
	if err := w2.Apply(ctx, "js", "2", &del); !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("the failed writer applies again: %v", err)
	}
	if n := testutil.ToFloat64(m.Skipped.WithLabelValues("js", "bad_source")); n != 0 {
		t.Fatalf("%v operations skipped as bad sources", n)
	}
	w2.mu.Lock()
	cursor, revs := w2.mu.cursors["js"], w2.mu.revs.Len()
	w2.mu.Unlock()
	if cursor != "" || revs != 0 {
		t.Fatalf("after the failed delete: cursor %q, %d revocations buffered", cursor, revs)
	}

	if err := store.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	w2 = newWriter()
	if err := w2.Apply(ctx, "js", "2", &del); err != nil {
		t.Fatalf("the delete again, its name readable: %v", err)
	}
	w2.mu.Lock()
	cursor, revs = w2.mu.cursors["js"], w2.mu.revs.Len()
	w2.mu.Unlock()
	if cursor != "2" || revs != 1 {
		t.Fatalf("after the delete: cursor %q, %d revocations buffered", cursor, revs)
	}
}

// TestLostLinksCountedOnce: a record that loses a link (an invalid
// at-uri) and whose hashed targets' names cannot be read (their names
// table's data object gone) fails, to be applied again; what it loses is
// counted when it is applied for good, once, not at each try.
func TestLostLinksCountedOnce(t *testing.T) {
	ctx := context.Background()
	const bob = "did:plc:r2zybk6op3ymzpz6jhqpkoy5"
	urls := []string{"https://example.com/lost/1", "https://example.com/lost/2"}
	first := jsCommit(t, 1_000, bob, "create", "app.bsky.feed.post", "3mptbyplj5d2a", map[string]any{"text": "a", "facets": linkFacets(urls...)})
	ln := namesLost(t, &first)
	store, key, data, m, newWriter := ln.store, ln.key, ln.data, ln.m, ln.newWriter
	rec := map[string]any{"text": "b", "facets": linkFacets(append(urls, "at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/not a key!")...)}
	second := jsCommit(t, 2_000, bob, "create", "app.bsky.feed.post", "3mptbyplj5d3a", rec)
	if err := newWriter().Apply(ctx, "js", "2", &second); !errors.Is(err, link.ErrLookup) {
		t.Fatalf("a record whose targets' names cannot be read: %v, want link.ErrLookup", err)
	}
	if n := testutil.ToFloat64(m.Skipped.WithLabelValues("js", "invalid_link")); n != 0 {
		t.Fatalf("%v links counted lost by a record not applied", n)
	}
	if err := store.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	if err := newWriter().Apply(ctx, "js", "2", &second); err != nil {
		t.Fatalf("the record again, the names readable: %v", err)
	}
	if n := testutil.ToFloat64(m.Skipped.WithLabelValues("js", "invalid_link")); n != 1 {
		t.Fatalf("%v links counted lost, want 1", n)
	}
}

// lostNamesFixture: a writer applied and flushed a record whose strings
// went to the names tree, then that table's data object was deleted
// (data, under key, to put back): a new leader's writers (newWriter,
// nothing cached, sharing the metrics m) cannot read those names.
type lostNamesFixture struct {
	store     objstore.Store
	key       string
	data      []byte
	m         *Metrics
	newWriter func() *Writer
}

func namesLost(t *testing.T, first *event.Op) lostNamesFixture {
	t.Helper()
	ctx := context.Background()
	w, node, store, _ := forwardWriter(t)
	if err := w.Apply(ctx, "js", "1", first); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	runs := node.FSM.Manifest().RunsOf(lsm.TreeNames)
	if len(runs) != 1 {
		t.Fatalf("%d runs of names after the flush, want 1", len(runs))
	}
	f := lostNamesFixture{store: store, key: "tables/names/" + runs[0].Tables[0].ID + ".data", m: NewMetrics()}
	var err error
	if f.data, err = store.Get(ctx, f.key); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, f.key); err != nil {
		t.Fatal(err)
	}
	f.newWriter = func() *Writer {
		w, err := NewWriter(ctx, Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), Metrics: f.m,
			Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	return f
}
