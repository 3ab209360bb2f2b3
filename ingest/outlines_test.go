package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Records of hundreds of made-up field names close to the path limit
// assign megabytes of outlines within one flush, more than one Raft entry
// may carry: they go out in entries of their own ahead of the flush, and
// every link is indexed. (One entry carrying them all was refused, the
// writer started again from the same cursor and made the same flush:
// ingest stalled for good, on every node in turn.)
func TestOutlinesPastOneEntry(t *testing.T) {
	const records, fields = 12, extract.LinksPerRecordMax
	node, store, m := ingestMadeUpFields(t, records, fields, 0)
	if n := node.FSM.OutlineLen(link.OutlinePath); n < records*fields {
		t.Fatalf("%d paths outlined, want at least %d", n, records*fields)
	}
	if got := testutil.ToFloat64(m.OutlineEntries); got < 4 {
		t.Fatalf("%v entries of outlines alone, want the ~5.7 MB of them in at least 4", got)
	}
	checkMadeUpFields(t, node, store, records*fields)
}

// Past PathOutlinesMax paths outlined, new paths are named in the bucket
// (the names tree) instead of the replicated state: it stops growing, and
// every link is indexed under a path that renders.
func TestPathsNamedPastTheBound(t *testing.T) {
	const records, fields, bound = 3, 200, 250
	node, store, _ := ingestMadeUpFields(t, records, fields, bound)
	if n := node.FSM.OutlineLen(link.OutlinePath); n != bound {
		t.Fatalf("%d paths outlined, want the bound, %d", n, bound)
	}
	checkMadeUpFields(t, node, store, records*fields)
}

// ingestMadeUpFields writes, through a replay and the write path, records
// of fields made-up field names close to the path limit, each a link, and
// returns once the replay is read to its end and published.
func ingestMadeUpFields(t *testing.T, records, fields, pathsMax int) (*cluster.Node, objstore.Store, *Metrics) {
	t.Helper()
	pad := strings.Repeat("x", 900)
	var b strings.Builder
	for r := range records {
		kv := make([]string, fields)
		for i := range kv {
			kv[i] = fmt.Sprintf(`"%s%06d_%06d":"https://example.com/"`, pad, r, i)
		}
		fmt.Fprintf(&b, `{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","time_us":%d,"kind":"commit","commit":{"rev":"3jzfcijpj2z2a","operation":"create","collection":"com.example.spam","rkey":"3jzfcijpj2z%02d","record":{%s}}}`+"\n",
			1000+r, r, strings.Join(kv, ","))
	}
	// One flush, whatever the host's load: a replay spread over several
	// would split the outlines between them, fewer entries each.
	node, store, m := ingestCapture(t, b.String(), Config{PathOutlinesMax: pathsMax, FlushInterval: 5 * time.Second})
	if got := testutil.ToFloat64(m.Links); got != float64(records*fields) {
		t.Fatalf("%v links indexed, want %d", got, records*fields)
	}
	return node, store, m
}

// Records in collections past CollectionOutlinesMax have them named in
// the bucket, not outlined: the replicated state stops growing with made-up
// collections, and every record renders and is found by its collection.
func TestCollectionsNamedPastTheBound(t *testing.T) {
	const collections, bound = 20, 5
	var b strings.Builder
	for r := range collections {
		fmt.Fprintf(&b, `{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","time_us":%d,"kind":"commit","commit":{"rev":"3jzfcijpj2z2a","operation":"create","collection":"com.example.c%02d","rkey":"3jzfcijpj2z2a","record":{"url":"https://example.com/"}}}`+"\n", 1000+r, r)
	}
	node, store, _ := ingestCapture(t, b.String(), Config{CollectionOutlinesMax: bound})
	if n := node.FSM.OutlineLen(link.OutlineCollection); n != bound {
		t.Fatalf("%d collections outlined, want the bound, %d", n, bound)
	}
	view, err := lsm.OpenView(context.Background(), lsm.NewCatalog(t.TempDir(), store), node.FSM.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	reader := lsm.NewReader(store, nil)
	codec := &link.Codec{Outlines: node.FSM, Names: lsm.NewNameMap(reader, lsm.Views(func() *lsm.View { return view }), 0)}
	tg, err := link.ParseTarget("https://example.com/")
	if err != nil {
		t.Fatal(err)
	}
	ls, _, err := reader.All(context.Background(), view, codec.TargetKey(&tg), lsm.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, l := range ls {
		uri, err := codec.RenderRecord(l.Source)
		if err != nil {
			t.Fatal(err)
		}
		nsid := strings.Split(uri, "/")[3]
		if c, err := codec.Collection(nsid, false); err != nil || c != l.Source.Collection {
			t.Fatalf("collection %s of %s encodes to %#x (%v), the link's is %#x", nsid, uri, c, err, l.Source.Collection)
		}
		if l.Source.Collection&link.NamedCollectionBit != 0 {
			named++
		}
	}
	if len(ls) != collections || named != collections-bound {
		t.Fatalf("%d links, %d of their collections named; want %d and %d", len(ls), named, collections, collections-bound)
	}
}

// ingestCapture writes a Jetstream capture through a replay and the write
// path, configured by cfg's PathOutlinesMax and CollectionOutlinesMax, and
// returns once it is read to its end and published.
func ingestCapture(t *testing.T, capture string, cfg Config) (*cluster.Node, objstore.Store, *Metrics) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	if err := os.WriteFile(path, []byte(capture), 0o644); err != nil {
		t.Fatal(err)
	}
	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	src := &Replay{Path: path}
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), Metrics: m,
		PathOutlinesMax: cfg.PathOutlinesMax, CollectionOutlinesMax: cfg.CollectionOutlinesMax, FlushInterval: cfg.FlushInterval,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})}, Sources: []Source{src}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for deadline := time.Now().Add(60 * time.Second); !Done(node.FSM.Cursor(src.Name())); {
		select {
		case err := <-done:
			t.Fatalf("the write path ended before the replay's end: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("replay cursor %q after 60 s", node.FSM.Cursor(src.Name()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	return node, store, m
}

// checkMadeUpFields demands that the index hold n links to the records'
// target, each at its own path, which renders to a made-up field's.
func checkMadeUpFields(t *testing.T, node *cluster.Node, store objstore.Store, n int) {
	t.Helper()
	view, err := lsm.OpenView(context.Background(), lsm.NewCatalog(t.TempDir(), store), node.FSM.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	tg, err := link.ParseTarget("https://example.com/")
	if err != nil {
		t.Fatal(err)
	}
	reader := lsm.NewReader(store, nil)
	codec := &link.Codec{Outlines: node.FSM, Names: lsm.NewNameMap(reader, lsm.Views(func() *lsm.View { return view }), 0)}
	ls, _, err := reader.All(context.Background(), view, codec.TargetKey(&tg), lsm.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	for _, l := range ls {
		p, err := codec.RenderLocation(l.Location, link.StyleConstellation)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p, ".xxxx") {
			t.Fatalf("a link at path %q", p)
		}
		paths[p] = true
		// A query names the path: it encodes to the link's location.
		if loc, err := codec.Location(p, false, false); err != nil || loc != l.Location {
			t.Fatalf("path %.20q… encodes to %#x (%v), the link's is %#x", p, loc, err, l.Location)
		}
	}
	if len(ls) != n || len(paths) != n {
		t.Fatalf("%d links to the target at %d paths, want %d at as many", len(ls), len(paths), n)
	}
}

// failPathNames is a names tree whose reads of paths fail (the bucket
// unreachable), its other reads those of the names it wraps.
type failPathNames struct{ link.Names }

func (f failPathNames) Name(kind link.NameKind, v uint64) (string, bool, error) {
	if kind == link.NamePath {
		return "", false, errors.New("bucket unreachable")
	}
	return f.Names.Name(kind, v)
}

// A path not outlined is looked for in the names tree; a read that fails
// there is not the record's fault: the writer stops (its operation is
// applied again by the next), as for a record key's or a DID's name, and
// the link is neither skipped as a bad path nor its cursor published.
// (It was skipped as bad_path and the cursor moved on: the link lost.)
func TestPathNameReadFailureStopsTheWriter(t *testing.T) {
	ctx := context.Background()
	w, node, _, _ := forwardWriter(t)
	w.codec.Names = failPathNames{w.codec.Names}
	op := jsCommit(t, 1_000, "did:plc:aliceaaaaaaaaaaaaaaaaaaa", "create", "app.bsky.feed.like", "3mptbyplj5d8b",
		map[string]any{"subject": strongRef("at://did:plc:bobbbbbbbbbbbbbbbbbbbbbb/app.bsky.feed.post/3mptbyplj5d8b")})
	if err := w.Apply(ctx, "js", "1", &op); !errors.Is(err, ErrWriterFailed) || !errors.Is(err, link.ErrLookup) {
		t.Fatalf("Apply with the names tree unreadable: %v, want the writer failed on a lookup", err)
	}
	if got := testutil.ToFloat64(w.metrics.Skipped.WithLabelValues("js", "bad_path")); got != 0 {
		t.Fatalf("%v links skipped as bad paths", got)
	}
	if err := w.Flush(ctx); err == nil || node.FSM.Cursor("js") != "" {
		t.Fatalf("a failed writer flushed (%v), cursor %q", err, node.FSM.Cursor("js"))
	}
}

// The memtables count as full (a flush first) once the outlines waiting
// for a flush pass pendingOutlineBytesMax, or the cursors
// cursorsPerFlushMax: what keeps a flush within its entries.
func TestRoomBoundsOutlinesAndCursors(t *testing.T) {
	w, _, _, _ := forwardWriter(t)
	full := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.fullLocked()
	}
	if full() {
		t.Fatal("an empty writer is full")
	}
	path := strings.Repeat("p", 1000)
	for i := 0; w.pending.Bytes() <= pendingOutlineBytesMax; i++ {
		if full() {
			t.Fatalf("full at %d bytes of outlines, under %d", w.pending.Bytes(), pendingOutlineBytesMax)
		}
		if _, err := w.pending.Assign(link.OutlinePath, fmt.Sprintf(".%s%08d", path, i)); err != nil {
			t.Fatal(err)
		}
	}
	if !full() {
		t.Fatalf("not full at %d bytes of outlines", w.pending.Bytes())
	}
	w2, _, _, _ := forwardWriter(t)
	w2.mu.Lock()
	for i := range cursorsPerFlushMax + 1 {
		if w2.fullLocked() {
			w2.mu.Unlock()
			t.Fatalf("full at %d cursors", i)
		}
		w2.mu.cursors[fmt.Sprintf("%s%d", ResyncPrefix, i)] = "pending"
	}
	defer w2.mu.Unlock()
	if !w2.fullLocked() {
		t.Fatalf("not full at %d cursors", len(w2.mu.cursors))
	}
}
