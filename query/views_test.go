package query

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A serving node forgets the tables compaction replaced: their local meta
// files go once it serves the generation without them, and the answers
// stay the same.
func TestViewsDropReplacedTables(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < lsm.DefaultCompactionFanIn; i++ {
		f.write(like(i))
		f.flush()
	}
	metas := func() []string {
		t.Helper()
		ms, err := filepath.Glob(filepath.Join(f.catDir, "tables", "links", "*.meta"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range ms {
			ms[i] = filepath.Base(ms[i])
		}
		slices.Sort(ms)
		return ms
	}
	before := metas()
	if len(before) != lsm.DefaultCompactionFanIn {
		t.Fatalf("%d local metas before compaction, want %d", len(before), lsm.DefaultCompactionFanIn)
	}
	q := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}
	var was getBacklinksOut
	f.get("/xrpc/blue.microcosm.links.getBacklinks", q, &was)
	did, err := f.db.Compact(context.Background())
	if err != nil || !did {
		t.Fatalf("compact: %v %v", did, err)
	}
	f.src.notify()
	if _, err := f.views.WaitFor(context.Background(), f.db.View().Generation()); err != nil {
		t.Fatal(err)
	}
	after := metas()
	want := []string{}
	for _, ref := range f.db.View().Manifest.Tables(lsm.TreeLinks) {
		want = append(want, ref.ID+".meta")
	}
	slices.Sort(want)
	if !slices.Equal(after, want) {
		t.Fatalf("local metas after compaction %v, want the compacted run's %v", after, want)
	}
	for _, m := range before {
		if _, err := os.Stat(filepath.Join(f.catDir, "tables", "links", m)); !os.IsNotExist(err) {
			t.Fatalf("replaced table's meta %s still on disk (%v)", m, err)
		}
	}
	var now getBacklinksOut
	f.get("/xrpc/blue.microcosm.links.getBacklinks", q, &now)
	if now.Total != was.Total || len(now.Records) != len(was.Records) || now.Total != uint64(lsm.DefaultCompactionFanIn) {
		t.Fatalf("answers changed: %+v, was %+v", now, was)
	}
}

// scriptedSource serves the manifest a test sets.
type scriptedSource struct {
	mu sync.Mutex
	m  *lsm.Manifest
}

func (s *scriptedSource) Manifest() *lsm.Manifest { s.mu.Lock(); defer s.mu.Unlock(); return s.m }
func (s *scriptedSource) Watch() <-chan struct{}  { return make(chan struct{}) }
func (s *scriptedSource) set(m *lsm.Manifest)     { s.mu.Lock(); s.m = m; s.mu.Unlock() }

// A restarted node replays the log it had at start, whose older manifests
// name tables deleted as garbage since: while Hold says it is replaying,
// no manifest is opened (no table is asked of the store), and the first
// refresh after it opens the newest one.
func TestViewsHoldWhileReplaying(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < lsm.DefaultCompactionFanIn; i++ {
		f.write(like(i))
		f.flush()
	}
	old := f.db.View().Manifest
	if did, err := f.db.Compact(context.Background()); err != nil || !did {
		t.Fatalf("compact: %v %v", did, err)
	}
	newest := f.db.View().Manifest
	// The replaced tables are gone from the store, as the leader's
	// collector leaves them once every node serves past them.
	for _, ref := range old.Tables(lsm.TreeLinks) {
		data, meta := lsm.TableKeys(lsm.TreeLinks, ref.ID)
		for _, k := range []string{data, meta} {
			if err := os.Remove(filepath.Join(f.storeDir, filepath.FromSlash(k))); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
	store, err := local.New(f.storeDir)
	if err != nil {
		t.Fatal(err)
	}
	m := objstore.NewMetrics()
	cs := objstore.Instrument(store, m)
	missing := func() (n float64) { // reads of every kind that found no object
		for _, k := range objstore.Kinds() {
			n += testutil.ToFloat64(m.Errors.WithLabelValues(k.String(), "not_found"))
		}
		return n
	}
	src := &scriptedSource{m: old}
	var replaying atomic.Bool
	replaying.Store(true)
	v := NewViews(src, lsm.NewCatalog(t.TempDir(), cs), nil)
	v.Hold = replaying.Load
	ctx := context.Background()
	v.refresh(ctx)
	if g := v.Current().Generation(); g != 0 || missing() != 0 {
		t.Fatalf("while replaying: serving generation %d, %v reads of missing objects; want 0 and 0", g, missing())
	}
	src.set(newest)
	replaying.Store(false)
	v.refresh(ctx)
	if g := v.Current().Generation(); g != newest.Generation || missing() != 0 {
		t.Fatalf("after the replay: serving generation %d (want %d), %v reads of missing objects (want 0)", g, newest.Generation, missing())
	}
	// What the hold spares: the old manifest opened asks for a table that is gone.
	v2 := NewViews(&scriptedSource{m: old}, lsm.NewCatalog(t.TempDir(), cs), nil)
	v2.refresh(ctx)
	if g := v2.Current().Generation(); g != 0 || missing() == 0 {
		t.Fatalf("unheld, the replayed manifest: serving generation %d, %v reads of missing objects; want 0 and some", g, missing())
	}
}
