package query

import (
	"fmt"
	"math/rand"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// Randomized paging over several subjects and sources (records rewritten,
// several links of one record at one path, several runs), at many limits
// in both directions: every live link exactly once, and total equal to
// what the pages return.
func TestRandomMultiSubjectPaging(t *testing.T) {
	f := newFixture(t)
	urls := []string{"https://a.example/1", "https://b.example/2", "https://c.example/3"}
	rnd := rand.New(rand.NewSource(1))
	type key struct{ did, rkey, sub, src string }
	want := map[key]bool{}
	write := func(i int) {
		did := fmt.Sprintf("did:plc:r%023d", i%5)
		rk := tid(rnd.Intn(40))
		uri := "at://" + did + "/app.bsky.feed.post/" + rk
		// facets to a random subset of urls at one path; embed to one url
		var feats []string
		for _, u := range urls {
			if rnd.Intn(2) == 0 {
				feats = append(feats, `{"$type":"app.bsky.richtext.facet#link","uri":"`+u+`"}`)
			}
		}
		emb := urls[rnd.Intn(3)]
		body := `{"$type":"app.bsky.feed.post","text":"x","createdAt":"2026-07-04T14:38:08.999Z","embed":{"$type":"app.bsky.embed.external","external":{"uri":"` + emb + `","title":"t","description":"d"}},"facets":[{"index":{"byteStart":0,"byteEnd":1},"features":[` + strings.Join(feats, ",") + `]}]}`
		// a record rewritten: drop old keys of it
		for k := range want {
			if k.did == did && k.rkey == rk {
				delete(want, k)
			}
		}
		f.write(uri, "")
		f.write(uri, body)
		for _, u := range urls {
			if strings.Contains(body, `#link","uri":"`+u+`"`) {
				want[key{did, rk, u, "app.bsky.feed.post:facets[].features[app.bsky.richtext.facet#link].uri"}] = true
			}
		}
		want[key{did, rk, emb, "app.bsky.feed.post:embed.external.uri"}] = true
	}
	for i := 0; i < 120; i++ {
		write(i)
		if i%37 == 0 {
			f.flush()
		}
	}
	f.flush()
	q := url.Values{"subject": urls, "source": {"app.bsky.feed.post:embed.external.uri", "app.bsky.feed.post:facets[].features[app.bsky.richtext.facet#link].uri"}}
	for _, limit := range []string{"1", "2", "3", "7", "1000"} {
		for _, rev := range []string{"false", "true"} {
			q.Set("limit", limit)
			q.Set("reverse", rev)
			got := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records")
			gm := map[key]bool{}
			for _, r := range got {
				gm[key{r.DID, r.RKey, r.Subject, r.Source}] = true
			}
			if len(gm) != len(want) || len(got) != len(want) {
				t.Fatalf("limit %s rev %s: got %d (%d distinct) want %d", limit, rev, len(got), len(gm), len(want))
			}
			for k := range want {
				if !gm[k] {
					t.Fatalf("missing %v", k)
				}
			}
			var total map[string]any
			f.get("/xrpc/blue.microcosm.links.getBacklinks", q, &total)
			if uint64(total["total"].(float64)) != uint64(len(want)) {
				t.Fatalf("total %v want %d", total["total"], len(want))
			}
		}
	}
}

// getManyToMany over join records with 0 to 3 other subjects at an array
// path: the same items in the same order whatever the page size (pages cut
// inside a record).
func TestManyToManyPagingAnyLimit(t *testing.T) {
	f := newFixture(t)
	const list = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3lmylist22222"
	for i := 0; i < 20; i++ {
		var ms []string
		n := i % 4 // 0..3 others
		for j := 0; j < n; j++ {
			ms = append(ms, fmt.Sprintf(`"did:plc:m%023d"`, (i+j)%6))
		}
		uri := "at://did:plc:owner0000000000000000000/com.example.join/" + tid(i)
		f.write(uri, `{"$type":"com.example.join","list":"`+list+`","members":[`+strings.Join(ms, ",")+`]}`)
	}
	f.flush()
	base := url.Values{"subject": {list}, "source": {"com.example.join:list"}, "pathToOther": {"members[]"}}
	var ref []string
	for _, limit := range []string{"1000", "1", "2", "3", "5"} {
		q := cloneValues(base)
		q.Set("limit", limit)
		var seen []string
		for p := 0; p < 500; p++ {
			var out m2mOut
			if code, _ := f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &out); code != 200 {
				t.Fatalf("code %d", code)
			}
			for _, x := range out.Items {
				seen = append(seen, x.LinkRecord.RKey+" "+x.OtherSubject)
			}
			if out.Cursor == nil {
				break
			}
			q.Set("cursor", *out.Cursor)
		}
		if ref == nil {
			ref = seen
		} else if !slices.Equal(seen, ref) {
			t.Fatalf("limit %s:\n%v\n%v", limit, seen, ref)
		}
	}
	if len(ref) != 30 { // 5 x (0 + 1 + 2 + 3) other subjects
		t.Fatalf("%d items, want 30", len(ref))
	}
	// pathToOther the source's own path: each join record's other subject is the subject itself.
	q := url.Values{"subject": {list}, "source": {"com.example.join:list"}, "pathToOther": {"list"}}
	var out m2mOut
	f.get("/xrpc/blue.microcosm.links.getManyToMany", q, &out)
	if len(out.Items) != 20 {
		t.Fatalf("pathToOther=list: %d items, want one per join record (20)", len(out.Items))
	}
	for _, it := range out.Items {
		if it.OtherSubject != list {
			t.Fatalf("pathToOther=list: other subject %q, want the list", it.OtherSubject)
		}
	}
}
