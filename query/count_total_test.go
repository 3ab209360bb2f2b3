package query

import (
	"context"
	"net/url"
	"testing"
)

// getBacklinks' total of a popular target is counted once per view: the
// pages that follow in the same generation reuse it, and a new generation
// (here, some likes deleted) counts again, never answering an old total.
func TestGetBacklinksTotalPerView(t *testing.T) {
	f := newFixture(t)
	const n = countCacheMin + 500
	uris := make([]string, n)
	for i := range n {
		uri, rec := like(i)
		uris[i] = uri
		f.write(uri, rec)
	}
	f.flush()
	type page struct {
		Total   uint64 `json:"total"`
		Records []struct {
			DID string `json:"did"`
		} `json:"records"`
		Cursor *string `json:"cursor"`
	}
	params := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"100"}}
	ask := func(p url.Values) page {
		t.Helper()
		var out page
		if st, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", p, &out); st != 200 {
			t.Fatalf("status %d", st)
		}
		return out
	}
	cached := func() (gen uint64, entries int) {
		f.qs.totals.mu.Lock()
		defer f.qs.totals.mu.Unlock()
		if f.qs.totals.view == nil {
			return 0, 0
		}
		return f.qs.totals.view.Generation(), len(f.qs.totals.counts)
	}
	p1 := ask(params)
	if p1.Total != n || len(p1.Records) != 100 || p1.Cursor == nil {
		t.Fatalf("first page: total %d, %d records", p1.Total, len(p1.Records))
	}
	v, err := f.views.WaitFor(context.Background(), f.db.View().Generation())
	if err != nil {
		t.Fatal(err)
	}
	if g, e := cached(); g != v.Generation() || e != 1 {
		t.Fatalf("cache after the first page: generation %d (serving %d), %d entries", g, v.Generation(), e)
	}
	// The next pages: the same total, from the cache (which holds the
	// count the view gives).
	next := url.Values{}
	for k, vs := range params {
		next[k] = vs
	}
	next.Set("cursor", *p1.Cursor)
	if p2 := ask(next); p2.Total != n || len(p2.Records) != 100 || p2.Records[0].DID == p1.Records[0].DID {
		t.Fatalf("second page: total %d, %d records", p2.Total, len(p2.Records))
	}
	// And the page asks the cache: a total planted there is answered.
	f.qs.totals.mu.Lock()
	for k := range f.qs.totals.counts {
		f.qs.totals.counts[k] = 12345
	}
	f.qs.totals.mu.Unlock()
	if p := ask(next); p.Total != 12345 {
		t.Fatalf("the second page counted again: total %d", p.Total)
	}
	// Delete some likes: a new generation, a new total.
	for i := range 37 {
		f.write(uris[i*7], "")
	}
	f.flush()
	if p := ask(params); p.Total != n-37 {
		t.Fatalf("after deletes: total %d, want %d", p.Total, n-37)
	}
	var c map[string]uint64
	if st, _ := f.get("/xrpc/blue.microcosm.links.getBacklinksCount", params, &c); st != 200 || c["total"] != n-37 {
		t.Fatalf("getBacklinksCount: %d %v, want %d", st, c, n-37)
	}
	if g, e := cached(); g != f.db.View().Generation() || e != 1 {
		t.Fatalf("cache after the deletes: generation %d (db at %d), %d entries", g, f.db.View().Generation(), e)
	}
	// A filter of a few DIDs: few candidates, not kept.
	dp := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "did": {didOf(uris[1]), didOf(uris[7])}}
	if p := ask(dp); p.Total != 1 {
		t.Fatalf("two DIDs, one deleted: total %d", p.Total)
	}
	if _, e := cached(); e != 1 {
		t.Fatalf("a small count was kept: %d entries", e)
	}
}
