package query

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// tid returns a valid TID record key that sorts as i (2..31 chars of
// base32-sortable, fixed width).
func tid(i int) string {
	const alphabet = "234567abcdefghijklmnopqrstuvwxyz"
	b := []byte("3mptbyplj5d22")
	for p := len(b) - 1; i > 0 && p > 5; p-- {
		b[p] = alphabet[i%32]
		i /= 32
	}
	return string(b)
}

type rec struct{ DID, Collection, RKey, Subject, Source string }

func recsOf(rs []constellationRecord) []rec {
	out := make([]rec, len(rs))
	for i, r := range rs {
		out[i] = rec{r.DID, r.Collection, r.RKey, r.Subject, r.Source}
	}
	return out
}

// pageAll pages getBacklinks (or /links) to the end and returns the
// records in the order served.
func (f *fixture) pageAll(path string, q url.Values, field string) []rec {
	f.t.Helper()
	var all []rec
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page > 1000 {
			f.t.Fatalf("%s: paging does not end", path)
		}
		var out map[string]any
		if code, _ := f.get(path, q, &out); code != 200 {
			f.t.Fatalf("%s %v: %d %v", path, q, code, out)
		}
		for _, x := range out[field].([]any) {
			m := x.(map[string]any)
			str := func(k string) string { s, _ := m[k].(string); return s }
			r := rec{str("did"), str("collection"), str("rkey"), str("subject"), str("source")}
			k := fmt.Sprint(r)
			if seen[k] {
				f.t.Fatalf("%s: %v served twice", path, r)
			}
			seen[k] = true
			all = append(all, r)
		}
		c, ok := out["cursor"].(string)
		if !ok {
			if out["cursor"] != nil {
				f.t.Fatalf("%s: cursor %v", path, out["cursor"])
			}
			return all
		}
		q = cloneValues(q)
		q.Set("cursor", c)
	}
}

// m2mItems pages getManyToMany to its end (at most 100 pages) and returns
// every item.
func (f *fixture) m2mItems(q url.Values) []m2mItem {
	f.t.Helper()
	q = cloneValues(q)
	var all []m2mItem
	for page := 0; ; page++ {
		if page > 100 {
			f.t.Fatalf("getManyToMany %v: paging does not end", q)
		}
		var out m2mOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &out); code != 200 {
			f.t.Fatalf("getManyToMany %v: %d", q, code)
		}
		all = append(all, out.Items...)
		if out.Cursor == nil {
			return all
		}
		q.Set("cursor", *out.Cursor)
	}
}

// uri is the at-uri of a many-to-many item's join record.
func (it m2mItem) uri() string {
	return "at://" + it.LinkRecord.DID + "/" + it.LinkRecord.Collection + "/" + it.LinkRecord.RKey
}

func cloneValues(q url.Values) url.Values {
	o := url.Values{}
	for k, v := range q {
		o[k] = slices.Clone(v)
	}
	return o
}

// Newest first by default (the linking record's TID), oldest first with
// reverse=true; paging either way returns every live link exactly once,
// and total counts exactly what paging returns.
func TestNewestFirstAndPaging(t *testing.T) {
	f := newFixture(t)
	const n = 57
	var want []rec
	for i := 0; i < n; i++ {
		did := fmt.Sprintf("did:plc:o%023d", (i*7)%n) // accounts not in rkey order
		uri := "at://" + did + "/app.bsky.feed.like/" + tid(i)
		_, body := like(0)
		f.write(uri, body)
		if i%10 == 3 {
			f.write(uri, "") // deleted
			continue
		}
		want = append(want, rec{DID: did, Collection: "app.bsky.feed.like", RKey: tid(i)})
		if i%20 == 0 {
			f.flush() // several runs
		}
	}
	f.flush()
	oldest := slices.Clone(want)
	newest := slices.Clone(want)
	slices.Reverse(newest)
	q := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}
	var page getBacklinksOut
	f.get("/xrpc/blue.microcosm.links.getBacklinks", q, &page)
	if got := recsOf(page.Records); !slices.Equal(got, newest) || page.Total != uint64(len(want)) || page.Cursor != nil {
		t.Fatalf("default page (limit 100): total %d, %d records, cursor %v; want %d newest first:\n got %v\nwant %v", page.Total, len(got), page.Cursor, len(want), got, newest)
	}
	for _, limit := range []string{"1", "7", "46", "1000"} {
		q.Set("limit", limit)
		q.Del("reverse")
		if got := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records"); !slices.Equal(got, newest) {
			t.Fatalf("limit %s, newest first:\n got %v\nwant %v", limit, got, newest)
		}
		q.Set("reverse", "true")
		if got := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records"); !slices.Equal(got, oldest) {
			t.Fatalf("limit %s, reverse:\n got %v\nwant %v", limit, got, oldest)
		}
		lq := url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}, "limit": {limit}}
		if got := f.pageAll("/links", lq, "linking_records"); !slices.Equal(got, newest) {
			t.Fatalf("/links limit %s:\n got %v\nwant %v", limit, got, newest)
		}
	}
	// from_dids (comma-separated, Constellation's older filter) and did.
	pick := []string{want[0].DID, want[3].DID}
	for _, fq := range []url.Values{
		{"from_dids": {pick[0] + ", " + pick[1] + ","}},
		{"did": pick},
	} {
		lq := url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}}
		for k, v := range fq {
			lq[k] = v
		}
		var out linksOut
		f.get("/links", lq, &out)
		if out.Total != 2 || len(out.LinkingRecords) != 2 || !slices.Contains(pick, out.LinkingRecords[0].DID) || !slices.Contains(pick, out.LinkingRecords[1].DID) {
			t.Fatalf("/links %v: %+v", fq, out)
		}
	}
	var cnt totalOut
	f.get("/links/count", url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {"subject.uri"}}, &cnt)
	if cnt.Total != uint64(len(want)) {
		t.Fatalf("/links/count %d, want %d", cnt.Total, len(want))
	}
}

// Non-TID record keys sort as newer than every TID: first by default.
func TestNonTIDKeysSortNewest(t *testing.T) {
	f := newFixture(t)
	_, body := like(0)
	f.write("at://did:plc:a00000000000000000000000/app.bsky.feed.like/"+tid(5), body)
	f.write("at://did:plc:b00000000000000000000000/app.bsky.feed.like/self", body)
	f.write("at://did:plc:c00000000000000000000000/app.bsky.feed.like/"+tid(9), body)
	f.flush()
	var page getBacklinksOut
	f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}, &page)
	var keys []string
	for _, r := range page.Records {
		keys = append(keys, r.RKey)
	}
	if want := []string{"self", tid(9), tid(5)}; !slices.Equal(keys, want) {
		t.Fatalf("order %v, want %v", keys, want)
	}
}

// subject and source repeat: one question over several subjects and
// sources; each record says which subject and source it matched, totals
// add up, and paging merges them exactly once in both directions.
func TestSeveralSubjectsAndSources(t *testing.T) {
	f := newFixture(t)
	const url1, url2 = "https://example.com/story", "https://example.org/other"
	var want []rec
	for i := 0; i < 23; i++ {
		did := fmt.Sprintf("did:plc:s%023d", i)
		uri := "at://" + did + "/app.bsky.feed.post/" + tid(i)
		var body string
		switch i % 4 {
		case 0: // the story as a link card
			body = `{"$type":"app.bsky.feed.post","text":"x","createdAt":"2026-07-04T14:38:08.999Z","embed":{"$type":"app.bsky.embed.external","external":{"uri":"` + url1 + `","title":"t","description":"d"}}}`
			want = append(want, rec{did, "app.bsky.feed.post", tid(i), url1, "app.bsky.feed.post:embed.external.uri"})
		case 1: // the story as a facet link
			body = `{"$type":"app.bsky.feed.post","text":"see x","createdAt":"2026-07-04T14:38:08.999Z","facets":[{"index":{"byteStart":4,"byteEnd":5},"features":[{"$type":"app.bsky.richtext.facet#link","uri":"` + url1 + `"}]}]}`
			want = append(want, rec{did, "app.bsky.feed.post", tid(i), url1, "app.bsky.feed.post:facets[].features[app.bsky.richtext.facet#link].uri"})
		case 2: // both, to two URLs: two links of one record
			body = `{"$type":"app.bsky.feed.post","text":"see x","createdAt":"2026-07-04T14:38:08.999Z","embed":{"$type":"app.bsky.embed.external","external":{"uri":"` + url2 + `","title":"t","description":"d"}},"facets":[{"index":{"byteStart":4,"byteEnd":5},"features":[{"$type":"app.bsky.richtext.facet#link","uri":"` + url1 + `"}]}]}`
			want = append(want, rec{did, "app.bsky.feed.post", tid(i), url1, "app.bsky.feed.post:facets[].features[app.bsky.richtext.facet#link].uri"},
				rec{did, "app.bsky.feed.post", tid(i), url2, "app.bsky.feed.post:embed.external.uri"})
		case 3: // another URL as a facet: not asked about at that source
			body = `{"$type":"app.bsky.feed.post","text":"see x","createdAt":"2026-07-04T14:38:08.999Z","facets":[{"index":{"byteStart":4,"byteEnd":5},"features":[{"$type":"app.bsky.richtext.facet#link","uri":"https://example.net/"}]}]}`
		}
		f.write(uri, body)
	}
	f.flush()
	q := url.Values{
		"subject": {url1, url2},
		"source":  {"app.bsky.feed.post:embed.external.uri", "app.bsky.feed.post:facets[].features[app.bsky.richtext.facet#link].uri"},
	}
	var cnt totalOut
	f.get("/xrpc/blue.microcosm.links.getBacklinksCount", q, &cnt)
	if cnt.Total != uint64(len(want)) {
		t.Fatalf("count %d, want %d", cnt.Total, len(want))
	}
	sortRecs := func(rs []rec) []rec {
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b rec) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		return rs
	}
	for _, limit := range []string{"1", "2", "5", "100"} {
		for _, rev := range []string{"false", "true"} {
			q.Set("limit", limit)
			q.Set("reverse", rev)
			got := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records")
			if !slices.Equal(sortRecs(got), sortRecs(want)) {
				t.Fatalf("limit %s reverse %s:\n got %v\nwant %v", limit, rev, got, want)
			}
			for i := 1; i < len(got); i++ { // by record key, newest first unless reversed
				if c := strings.Compare(got[i-1].RKey, got[i].RKey); (rev == "false" && c < 0) || (rev == "true" && c > 0) {
					t.Fatalf("limit %s reverse %s: %v before %v", limit, rev, got[i-1], got[i])
				}
			}
		}
	}
	// One subject and one source: Constellation's fields only.
	var page map[string]any
	f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {url1}, "source": {"app.bsky.feed.post:embed.external.uri"}}, &page)
	r0 := page["records"].([]any)[0].(map[string]any)
	if len(r0) != 3 {
		t.Fatalf("a single-subject record has fields %v, want did, collection, rkey", r0)
	}
	// The DIDs of several subjects are one set.
	var dids backlinkDidsOut
	f.get("/xrpc/blue.microcosm.links.getBacklinkDids", q, &dids)
	accounts := map[string]bool{}
	for _, r := range want {
		accounts[r.DID] = true
	}
	if dids.Total != len(accounts) || len(dids.LinkingDids) != len(accounts) {
		t.Fatalf("dids %d (%d listed), want %d", dids.Total, len(dids.LinkingDids), len(accounts))
	}
}

// listitem records link a list (.list) and an account (.subject): many
// to many between lists and accounts.
func TestManyToMany(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	type item struct{ uri, did, member string }
	var items []item
	members := map[string]map[string]bool{} // member -> dids listing
	for i := 0; i < 17; i++ {
		by := fmt.Sprintf("did:plc:owner%019d", i%3) // three accounts curate the list
		member := fmt.Sprintf("did:plc:m%023d", i%7)
		uri := "at://" + by + "/app.bsky.graph.listitem/" + tid(i)
		f.write(uri, `{"$type":"app.bsky.graph.listitem","list":"`+list+`","subject":"`+member+`","createdAt":"2026-07-04T14:38:08.999Z"}`)
		if i == 4 {
			f.write(uri, "") // removed from the list
			continue
		}
		items = append(items, item{uri, by, member})
		if members[member] == nil {
			members[member] = map[string]bool{}
		}
		members[member][by] = true
	}
	f.flush()
	base := url.Values{"subject": {list}, "source": {"app.bsky.graph.listitem:list"}, "pathToOther": {"subject"}}
	// Counts per member, over pages of 2 groups.
	q := cloneValues(base)
	q.Set("limit", "2")
	got := map[string][2]uint64{}
	for pages := 0; ; pages++ {
		var out m2mCountsOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", q, &out); code != 200 {
			t.Fatalf("counts: %d", code)
		}
		for _, c := range out.CountsByOtherSubject {
			if _, dup := got[c.Subject]; dup {
				t.Fatalf("group %s twice", c.Subject)
			}
			got[c.Subject] = [2]uint64{c.Total, c.Distinct}
		}
		if out.Cursor == nil {
			break
		}
		q.Set("cursor", *out.Cursor)
	}
	want := map[string][2]uint64{}
	for _, it := range items {
		w := want[it.member]
		w[0]++
		want[it.member] = w
	}
	for m, w := range want {
		w[1] = uint64(len(members[m]))
		want[m] = w
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts\n got %v\nwant %v", got, want)
	}
	// Items: every live list item once, newest first, over pages of 3.
	q = cloneValues(base)
	q.Set("limit", "3")
	var seen []string
	for _, it := range f.m2mItems(q) {
		seen = append(seen, it.uri()+" "+it.OtherSubject)
	}
	var wantItems []string
	for i := len(items) - 1; i >= 0; i-- {
		wantItems = append(wantItems, items[i].uri+" "+items[i].member)
	}
	if !slices.Equal(seen, wantItems) {
		t.Fatalf("items\n got %v\nwant %v", seen, wantItems)
	}
	// Filters: otherSubject and linkDid; an unknown one matches nothing.
	q = cloneValues(base)
	q.Set("otherSubject", items[0].member)
	q.Set("linkDid", items[0].did)
	var out m2mOut
	f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &out)
	for _, it := range out.Items {
		if it.OtherSubject != items[0].member || it.LinkRecord.DID != items[0].did {
			t.Fatalf("filtered item %v", it)
		}
	}
	if len(out.Items) == 0 {
		t.Fatal("filtered: no items")
	}
	q.Set("otherSubject", "did:plc:nobodynobodynobodynobody")
	out = m2mOut{}
	f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &out)
	if len(out.Items) != 0 {
		t.Fatalf("an unknown otherSubject matched %v", out.Items)
	}
}

// A join record linking the subject twice at one path (a strong
// reference's uri and a plain string: two links) is one join record:
// listed once per other subject at every page size, counted once.
func TestManyToManyRecordLinkingTwice(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	const cid = "bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"
	var want []string
	for i := range 3 {
		member := fmt.Sprintf("did:plc:m%023d", i)
		uri := fmt.Sprintf("at://did:plc:joiner%017d/com.example.join/%s", i, tid(i))
		f.write(uri, `{"$type":"com.example.join","items":[{"uri":"`+list+`","cid":"`+cid+`"},{"uri":"`+list+`"}],"member":"`+member+`"}`)
		want = append(want, uri+" "+member)
	}
	f.flush()
	slices.Reverse(want) // newest join record first
	base := url.Values{"subject": {list}, "source": {"com.example.join:items[].uri"}, "pathToOther": {"member"}}
	var bl getBacklinksOut
	f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {list}, "source": {"com.example.join:items[].uri"}}, &bl)
	if bl.Total != 6 {
		t.Fatalf("getBacklinks: total %d, want 6 (two links a record)", bl.Total)
	}
	for _, limit := range []string{"1", "2", "100"} {
		q := cloneValues(base)
		q.Set("limit", limit)
		var seen []string
		for _, it := range f.m2mItems(q) {
			seen = append(seen, it.uri()+" "+it.OtherSubject)
		}
		if !slices.Equal(seen, want) {
			t.Fatalf("getManyToMany limit %s:\n got %v\nwant %v", limit, seen, want)
		}
	}
	var counts m2mCountsOut
	f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", base, &counts)
	if len(counts.CountsByOtherSubject) != 3 {
		t.Fatalf("getManyToManyCounts: %+v, want 3 groups", counts.CountsByOtherSubject)
	}
	for _, c := range counts.CountsByOtherSubject {
		if c.Total != 1 || c.Distinct != 1 {
			t.Fatalf("getManyToManyCounts: %+v, want total 1 and distinct 1 a member", counts.CountsByOtherSubject)
		}
	}
}

// getManyToManyCounts' bound is of join records, not links: records
// that link the subject twice count once toward it.
func TestManyToManyCountsBoundIsOfRecords(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	const cid = "bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"
	write := func(from, to int) {
		for i := from; i < to; i++ {
			f.write(fmt.Sprintf("at://did:plc:joiner%017d/com.example.join/%s", i, tid(i%1000)),
				`{"$type":"com.example.join","items":[{"uri":"`+list+`","cid":"`+cid+`"},{"uri":"`+list+`"}],"member":"did:plc:m00000000000000000000000"}`)
		}
		f.flush()
	}
	q := url.Values{"subject": {list}, "source": {"com.example.join:items[].uri"}, "pathToOther": {"member"}}
	write(0, M2MCountJoinsMax/2+1) // more links than the bound, fewer records
	var counts m2mCountsOut
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", q, &counts); code != 200 ||
		len(counts.CountsByOtherSubject) != 1 || counts.CountsByOtherSubject[0].Total != M2MCountJoinsMax/2+1 {
		t.Fatalf("getManyToManyCounts of %d records linking twice: %d %+v", M2MCountJoinsMax/2+1, code, counts.CountsByOtherSubject)
	}
	write(M2MCountJoinsMax/2+1, M2MCountJoinsMax+1) // more records than the bound
	var tooBig struct{ Error, Message string }
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", q, &tooBig); code != 400 || tooBig.Error != "QueryTooBig" {
		t.Fatalf("getManyToManyCounts of %d records: %d %+v, want 400 QueryTooBig", M2MCountJoinsMax+1, code, tooBig)
	}
}

// Every answer is a JSON body: wrong HTTP methods 405, unknown XRPC
// methods 501, unknown paths 404; GET / answers stats as JSON or a page.
func TestFallbacksAndIndex(t *testing.T) {
	f := newFixture(t)
	f.write(like(1))
	f.flush()
	do := func(method, path, accept string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, f.srv.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, r.Header, string(b)
	}
	for _, c := range []struct {
		method, path string
		code         int
		name         string
	}{
		{"POST", "/xrpc/blue.microcosm.links.getBacklinks", 405, "InvalidRequest"},
		{"DELETE", "/links/all", 405, "InvalidRequest"},
		{"GET", "/xrpc/blue.microcosm.links.getNothing", 501, "MethodNotImplemented"},
		{"POST", "/xrpc/com.atproto.repo.createRecord", 501, "MethodNotImplemented"},
		{"GET", "/nowhere", 404, "NotFound"},
	} {
		code, h, body := do(c.method, c.path, "")
		if code != c.code || h.Get("Content-Type") != "application/json" || !strings.Contains(body, `"error":"`+c.name+`"`) || !strings.Contains(body, `"message":`) {
			t.Errorf("%s %s: %d %q %s", c.method, c.path, code, h.Get("Content-Type"), body)
		}
		if c.code == 405 && h.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q", c.method, c.path, h.Get("Allow"))
		}
	}
	var hello helloOut
	if code, h := f.get("/", nil, &hello); code != 200 || hello.Stats.LinkingRecords != 1 || h.Get("Vary") == "" {
		t.Fatalf("GET /: %d %+v", code, hello)
	}
	for accept, html := range map[string]bool{
		"": false, "*/*": false, "application/json": false, "text/html": true,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": true, "application/json, text/html;q=0.5": false,
	} {
		code, h, body := do("GET", "/", accept)
		isHTML := strings.HasPrefix(h.Get("Content-Type"), "text/html") && strings.Contains(body, "<h1>Eddy</h1>")
		if code != 200 || isHTML != html {
			t.Errorf("GET / Accept %q: %d %q, html %v want %v", accept, code, h.Get("Content-Type"), isHTML, html)
		}
	}
}

// A selective getManyToMany filter pages through a subject's join records
// within the scan budget: pages may be empty but carry a cursor, and every
// matching item comes exactly once.
func TestManyToManyScanBudget(t *testing.T) {
	defer func(n int) { m2mScanMax = n }(m2mScanMax)
	m2mScanMax = 4
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	want := map[string]bool{}
	for i := 0; i < 40; i++ {
		member := fmt.Sprintf("did:plc:m%023d", i%10)
		uri := "at://did:plc:curator00000000000000000/app.bsky.graph.listitem/" + tid(i)
		f.write(uri, `{"$type":"app.bsky.graph.listitem","list":"`+list+`","subject":"`+member+`","createdAt":"2026-07-04T14:38:08.999Z"}`)
		if i%10 == 7 {
			want[uri] = true
		}
	}
	f.flush()
	q := url.Values{"subject": {list}, "source": {"app.bsky.graph.listitem:list"}, "pathToOther": {"subject"},
		"otherSubject": {fmt.Sprintf("did:plc:m%023d", 7)}, "limit": {"100"}} // one page without the budget
	got := map[string]bool{}
	pages, empty := 0, 0
	for pages < 100 {
		pages++
		var out m2mOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &out); code != 200 {
			t.Fatalf("page %d: %d", pages, code)
		}
		if len(out.Items) == 0 {
			empty++
		}
		for _, it := range out.Items {
			k := "at://" + it.LinkRecord.DID + "/" + it.LinkRecord.Collection + "/" + it.LinkRecord.RKey
			if got[k] {
				t.Fatalf("%s twice", k)
			}
			got[k] = true
		}
		if out.Cursor == nil {
			break
		}
		q.Set("cursor", *out.Cursor)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("items %v, want %v", got, want)
	}
	if pages < 3 {
		t.Fatalf("%d pages: the scan budget did not end any page early", pages)
	}
	t.Logf("%d pages (%d empty) for %d items", pages, empty, len(got))
}

// The repeatable filters (did, linkDid, otherSubject) are trimmed of
// spaces and an empty one dropped, as Constellation does: a client that
// sends an unset filter as did= gets no filter, not 400. getBacklinkDids
// takes no did.
func TestEmptyFiltersDropped(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 5; i++ {
		f.write(like(i))
	}
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	for i := 0; i < 4; i++ {
		uri := fmt.Sprintf("at://did:plc:owner%019d/app.bsky.graph.listitem/%s", i%2, tid(i))
		f.write(uri, `{"$type":"app.bsky.graph.listitem","list":"`+list+`","subject":"did:plc:m`+fmt.Sprintf("%023d", i)+`","createdAt":"2026-07-04T14:38:08.999Z"}`)
	}
	f.flush()
	l2, _ := like(2)
	did2 := didOf(l2)
	bl := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}
	totalOf := func(path string, q url.Values) uint64 {
		t.Helper()
		var out struct {
			Total uint64 `json:"total"`
		}
		if code, _ := f.get(path, q, &out); code != 200 {
			t.Fatalf("%s?%s: %d", path, q.Encode(), code)
		}
		return out.Total
	}
	with := func(q url.Values, k string, vs ...string) url.Values {
		c := cloneValues(q)
		c[k] = vs
		return c
	}
	if got := totalOf("/xrpc/blue.microcosm.links.getBacklinks", bl); got != 5 {
		t.Fatalf("getBacklinks: total %d, want 5", got)
	}
	for _, vs := range [][]string{{""}, {" "}, {"", "  "}} {
		if got := totalOf("/xrpc/blue.microcosm.links.getBacklinks", with(bl, "did", vs...)); got != 5 {
			t.Fatalf("getBacklinks with did=%q: total %d, want 5 (no filter)", vs, got)
		}
	}
	if got := totalOf("/xrpc/blue.microcosm.links.getBacklinks", with(bl, "did", " "+did2+" ", "")); got != 1 {
		t.Fatalf("getBacklinks with a padded did and an empty one: total %d, want 1", got)
	}
	legacy := url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}}
	if got := totalOf("/links", with(legacy, "did", "")); got != 5 {
		t.Fatalf("/links with did=: total %d, want 5", got)
	}
	q := with(legacy, "did", "")
	q.Set("from_dids", did2)
	if got := totalOf("/links", q); got != 1 {
		t.Fatalf("/links with did= and from_dids: total %d, want 1", got)
	}
	// An empty from_dids names nobody, as in Constellation (an empty
	// follow list: no likes, not everyone's); a comma-separated list of
	// as many DIDs as did takes repeated is taken, however long.
	for _, fd := range []string{"", ",", " "} {
		if got := totalOf("/links", with(legacy, "from_dids", fd)); got != 0 {
			t.Fatalf("/links with from_dids=%q: total %d, want 0", fd, got)
		}
	}
	many := []string{did2}
	for i := len(many); i < DIDsMax; i++ {
		many = append(many, fmt.Sprintf("did:web:follow-%04d.example.com", i))
	}
	if got := totalOf("/links", with(legacy, "from_dids", strings.Join(many, ","))); got != 1 {
		t.Fatalf("/links with %d DIDs in from_dids: total %d, want 1", len(many), got)
	}
	var tooMany struct{ Error, Message string }
	if code, _ := f.get("/links", with(legacy, "from_dids", strings.Join(append(many, "did:web:one-more.example.com"), ",")), &tooMany); code != 400 || tooMany.Error != "InvalidRequest" {
		t.Fatalf("/links with %d DIDs in from_dids: %d %+v, want 400 InvalidRequest", DIDsMax+1, code, tooMany)
	}
	m2m := url.Values{"subject": {list}, "source": {"app.bsky.graph.listitem:list"}, "pathToOther": {"subject"}}
	var all, empty m2mOut
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", m2m, &all); code != 200 || len(all.Items) != 4 {
		t.Fatalf("getManyToMany: %d, %d items, want 4", code, len(all.Items))
	}
	q = with(with(m2m, "otherSubject", ""), "linkDid", " ")
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &empty); code != 200 || fmt.Sprint(empty.Items) != fmt.Sprint(all.Items) {
		t.Fatalf("getManyToMany with otherSubject= and linkDid=' ': %d, %v, want %v", code, empty.Items, all.Items)
	}
	// getBacklinkDids takes no did (Constellation's does not): one given
	// is ignored, as /links/distinct-dids ignores it.
	var dids, didsFiltered backlinkDidsOut
	f.get("/xrpc/blue.microcosm.links.getBacklinkDids", bl, &dids)
	if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinkDids", with(bl, "did", did2), &didsFiltered); code != 200 ||
		dids.Total != 5 || fmt.Sprint(didsFiltered) != fmt.Sprint(dids) {
		t.Fatalf("getBacklinkDids with a did: %d, %v, want %v (5 accounts)", code, didsFiltered, dids)
	}
	var counts, countsEmpty m2mCountsOut
	f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", m2m, &counts)
	q = with(with(m2m, "otherSubject", ""), "did", "")
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", q, &countsEmpty); code != 200 ||
		len(counts.CountsByOtherSubject) != 4 || fmt.Sprint(countsEmpty) != fmt.Sprint(counts) {
		t.Fatalf("getManyToManyCounts with otherSubject= and did=: %d, %v, want %v", code, countsEmpty, counts)
	}
}

// A link under a record's top-level key "" is at path "."; it can be asked
// about as Constellation's clients ask: source "collection:" (Constellation
// puts a dot before the path) or "collection:.", and /links's path ".".
func TestLinkAtTheRootPath(t *testing.T) {
	f := newFixture(t)
	const uri = "at://did:plc:owner0000000000000000000/com.example.odd/3lmyodd222222"
	f.write(uri, `{"$type":"com.example.odd","":"https://example.com/root"}`)
	f.flush()
	for _, src := range []string{"com.example.odd:", "com.example.odd:."} {
		var out struct {
			Total   uint64 `json:"total"`
			Records []rec  `json:"records"`
		}
		q := url.Values{"subject": {"https://example.com/root"}, "source": {src}}
		if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", q, &out); code != 200 || out.Total != 1 || len(out.Records) != 1 {
			t.Fatalf("source %q: %d, %+v", src, code, out)
		}
	}
	var legacy struct {
		Total uint64 `json:"total"`
	}
	q := url.Values{"target": {"https://example.com/root"}, "collection": {"com.example.odd"}, "path": {"."}}
	if code, _ := f.get("/links", q, &legacy); code != 200 || legacy.Total != 1 {
		t.Fatalf("/links path .: %d, %+v", code, legacy)
	}
}
