package query

import (
	"net/url"
	"testing"
)

// Paging every account of a popular subject, a hundred at a time
// (docs/bench.md, "Paging a popular subject's accounts"): 100,000 likes
// of one post from as many accounts, 1,000 pages of getBacklinkDids.
func BenchmarkBacklinkDidsPages(b *testing.B) {
	f := newFixture(b)
	const n = 100_000
	for i := range n {
		f.write(like(i))
	}
	f.flush()
	params := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"100"}}
	b.ResetTimer()
	for range b.N {
		p := url.Values{}
		for k, vs := range params {
			p[k] = vs
		}
		got := 0
		for {
			var out struct {
				Dids   []string `json:"linking_dids"`
				Cursor *string  `json:"cursor"`
			}
			if st, _ := f.get("/xrpc/blue.microcosm.links.getBacklinkDids", p, &out); st != 200 {
				b.Fatalf("status %d", st)
			}
			got += len(out.Dids)
			if out.Cursor == nil {
				break
			}
			p.Set("cursor", *out.Cursor)
		}
		if got != n {
			b.Fatalf("%d accounts, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/(n/100), "µs/page")
}
