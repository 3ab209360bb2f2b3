package query

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// A subject linked while a part of it was unknown (its collection) is
// stored under its hash, and under its encoding once a record of its
// collection is known and the linking record is written again (a resync).
// getManyToMany and getManyToManyCounts paged one item or group at a time
// across that change give each other subject once: their order and
// cursors do not follow the key a subject is stored under, which would
// move it across the cursor (skipped, or given twice). Eight other
// subjects, so that the hash sorts before the other subject for some and
// after it for others.
func TestManyToManyPagesAcrossAKeyChange(t *testing.T) {
	const (
		list   = "at://did:plc:owner0000000000000000000/app.bsky.graph.list/3l2kmylist22a"
		joiner = "did:plc:joiner000000000000000000"
		join   = "at://" + joiner + "/com.example.join/3lrnqkapcm222"
		y      = "at://did:plc:yauthor000000000000000000/app.bsky.feed.post/3n74wodl22222"
	)
	for i := range 8 {
		x := fmt.Sprintf("at://did:plc:xauthor%018d/com.example.thing/3ke6kg4v2m2%02d", i, 22+i)
		rec := `{"$type":"com.example.join","list":"` + list + `","members":["` + y + `","` + x + `"]}`
		isX := func(s string) bool { return s == x || strings.HasPrefix(s, hashedPrefix) }
		for _, ep := range []string{"getManyToMany", "getManyToManyCounts"} {
			t.Run(fmt.Sprintf("%s/%d", ep, i), func(t *testing.T) {
				f := newFixture(t)
				f.write("at://did:plc:yauthor000000000000000000/app.bsky.feed.post/3n74wodl22222", `{"$type":"app.bsky.feed.post","text":"y"}`)
				f.write(join, rec) // x's collection unknown: x under its hash
				f.flush()
				q := url.Values{"subject": {list}, "source": {"com.example.join:list"}, "pathToOther": {"members[]"}, "limit": {"1"}}
				var names []string
				page := func() {
					t.Helper()
					var out struct {
						Items []struct {
							OtherSubject string `json:"otherSubject"`
						} `json:"items"`
						Counts []struct {
							Subject string `json:"subject"`
						} `json:"counts_by_other_subject"`
						Cursor *string `json:"cursor"`
					}
					if code, _ := f.get("/xrpc/blue.microcosm.links."+ep, q, &out); code != 200 {
						t.Fatalf("code %d", code)
					}
					for _, it := range out.Items {
						names = append(names, it.OtherSubject)
					}
					for _, c := range out.Counts {
						names = append(names, c.Subject)
					}
					q.Del("cursor")
					if out.Cursor != nil {
						q.Set("cursor", *out.Cursor)
					}
				}
				page()
				if len(names) != 1 || q.Get("cursor") == "" {
					t.Fatalf("page 1: %v, cursor %q", names, q.Get("cursor"))
				}
				// x's collection becomes known; the joiner's repository is
				// written again: the record now links x under its encoding.
				f.write(fmt.Sprintf("at://did:plc:xauthor%018d/com.example.thing/3ke6kg4v2m2%02d", i, 22+i), `{"$type":"com.example.thing","ref":"https://example.com/"}`)
				d, err := f.codec.DID(joiner, true)
				if err != nil {
					t.Fatal(err)
				}
				f.stamp++
				if err := f.db.AddRevocation(&link.Revocation{Source: link.RepoID(d), Rev: f.stamp}); err != nil {
					t.Fatal(err)
				}
				f.write(join, rec)
				f.flush()
				for p := 0; q.Get("cursor") != "" && p < 10; p++ {
					page()
				}
				ys, xs := 0, 0
				for _, n := range names {
					switch {
					case n == y:
						ys++
					case isX(n):
						xs++
					}
				}
				if ys != 1 || xs != 1 || len(names) != 2 {
					t.Fatalf("paged across the change: %v; want %s and %s once each", names, y, x)
				}
			})
		}
	}
}
