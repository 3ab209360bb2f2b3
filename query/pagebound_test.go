package query

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/eddy-backlinks/eddy/lsm"
)

// A page whose filter passes few of a popular target's links reads a
// bounded part of the target (the reader's PageScanMax) and ends short,
// even empty, with a cursor: paging on finds every link that passes, once.
// One request never reads the target whole (a linkDid that never linked:
// the whole target, for an empty answer, outside the large-read bound).
func TestFilteredPagesReadBounded(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	const n = 24_000
	for i := 0; i < n; i++ {
		f.write(like(i))
		uri := fmt.Sprintf("at://did:plc:u%023d/app.bsky.graph.listitem/3lmyitem%05d", i, i)
		f.write(uri, `{"$type":"app.bsky.graph.listitem","list":"`+list+`","subject":"did:plc:m`+fmt.Sprintf("%023d", i%50)+`","createdAt":"2026-07-04T14:38:08.999Z"}`)
	}
	// A known account that links to neither.
	f.write("at://did:plc:nobody000000000000000000/app.bsky.feed.post/3mptbyplj5d2z", `{"$type":"app.bsky.feed.post","text":"x","facets":[{"features":[{"$type":"app.bsky.richtext.facet#link","uri":"https://example.com/x"}],"index":{"byteStart":0,"byteEnd":1}}]}`)
	f.flush()
	f.qs.Reader.PageScanMax = 4_000
	nobody, early, late := "did:plc:nobody000000000000000000", fmt.Sprintf("did:plc:u%023d", 3), fmt.Sprintf("did:plc:u%023d", n-3)

	for _, c := range []struct {
		did  string
		want int
	}{{nobody, 0}, {early, 1}, {late, 1}} {
		q := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "did": {c.did}, "limit": {"10"}}
		for _, reverse := range []string{"false", "true"} {
			q.Set("reverse", reverse)
			if got := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records"); len(got) != c.want {
				t.Fatalf("getBacklinks did=%s reverse=%s: %d records, want %d", c.did, reverse, len(got), c.want)
			}
		}
		// getManyToMany reads newest first: the early account's join record
		// is far off.
		m := url.Values{"subject": {list}, "source": {"app.bsky.graph.listitem:list"}, "pathToOther": {"subject"}, "linkDid": {c.did}, "limit": {"10"}}
		if got := f.m2mItems(m); len(got) != c.want {
			t.Fatalf("getManyToMany linkDid=%s: %d items, want %d", c.did, len(got), c.want)
		}
		var first struct {
			Records []rec   `json:"records"`
			Cursor  *string `json:"cursor"`
		}
		// Oldest first, the late account's link is far off (the early
		// one's is on the first page): the first page is empty, with a
		// cursor.
		if c.did == early {
			continue
		}
		if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", q, &first); code != 200 || len(first.Records) != 0 || first.Cursor == nil {
			t.Fatalf("getBacklinks did=%s, first page: %d, %d records, cursor %v; want an empty page with a cursor", c.did, code, len(first.Records), first.Cursor)
		}
	}
}

// getManyToManyCounts reads the links of at most 100,000 join records, and
// at most lsm.ForwardMax of those links in all (a record may hold 512: a
// few records of many links could otherwise hold gigabytes): past it 400
// QueryTooBig.
func TestManyToManyCountsBoundsTheLinksRead(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	for i := 0; i < 30; i++ {
		f.write(fmt.Sprintf("at://did:plc:joiner%017d/com.example.join/%s", i, tid(i)),
			`{"$type":"com.example.join","list":"`+list+`","members":["did:plc:m00000000000000000000000","did:plc:m00000000000000000000001"]}`)
	}
	f.flush()
	q := url.Values{"subject": {list}, "source": {"com.example.join:list"}, "pathToOther": {"members[]"}}
	var counts m2mCountsOut
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", q, &counts); code != 200 || len(counts.CountsByOtherSubject) != 2 {
		t.Fatalf("getManyToManyCounts: %d %+v", code, counts)
	}
	defer func(n int64) { lsm.ForwardMax = n }(lsm.ForwardMax)
	lsm.ForwardMax = 50 // 30 records of 3 links: 90
	var tooBig struct{ Error, Message string }
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", q, &tooBig); code != 400 || tooBig.Error != "QueryTooBig" {
		t.Fatalf("getManyToManyCounts past the links' bound: %d %+v, want 400 QueryTooBig", code, tooBig)
	}
}

// getManyToMany's budget counts the subject's links read, not the frames
// they sit in: over a subject in several runs, a selective otherSubject
// still pages in a few pages, not one batch a page.
func TestManyToManyBudgetCountsLinksRead(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	for run := 0; run < 6; run++ {
		for i := run * 10; i < run*10+10; i++ {
			uri := fmt.Sprintf("at://did:plc:u%023d/app.bsky.graph.listitem/3lmyitem%05d", i, i)
			f.write(uri, `{"$type":"app.bsky.graph.listitem","list":"`+list+`","subject":"did:plc:m`+fmt.Sprintf("%023d", i%10)+`","createdAt":"2026-07-04T14:38:08.999Z"}`)
		}
		f.flush()
	}
	m := url.Values{"subject": {list}, "source": {"app.bsky.graph.listitem:list"}, "pathToOther": {"subject"},
		"otherSubject": {fmt.Sprintf("did:plc:m%023d", 3)}, "limit": {"5"}}
	pages := 0
	var all []m2mItem
	for {
		var out m2mOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", m, &out); code != 200 {
			t.Fatalf("getManyToMany: %d", code)
		}
		pages++
		all = append(all, out.Items...)
		if out.Cursor == nil {
			break
		}
		m.Set("cursor", *out.Cursor)
	}
	if len(all) != 6 || pages > 2 {
		t.Fatalf("%d items in %d pages; want the 6 in 2", len(all), pages)
	}
}
