package query

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// Any query string on any endpoint gets an answer, never a server error:
// 200 with a JSON body, or 4xx (or 503 for a generation not applied yet)
// with an XRPC error body (an error name and a message). Seeds: a valid query of each endpoint and a few malformed
// ones; make fuzz runs it for FUZZTIME.
func FuzzXRPCParams(f *testing.F) {
	fx := newFixture(f)
	for i := range 30 {
		fx.write(like(i))
		fx.write(like2(i))
	}
	fx.flush()
	fx.qs.MinGenerationWait = 20 * time.Millisecond
	eps := fx.qs.endpoints()
	for i := range eps {
		f.Add(uint8(i), "target="+url.QueryEscape(post)+"&subject="+url.QueryEscape(post)+"&source=app.bsky.feed.like:subject.uri&collection=app.bsky.feed.like&path=.subject.uri&limit=5")
		f.Add(uint8(i), "target="+url.QueryEscape(post)+"&limit=-1&cursor=%ff%fe")
		f.Add(uint8(i), "subject=did:plc:x&source=app.bsky.graph.follow:subject&pathToOther=x&did=did:plc:&minGeneration=99999999999999999999")
		f.Add(uint8(i), "target=&target=a&limit=1000000&reverse=maybe&from_dids=a,b,,c")
	}
	f.Fuzz(func(t *testing.T, ep uint8, q string) {
		path := eps[int(ep)%len(eps)].path
		for i := 0; i < len(q); i++ {
			if q[i] <= ' ' || q[i] >= 0x7f {
				return // a client percent-encodes these; raw, Go's server refuses the request line itself
			}
		}
		req, err := http.NewRequest(http.MethodGet, fx.srv.URL+path+"?"+q, nil)
		if err != nil {
			return // not a URL a client could send
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s?%s: %v", path, q, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s?%s: body: %v", path, q, err)
		}
		var out map[string]any
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatalf("%s?%s: HTTP %d, not JSON: %.200s", path, q, resp.StatusCode, body)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
		case resp.StatusCode >= 400 && resp.StatusCode < 500, resp.StatusCode == http.StatusServiceUnavailable: // 503: a minGeneration not applied yet
			if name, _ := out["error"].(string); name == "" {
				t.Fatalf("%s?%s: HTTP %d without an error name: %.200s", path, q, resp.StatusCode, body)
			}
			if msg, _ := out["message"].(string); msg == "" {
				t.Fatalf("%s?%s: HTTP %d without a message: %.200s", path, q, resp.StatusCode, body)
			}
		default:
			t.Fatalf("%s?%s: HTTP %d: %.200s", path, q, resp.StatusCode, body)
		}
	})
}
