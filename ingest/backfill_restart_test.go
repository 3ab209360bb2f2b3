package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
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
	waitFor("the second crawl", func() bool {
		return node.FSM.Cursor(backfillRestartedKey+bf.Name()) == req && Done(node.FSM.Cursor(bf.Name())) &&
			node.FSM.Setting(backfillCompactedKey+bf.Name()) == "restart:"+req && node.FSM.Cursor(bf.Name()+StateCursorSuffix) != key
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

// A restart taken up by a write path that ended before its flush
// published it (a failed flush, leadership lost and won back) is taken up
// again by the next write path: before, the backfill object remembered
// taking it up and the next one went on from the old crawl's end, the
// request never carried out.
func TestBackfillRestartTakenUpAgain(t *testing.T) {
	var lists atomic.Int32
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lists.Add(1)
		fmt.Fprint(w, `{"repos":[]}`)
	}))
	defer relay.Close()
	w, node, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{Relay: relay.URL, NoCompaction: true}
	ctx := context.Background()
	req, err := RequestBackfillRestart(ctx, node, []string{b.Name()})
	if err != nil {
		t.Fatal(err)
	}
	b.restarted.Store(req) // taken up by the last write path, which ended before its flush
	if err := b.Ingest(ctx, w, EOFCursor("old")); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if lists.Load() == 0 || node.FSM.Cursor(backfillRestartedKey+b.Name()) != req {
		t.Fatalf("%d listings, restart mark %q: the request was not carried out", lists.Load(), node.FSM.Cursor(backfillRestartedKey+b.Name()))
	}
}

// A restart asked while a crawl runs stops that crawl's pass (its relay
// here never answers the first listing) and starts the crawl again from
// the first page; only the new crawl's end asks for a full compaction.
// Before, the pass went on to the listing's end first, for days at the
// network's size, and this test waited for ever.
func TestBackfillRestartDuringACrawl(t *testing.T) {
	var lists atomic.Int32
	abandoned := make(chan struct{})
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lists.Add(1) == 1 {
			<-r.Context().Done() // the old crawl's listing: the pass gives it up
			close(abandoned)
			return
		}
		fmt.Fprint(w, `{"repos":[]}`)
	}))
	defer relay.Close()
	w, node, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{Relay: relay.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Ingest(ctx, w, "") }()
	for lists.Load() == 0 { // the first listing waits
		time.Sleep(10 * time.Millisecond)
	}
	req, err := RequestBackfillRestart(ctx, node, []string{b.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-abandoned:
	case <-ctx.Done():
		t.Fatal("the old crawl's listing was never given up")
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := node.FSM.Setting(backfillCompactedKey + b.Name()); got != "restart:"+req || node.FSM.Cursor(backfillRestartedKey+b.Name()) != req || lists.Load() != 2 {
		t.Fatalf("full compaction asked as %q, restart mark %q, %d listings: want the restart %s's, and 2", got, node.FSM.Cursor(backfillRestartedKey+b.Name()), lists.Load(), req)
	}
}

// A crawl after a restart revokes an account the relay lists as gone
// without asking its PDS, which may still serve it (taken down by the
// relay alone): before, it was fetched and its links written back.
func TestRecrawlRevokesAccountsListedGone(t *testing.T) {
	world, dids := carWorld(t)
	var fetched atomic.Int32
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		serveCAR(w, r, world)
	}))
	defer pds.Close()
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"repos":[{"did":%q,"active":false,"status":"takendown"}]}`, dids[0])
	}))
	defer relay.Close()
	w, node, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{Relay: relay.URL, PLC: faultPLC(t, pds.URL), NoCompaction: true}
	b.restarted.Store("r") // a crawl a restart began
	ctx := context.Background()
	if err := b.pass(ctx, w, "", true); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m := node.FSM.Manifest()
	if counts, _ := b.Progress(); fetched.Load() != 0 || counts["gone"] != 1 || len(m.RunsOf(lsm.TreeRevocations)) == 0 || len(m.RunsOf(lsm.TreeLinks)) != 0 {
		t.Fatalf("fetched %d times, counts %v, %d runs of revocations, %d of links", fetched.Load(), counts, len(m.RunsOf(lsm.TreeRevocations)), len(m.RunsOf(lsm.TreeLinks)))
	}
}

// putGate holds back the first Put of a table object until opened, then
// answers as an upload whose request was cancelled meanwhile would.
type putGate struct {
	objstore.Store
	once    sync.Once
	waiting chan struct{} // closed when the first table Put waits
	open    chan struct{}
}

func (s *putGate) Put(ctx context.Context, key string, data []byte) error {
	if strings.HasPrefix(key, "tables/") {
		first := false
		s.once.Do(func() { first = true; close(s.waiting) })
		if first {
			<-s.open
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return s.Store.Put(ctx, key, data)
}

// A restart that stops a pass while one of its repositories' writes
// flushes the memtables leaves that flush to end: the writer lives on, and
// the crawl starts again. Before, the restart's cancel reached the flush's
// upload, the writer stopped, and with it every source of the write path.
func TestBackfillRestartLeavesTheWriterAlive(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 7, Accounts: 6, WebPercent: -1})
	world.Step(4000)
	var repos []string
	for _, a := range world.Accounts() {
		if a.Active() {
			repos = append(repos, fmt.Sprintf(`{"did":%q,"head":"x","rev":"x","active":true}`, a.DID))
		}
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"repos":[%s]}`, strings.Join(repos, ","))
	}))
	defer relay.Close()
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveCAR(w, r, world) }))
	defer pds.Close()
	node := oneNode(t)
	dir, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &putGate{Store: dir, waiting: make(chan struct{}), open: make(chan struct{})}
	w, err := NewWriter(context.Background(), Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), MemtableBytes: 80 << 10, // full past ~16 KB of links: room is kept for a record of extract.LinksPerRecordMax links
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	b := &Backfill{Relay: relay.URL, PLC: faultPLC(t, pds.URL), NoCompaction: true, Concurrency: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Ingest(ctx, w, "") }()
	select {
	case <-store.waiting: // a repository's write is flushing
	case err := <-done:
		t.Fatalf("the crawl ended (%v) without a flush: the memtable is too large for the world", err)
	}
	req, err := RequestBackfillRestart(ctx, node, []string{b.Name()})
	if err != nil {
		t.Fatal(err)
	}
	// The pass is stopped: its watch ends once it has cancelled the pass
	// (before the gate opens, else the flush would not see the cancel).
	waitNoWatch(t, "the restart watch did not stop the pass")
	close(store.open)
	if err := <-done; err != nil {
		t.Fatalf("the crawl after the restart: %v", err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("the writer after the restart: %v", err)
	}
	if got := node.FSM.Cursor(backfillRestartedKey + b.Name()); got != req || !Done(node.FSM.Cursor(b.Name())) {
		t.Fatalf("restart mark %q, cursor %q: want the restart %s carried out and the crawl done", got, node.FSM.Cursor(b.Name()), req)
	}
	// No pass's restart watch outlives it (before, a pass that ended well
	// left its watch polling until the term ended).
	waitNoWatch(t, "a restart watch runs after its crawl ended")
}

// waitNoWatch waits up to 5 s until no pass's restart watch runs, else
// fails with why.
func waitNoWatch(t *testing.T, why string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "watchRestart") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
	}
}
