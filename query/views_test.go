package query

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/lsm"
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
