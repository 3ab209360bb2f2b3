package query

import (
	"context"
	"fmt"
	"net/url"
	"testing"
)

// getBacklinks' total of a popular target is counted once per view: the
// pages that follow in the same generation reuse it, and a new generation
// (here, some likes deleted) counts again, never answering an old total.
func TestGetBacklinksTotalPerView(t *testing.T) {
	const n = countCacheMin + 500
	f, uris := fixtureOfLikes(t, n)
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
		v, n := f.qs.totals.len()
		if v == nil {
			return 0, 0
		}
		return v.Generation(), n
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
	for k := range f.qs.totals.m {
		f.qs.totals.m[k] = 12345
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

// getBacklinkDids of a popular subject folds its links once per view: the
// pages that follow in the same generation cut theirs from the kept
// accounts (a planted set is answered), every account once across the
// pages; a new generation folds again, and /links/distinct-dids shares the
// accounts kept.
func TestBacklinkDidsPerView(t *testing.T) {
	const n = countCacheMin + 300
	f, uris := fixtureOfLikes(t, n)
	type page struct {
		Total  int      `json:"total"`
		Dids   []string `json:"linking_dids"`
		Cursor *string  `json:"cursor"`
	}
	params := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"100"}}
	all := func() (dids []string, pages int) {
		t.Helper()
		p := url.Values{}
		for k, vs := range params {
			p[k] = vs
		}
		for {
			var out page
			if st, _ := f.get("/xrpc/blue.microcosm.links.getBacklinkDids", p, &out); st != 200 {
				t.Fatalf("status %d", st)
			}
			dids, pages = append(dids, out.Dids...), pages+1
			if out.Cursor == nil {
				return dids, pages
			}
			p.Set("cursor", *out.Cursor)
		}
	}
	got, pages := all()
	if len(got) != n || pages != (n+99)/100 {
		t.Fatalf("%d accounts in %d pages, want %d", len(got), pages, n)
	}
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d] {
			t.Fatalf("%s twice", d)
		}
		seen[d] = true
	}
	if v, e := f.qs.dids.len(); v == nil || v.Generation() != f.db.View().Generation() || e != 1 {
		t.Fatalf("cache after the pages: %d entries", e)
	}
	// The pages ask the cache: a set planted there is answered.
	f.qs.dids.mu.Lock()
	for k, d := range f.qs.dids.m {
		f.qs.dids.m[k] = d[:3]
	}
	f.qs.dids.mu.Unlock()
	if got, _ := all(); len(got) != 3 {
		t.Fatalf("the pages folded again: %d accounts", len(got))
	}
	var c map[string]int
	cp := url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}}
	if st, _ := f.get("/links/count/distinct-dids", cp, &c); st != 200 || c["total"] != 3 {
		t.Fatalf("/links/count/distinct-dids: %d %v, want the 3 kept", st, c)
	}
	// Delete some likes: a new generation, a new fold.
	for i := range 41 {
		f.write(uris[i*5], "")
	}
	f.flush()
	if got, _ := all(); len(got) != n-41 {
		t.Fatalf("after deletes: %d accounts, want %d", len(got), n-41)
	}
	if st, _ := f.get("/links/count/distinct-dids", cp, &c); st != 200 || c["total"] != n-41 {
		t.Fatalf("/links/count/distinct-dids after deletes: %d %v, want %d", st, c, n-41)
	}
	// A filter of a few sources' accounts (getBacklinksCount's did is no
	// part of getBacklinkDids): a small subject's fold is not kept.
	small := url.Values{"subject": {"at://did:plc:bob/app.bsky.feed.post/3mptbyplj5d2b"}, "source": {"app.bsky.feed.like:subject.uri"}}
	var out page
	if st, _ := f.get("/xrpc/blue.microcosm.links.getBacklinkDids", small, &out); st != 200 || len(out.Dids) != 0 {
		t.Fatalf("a subject without links: %d %v", st, out)
	}
	if _, e := f.qs.dids.len(); e != 1 {
		t.Fatalf("a small fold was kept: %d entries", e)
	}
}

// A viewCache keeps at most its bound, the oldest going first; a newer
// view forgets the older one's values, and an older view's are dropped.
func TestViewCacheBound(t *testing.T) {
	f := newFixture(t)
	f.write(like(1))
	g1 := f.flush()
	v1, err := f.views.WaitFor(context.Background(), g1)
	if err != nil {
		t.Fatal(err)
	}
	f.write(like(2))
	v2, err := f.views.WaitFor(context.Background(), f.flush())
	if err != nil {
		t.Fatal(err)
	}
	c := newViewCache(10, func(d []uint64) int { return len(d) })
	c.put(v2, "a", make([]uint64, 4))
	c.put(v2, "b", make([]uint64, 4))
	c.put(v2, "c", make([]uint64, 4)) // 12 > 10: a goes
	if _, ok := c.get(v2, "a"); ok {
		t.Fatal("the oldest stayed past the bound")
	}
	for _, k := range []string{"b", "c"} {
		if _, ok := c.get(v2, k); !ok {
			t.Fatalf("%s went", k)
		}
	}
	c.put(v2, "b", make([]uint64, 6)) // replaced: 6 + 4 = 10
	if d, ok := c.get(v2, "b"); !ok || len(d) != 6 || c.used != 10 {
		t.Fatalf("replaced b: %d, used %d", len(d), c.used)
	}
	c.put(v2, "big", make([]uint64, 11)) // larger than the bound: not kept, nothing evicted
	if _, ok := c.get(v2, "big"); ok || c.used != 10 {
		t.Fatalf("a value over the bound was kept (used %d)", c.used)
	}
	c.put(v1, "old", make([]uint64, 1)) // an older view: dropped
	if _, ok := c.get(v1, "old"); ok {
		t.Fatal("an older view's value was kept")
	}
	if _, ok := c.get(v2, "c"); !ok {
		t.Fatal("an older view's value evicted the newer view's")
	}
}

// fixtureOfLikes is a fixture holding n likes of post, flushed, and their
// URIs.
func fixtureOfLikes(t *testing.T, n int) (*fixture, []string) {
	f := newFixture(t)
	uris := make([]string, n)
	for i := range n {
		uri, rec := like(i)
		uris[i] = uri
		f.write(uri, rec)
	}
	f.flush()
	return f, uris
}

// The accounts of a subject of many links from few accounts are kept at
// their size, and charged so: the fold's slice keeps the room of every
// link it added (a subject of 4,500 links from one account charged
// 264 bytes for ~40 KB held).
func TestBacklinkDidsKeptAtTheirSize(t *testing.T) {
	f := newFixture(t)
	const n = countCacheMin + 400
	for i := range n {
		f.write(fmt.Sprintf("at://did:plc:bot00000000000000000000000/app.bsky.feed.like/3mptbyp%06d", i),
			`{"$type":"app.bsky.feed.like","subject":{"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza","uri":"`+post+`"},"createdAt":"2026-07-04T14:38:08.999Z"}`)
	}
	f.flush()
	var out struct {
		Dids []string `json:"linking_dids"`
	}
	if st, _ := f.get("/xrpc/blue.microcosm.links.getBacklinkDids", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}, &out); st != 200 || len(out.Dids) != 1 {
		t.Fatalf("%d: %v", st, out.Dids)
	}
	f.qs.dids.mu.Lock()
	defer f.qs.dids.mu.Unlock()
	if len(f.qs.dids.m) != 1 {
		t.Fatalf("%d entries kept", len(f.qs.dids.m))
	}
	for _, d := range f.qs.dids.m {
		if len(d) != 1 || cap(d) > 8 || f.qs.dids.used != 8*cap(d)+didsCacheEntryBytes {
			t.Fatalf("kept %d accounts in room for %d, charged %d", len(d), cap(d), f.qs.dids.used)
		}
	}
}
