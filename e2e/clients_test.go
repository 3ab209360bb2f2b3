package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"
)

// A real node's per-client limits (--client-rate 0.5, --client-burst 20,
// --trusted-proxies 127.0.0.5): a client past its bucket gets 429
// RateLimitExceeded with Retry-After and an XRPC body, another address is
// served meanwhile, X-Forwarded-For from an untrusted peer changes
// nothing (and is counted), a client behind the trusted proxy counts by
// the address it forwards, a page of 1,000 links costs ten queries, and
// the node counts the refusals in eddy_query_client_limited_total.
func TestClientLimitsNode(t *testing.T) {
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	lc := up(t, "--nodes", "1", "--flush-interval", "200ms", "--source", "replay+file://"+src,
		"--node-arg=--client-rate=0.5", "--node-arg=--client-burst=20", "--node-arg=--client-in-flight=16", "--node-arg=--trusted-proxies=127.0.0.5")
	n := lc.Nodes[0]
	q := "http://" + n.HTTP + "/xrpc/blue.cerulea.backlinks.listBacklinks?" + url.Values{"target": {"did:plc:nobody00000000000000000"}}.Encode()
	lc.waitFor(t, "the node answers queries", 30*time.Second, func() error {
		code, _, _, err := askFrom("127.0.0.3", q, nil)
		if err != nil || code != 200 {
			return fmt.Errorf("%d %v", code, err)
		}
		return nil
	})
	// From 127.0.0.2: 20 queries pass, then the bucket is empty.
	ok, limited := 0, 0
	var retry string
	var body map[string]string
	for range 40 {
		code, ra, b, err := askFrom("127.0.0.2", q, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch code {
		case 200:
			ok++
		case 429:
			limited++
			retry = ra
			json.Unmarshal(b, &body)
		default:
			t.Fatalf("query from 127.0.0.2: HTTP %d %s", code, b)
		}
	}
	// The node refills one every two seconds (a refusal takes 250 ms), so
	// one or two more pass while the 40 run.
	if ok < 20 || limited == 0 || retry == "" || body["error"] != "RateLimitExceeded" || body["message"] == "" {
		t.Fatalf("40 queries from one client at rate 0.5, burst 20: %d answered, %d refused (Retry-After %q, %v)", ok, limited, retry, body)
	}
	// Another client is served; 127.0.0.2 naming another address is not
	// (it is no trusted proxy); a client the trusted proxy forwards for is.
	if code, _, b, err := askFrom("127.0.0.4", q, nil); err != nil || code != 200 {
		t.Fatalf("another client while 127.0.0.2 is limited: %d %s %v", code, b, err)
	}
	// Its bucket refills one query every two seconds, so one of five
	// asked back to back (each refusal waits at most 375 ms) may pass; a
	// forwarded address taken on trust would be a fresh client, and all
	// five would.
	passed := 0
	for range 5 {
		code, _, b, err := askFrom("127.0.0.2", q, http.Header{"X-Forwarded-For": {"203.0.113.7"}})
		switch {
		case err != nil || (code != 200 && code != 429):
			t.Fatalf("the limited client forwarding for another address: %d %s %v", code, b, err)
		case code == 200:
			passed++
		}
	}
	if passed > 1 {
		t.Fatalf("the limited client forwarding for another address: %d of 5 answered, want at most the one its own bucket refilled", passed)
	}
	if code, _, b, err := askFrom("127.0.0.5", q, http.Header{"X-Forwarded-For": {"203.0.113.9"}}); err != nil || code != 200 {
		t.Fatalf("a client behind the trusted proxy: %d %s %v", code, b, err)
	}
	// A page of 1,000 links costs ten: a fresh client's burst of 20 pays
	// for two, and the third waits for a refill (20 seconds at 0.5 a
	// second).
	page := q + "&limit=1000"
	var codes []int
	for range 3 {
		code, _, b, err := askFrom("127.0.0.6", page, nil)
		if err != nil {
			t.Fatal(err)
		}
		if code != 200 && code != 429 {
			t.Fatalf("a page of 1,000: HTTP %d %s", code, b)
		}
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("three pages of 1,000 links from a fresh client (burst 20): %v, want [200 200 429]", codes)
	}
	m, err := scrapeMetrics(n.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := family(m, "eddy_query_client_limited_total", `reason="rate"`); v < float64(limited) {
		t.Fatalf("eddy_query_client_limited_total{reason=\"rate\"} = %v, want at least %d", v, limited)
	}
	if v, _ := family(m, "eddy_query_forwarded_untrusted_total"); v < 1 {
		t.Fatalf("eddy_query_forwarded_untrusted_total = %v after a forwarded query from an untrusted peer", v)
	}
	t.Logf("one client at rate 0.5, burst 20: %d of 40 answered, %d refused (Retry-After %s); pages of 1,000: %v", ok, limited, retry, codes)
}

// askFrom asks u from the loopback address from, with extra headers.
func askFrom(from, u string, h http.Header) (code int, retryAfter string, body []byte, err error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, "", nil, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	r, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer r.Body.Close()
	body, err = io.ReadAll(r.Body)
	return r.StatusCode, r.Header.Get("Retry-After"), body, err
}
