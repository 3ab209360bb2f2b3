package query

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// A did, linkDid or from_dids value that is not a DID matches no link, as
// an unknown DID does (Constellation's reading: an unknown name), rather
// than failing the request: beside a DID that linked, the answer is that
// DID's links; alone, an empty answer, as with an unknown DID.
func TestNotADIDMatchesNothing(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 3; i++ {
		f.write(like(i))
	}
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	f.write("at://did:plc:owner0000000000000000000/app.bsky.graph.listitem/"+tid(1),
		`{"$type":"app.bsky.graph.listitem","list":"`+list+`","subject":"did:plc:member000000000000000000","createdAt":"2026-07-04T14:38:08.999Z"}`)
	f.flush()
	l1, _ := like(1)
	did1 := didOf(l1)
	const unknown = "did:plc:nobodynobodynobodynobody"
	type answer struct {
		Total          uint64            `json:"total"`
		Records        []json.RawMessage `json:"records"`
		LinkingRecords []json.RawMessage `json:"linking_records"`
		Items          []json.RawMessage `json:"items"`
		Counts         []json.RawMessage `json:"counts_by_other_subject"`
		Cursor         *string           `json:"cursor"`
	}
	ask := func(path string, q url.Values) answer {
		t.Helper()
		var out answer
		if code, _ := f.get(path, q, &out); code != 200 {
			t.Fatalf("%s?%s: HTTP %d, want 200", path, q.Encode(), code)
		}
		return out
	}
	bl := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}
	legacy := url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}}
	m2m := url.Values{"subject": {list}, "source": {"app.bsky.graph.listitem:list"}, "pathToOther": {"subject"}}
	with := func(q url.Values, k string, vs ...string) url.Values {
		c := cloneValues(q)
		c[k] = vs
		return c
	}
	for _, bad := range []string{"nope", "at://" + did1, "DID:plc:abc", "did:plc:" + strings.Repeat("a", 2045)} {
		// Beside a DID that linked: that DID's links.
		if out := ask("/xrpc/blue.microcosm.links.getBacklinks", with(bl, "did", bad, did1)); out.Total != 1 || len(out.Records) != 1 {
			t.Fatalf("getBacklinks did=%.40q&did=%s: total %d, %d records, want 1", bad, did1, out.Total, len(out.Records))
		}
		if out := ask("/xrpc/blue.microcosm.links.getBacklinksCount", with(bl, "did", did1, bad)); out.Total != 1 {
			t.Fatalf("getBacklinksCount did=%s&did=%.40q: total %d, want 1", did1, bad, out.Total)
		}
		if out := ask("/links", with(legacy, "from_dids", bad+","+did1)); out.Total != 1 || len(out.LinkingRecords) != 1 {
			t.Fatalf("/links from_dids=%.40q,%s: total %d, %d records, want 1", bad, did1, out.Total, len(out.LinkingRecords))
		}
		// Alone, or with an unknown DID: nothing, as an unknown DID alone.
		for _, vs := range [][]string{{bad}, {bad, unknown}, {unknown}} {
			if out := ask("/xrpc/blue.microcosm.links.getBacklinks", with(bl, "did", vs...)); out.Total != 0 || len(out.Records) != 0 || out.Cursor != nil {
				t.Fatalf("getBacklinks did=%.60q: total %d, %d records, cursor %v, want an empty page", vs, out.Total, len(out.Records), out.Cursor)
			}
			if out := ask("/xrpc/blue.microcosm.links.getBacklinksCount", with(bl, "did", vs...)); out.Total != 0 {
				t.Fatalf("getBacklinksCount did=%.60q: total %d, want 0", vs, out.Total)
			}
			if out := ask("/links", with(legacy, "from_dids", strings.Join(vs, ","))); out.Total != 0 || len(out.LinkingRecords) != 0 || out.Cursor != nil {
				t.Fatalf("/links from_dids=%.60q: total %d, %d records, want an empty page", vs, out.Total, len(out.LinkingRecords))
			}
			if out := ask("/links", with(legacy, "did", vs...)); out.Total != 0 || len(out.LinkingRecords) != 0 {
				t.Fatalf("/links did=%.60q: total %d, want an empty page", vs, out.Total)
			}
			// Many-to-many: a filter naming only unknown accounts matches
			// nothing there too (Eddy's reading, docs/api.md).
			if out := ask("/xrpc/blue.microcosm.links.getManyToMany", with(m2m, "linkDid", vs...)); len(out.Items) != 0 || out.Cursor != nil {
				t.Fatalf("getManyToMany linkDid=%.60q: %d items, want none", vs, len(out.Items))
			}
			if out := ask("/xrpc/blue.microcosm.links.getManyToManyCounts", with(m2m, "did", vs...)); len(out.Counts) != 0 {
				t.Fatalf("getManyToManyCounts did=%.60q: %d groups, want none", vs, len(out.Counts))
			}
		}
	}
	if out := ask("/xrpc/blue.microcosm.links.getManyToMany", with(m2m, "linkDid", "nope", "did:plc:owner0000000000000000000")); len(out.Items) != 1 {
		t.Fatalf("getManyToMany with a linkDid that is not a DID beside the joining account: %d items, want 1", len(out.Items))
	}
	// A value that is not UTF-8 is still refused.
	if code, _, body := f.raw("/xrpc/blue.microcosm.links.getBacklinks", with(bl, "did", "did:plc:\xff").Encode()); code != 400 || !strings.Contains(string(body), `"InvalidRequest"`) {
		t.Fatalf("did not UTF-8: %d %s", code, body)
	}
}

// A ';' in the query string is a character of a value, as in
// Constellation: a URL holding one is asked about as written, not
// refused as a malformed query string.
func TestSemicolonIsACharacter(t *testing.T) {
	f := newFixture(t)
	const target = "https://example.com/a;b=1?x=1;y=2"
	for i := range 2 {
		f.write(fmt.Sprintf("at://did:plc:poster00000000000000000%d/app.bsky.feed.post/%s", i, tid(i)),
			`{"$type":"app.bsky.feed.post","text":"x","embed":{"$type":"app.bsky.embed.external","external":{"uri":"`+target+`","title":"","description":""}},"createdAt":"2026-07-04T14:38:08.999Z"}`)
	}
	f.flush()
	src := "source=app.bsky.feed.post:embed.external.uri"
	var out getBacklinksOut
	code, _, body := f.raw("/xrpc/blue.microcosm.links.getBacklinks", "subject="+target+"&"+src+"&limit=1")
	if err := json.Unmarshal(body, &out); code != 200 || err != nil || out.Total != 2 || len(out.Records) != 1 || out.Cursor == nil {
		t.Fatalf("getBacklinks of a URL with ';' as written: %d %s", code, body)
	}
	// Its cursor pages the same query, the ';' escaped or not.
	code, _, body = f.raw("/xrpc/blue.microcosm.links.getBacklinks", "subject="+url.QueryEscape(target)+"&"+src+"&limit=1&cursor="+*out.Cursor)
	if err := json.Unmarshal(body, &out); code != 200 || err != nil || len(out.Records) != 1 || out.Cursor != nil {
		t.Fatalf("the next page, ';' escaped: %d %s", code, body)
	}
	// Answers naming the subject name it with its ';'.
	code, _, body = f.raw("/xrpc/blue.microcosm.links.getBacklinks", "subject="+target+"&subject="+url.QueryEscape(post)+"&"+src)
	if err := json.Unmarshal(body, &out); code != 200 || err != nil || out.Total != 2 || out.Records[0].Subject != target {
		t.Fatalf("getBacklinks of two subjects, one with ';': %d %s", code, body)
	}
	var n totalOut
	code, _, body = f.raw("/links/count", "target="+target+"&collection=app.bsky.feed.post&path=.embed.external.uri")
	if err := json.Unmarshal(body, &n); code != 200 || err != nil || n.Total != 2 {
		t.Fatalf("/links/count of a URL with ';' as written: %d %s", code, body)
	}
	// A ';' between parameters is not a separator: here it makes the
	// target a URL that nothing links to.
	code, _, body = f.raw("/links/count", "target="+target+";collection=x&collection=app.bsky.feed.post&path=.embed.external.uri")
	if err := json.Unmarshal(body, &n); code != 200 || err != nil || n.Total != 0 {
		t.Fatalf("/links/count with ';' before a parameter: %d %s", code, body)
	}
}

// An empty pathToOther is the path ".", as Constellation reads it (it puts
// a dot before the path), as "collection:" is in source; a missing one is
// still refused.
func TestEmptyPathToOther(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	const other = "did:plc:member000000000000000000"
	f.write("at://did:plc:owner0000000000000000000/com.example.pair/"+tid(1),
		`{"$type":"com.example.pair","list":"`+list+`","":"`+other+`"}`)
	f.flush()
	base := url.Values{"subject": {list}, "source": {"com.example.pair:list"}}
	for _, pto := range []string{"", "."} {
		q := cloneValues(base)
		q.Set("pathToOther", pto)
		var items m2mOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &items); code != 200 || len(items.Items) != 1 || items.Items[0].OtherSubject != other {
			t.Fatalf("getManyToMany pathToOther=%q: %d %+v", pto, code, items)
		}
		var counts m2mCountsOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", q, &counts); code != 200 || len(counts.CountsByOtherSubject) != 1 || counts.CountsByOtherSubject[0].Subject != other {
			t.Fatalf("getManyToManyCounts pathToOther=%q: %d %+v", pto, code, counts)
		}
	}
	var e map[string]string
	if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", base, &e); code != 400 || e["error"] != "InvalidRequest" {
		t.Fatalf("getManyToMany without pathToOther: %d %v", code, e)
	}
}

// did:x and at://did:x are one target: a cursor of either spelling pages
// the other, and answers name it as it was asked (a client matches what it
// asked).
func TestDIDSpellingsOneSubject(t *testing.T) {
	f := newFixture(t)
	const bob = "did:plc:bob00000000000000000000000"
	for i := range 3 {
		f.write(fmt.Sprintf("at://did:plc:fan%020d/app.bsky.graph.follow/%s", i, tid(i)),
			`{"$type":"app.bsky.graph.follow","subject":"`+bob+`","createdAt":"2026-07-04T14:38:08.999Z"}`)
	}
	f.write(like(1))
	f.flush()
	src := "app.bsky.graph.follow:subject"
	spellings := []string{bob, "at://" + bob}
	for _, first := range spellings {
		for _, then := range spellings {
			var p1, p2 getBacklinksOut
			if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {first}, "source": {src}, "limit": {"2"}}, &p1); code != 200 || len(p1.Records) != 2 || p1.Cursor == nil {
				t.Fatalf("getBacklinks subject=%s: %d %+v", first, code, p1)
			}
			if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {then}, "source": {src}, "limit": {"2"}, "cursor": {*p1.Cursor}}, &p2); code != 200 || len(p2.Records) != 1 || p2.Cursor != nil {
				t.Fatalf("getBacklinks subject=%s with the cursor of subject=%s: %d %+v", then, first, code, p2)
			}
			var d1, d2 backlinkDidsOut
			f.get("/xrpc/blue.microcosm.links.getBacklinkDids", url.Values{"subject": {first}, "source": {src}, "limit": {"1"}}, &d1)
			if d1.Cursor == nil {
				t.Fatalf("getBacklinkDids subject=%s: %+v", first, d1)
			}
			if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinkDids", url.Values{"subject": {then}, "source": {src}, "limit": {"1"}, "cursor": {*d1.Cursor}}, &d2); code != 200 || len(d2.LinkingDids) != 1 {
				t.Fatalf("getBacklinkDids subject=%s with the cursor of subject=%s: %d %+v", then, first, code, d2)
			}
			var l1, l2 listBacklinksOut
			f.get("/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {first}, "limit": {"2"}}, &l1)
			if l1.Cursor == nil {
				t.Fatalf("listBacklinks target=%s: %+v", first, l1)
			}
			if code, _ := f.get("/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {then}, "limit": {"2"}, "cursor": {*l1.Cursor}}, &l2); code != 200 || len(l2.Backlinks["$.subject"]) != 1 {
				t.Fatalf("listBacklinks target=%s with the cursor of target=%s: %d %+v", then, first, code, l2)
			}
		}
		var both getBacklinksOut
		q := url.Values{"subject": {first, post}, "source": {src, "app.bsky.feed.like:subject.uri"}}
		if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", q, &both); code != 200 || both.Total != 4 {
			t.Fatalf("getBacklinks of %s and a post: %d %+v", first, code, both)
		}
		for _, r := range both.Records {
			if r.Subject != first && r.Subject != post {
				t.Fatalf("getBacklinks of %s and a post: a record names subject %q, want %s or the post", first, r.Subject, first)
			}
		}
	}
}

// A subject an answer names can be asked about: a URL's normalised form
// longer than a target may be as written (its non-ASCII bytes
// percent-encoded) is taken as it is, up to link.NormBytesMax; a target
// whose normalised form is longer still (an internationalised host's) is
// named as it was asked.
func TestNamedSubjectsAskable(t *testing.T) {
	f := newFixture(t)
	long := "https://example.com/" + strings.Repeat("日", 600) // 1,820 bytes; normalised 5,420
	idn := "http://" + strings.Repeat("㍿.", 500) + "example/" // 2,015 bytes; normalised 9,015
	for i, u := range []string{long, idn} {
		f.write(fmt.Sprintf("at://did:plc:poster00000000000000000%d/app.bsky.feed.post/%s", i, tid(i)),
			`{"$type":"app.bsky.feed.post","text":"x","embed":{"$type":"app.bsky.embed.external","external":{"uri":"`+u+`","title":"","description":""}},"createdAt":"2026-07-04T14:38:08.999Z"}`)
	}
	f.write(like(1))
	f.flush()
	src := []string{"app.bsky.feed.post:embed.external.uri", "app.bsky.feed.like:subject.uri"}
	for _, u := range []string{long, idn} {
		var out getBacklinksOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {u, post}, "source": src}, &out); code != 200 || out.Total != 2 {
			t.Fatalf("getBacklinks of a %d-byte URL and a post: %d %+v", len(u), code, out.Total)
		}
		named := ""
		for _, r := range out.Records {
			if r.Subject != post {
				named = r.Subject
			}
		}
		tg, err := link.ParseTarget(u)
		if err != nil {
			t.Fatal(err)
		}
		want := tg.Norm // 5,420 bytes
		if u == idn {
			want = u // its normal form has 9,015
		}
		if named != want {
			t.Fatalf("the %d-byte URL is named by %d bytes (%.60q…), want %d", len(u), len(named), named, len(want))
		}
		// Asked again by the name the answer gave: the same links, the
		// same cursor.
		var again getBacklinksOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {named, post}, "source": src, "limit": {"1"}}, &again); code != 200 || again.Total != 2 || again.Cursor == nil {
			t.Fatalf("getBacklinks of the %d-byte name an answer gave: %d %+v", len(named), code, again.Total)
		}
		var rest getBacklinksOut
		if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {u, post}, "source": src, "limit": {"1"}, "cursor": {*again.Cursor}}, &rest); code != 200 || len(rest.Records) != 1 {
			t.Fatalf("the next page, asked as first written: %d %+v", code, rest)
		}
		var n totalOut
		if code, _ := f.get("/links/count", url.Values{"target": {named}, "collection": {"app.bsky.feed.post"}, "path": {".embed.external.uri"}}, &n); code != 200 || n.Total != 1 {
			t.Fatalf("/links/count of the %d-byte name: %d %+v", len(named), code, n)
		}
	}
}
