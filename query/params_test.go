package query

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/lsm"
)

// post2 is a second target, for cursors of another query.
const post2 = "at://did:plc:carol00000000000000000000/app.bsky.feed.post/3mptbyplj5d2c"

func like2(i int) (string, string) {
	return fmt.Sprintf("at://did:plc:v%023d/app.bsky.feed.like/3mptbyplj5d%02d", i, i%100),
		`{"$type":"app.bsky.feed.like","subject":{"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza","uri":"` + post2 + `"},"createdAt":"2026-07-04T14:38:08.999Z"}`
}

// raw sends a query string as given (no re-encoding) and returns the
// status, the headers and the body.
func (f *fixture) raw(path, query string) (int, http.Header, []byte) {
	f.t.Helper()
	r, err := http.Get(f.srv.URL + path + "?" + query)
	if err != nil {
		f.t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.StatusCode, r.Header, b
}

// endpointSpec is an endpoint with a valid query and its documented
// parameters, each with the class of value it takes.
type endpointSpec struct {
	name     string
	path     string
	base     url.Values
	params   map[string]string // parameter -> kind
	required []string
	repeats  []string      // parameters that may be given several times
	cursor   func() string // a cursor this endpoint returned for base
}

// notDIDs are values of did, linkDid and from_dids that are not DIDs:
// each matches no link, as an unknown DID (Constellation's reading).
var notDIDs = []string{
	"nope", "did:", "did:plc:", "DID:plc:abc", "did:plc:abc def", "did:PLC:abc", "did:plc:" + strings.Repeat("a", 2045), "at://did:plc:abc",
}

// badValues per kind: each must get 400 InvalidRequest.
var badValues = map[string][]string{
	"target": {
		"not a link", "at://", "did:", "did:plc:", "https://", "http://", "ftp://exa mple.com/a", "mailto:%zz", "AT://did:plc:abc",
		"http://exa mple.com/", "at://did:plc:abc/not a collection/x", "at://did:plc:abc/app.bsky.feed.post/bad rkey",
		"at://did:plc:abc/app.bsky.feed.post/3mp?x=1", "\xff\xfe", " at://did:plc:abc",
		// Past link.TargetBytesMax and not a normalised form; past
		// link.NormBytesMax.
		"HTTPS://example.com/" + strings.Repeat("a", 2050), "https://example.com/" + strings.Repeat("a", 6200),
	},
	"source": {
		"nocolon", ":subject.uri", "not an nsid:subject.uri", "app..like:subject.uri",
		"app.bsky.feed.like:" + strings.Repeat("a", 1100), "app.bsky.feed.like:" + strings.Repeat(".a", 65), "app.bsky.feed.like:subject\xff", "app.bsky.feed.like",
	},
	"path": {
		strings.Repeat("a", 1100), strings.Repeat(".a", 65), "subject\xff",
	},
	"collection": {
		"not an nsid", "app..like", "a", "app.bsky.feed.like:x", "\xff",
	},
	"did":       {"did:plc:\xff", "\xfe"},
	"limit1000": {"abc", "1.5", "0", "-1", "1001", "99999999999999999999", " 5", "0x10", "1e2", "true"},
	"reverse":   {"maybe", "1", "0", "yes", "TRUE ", "null"},
	"minGen":    {"x", "-1", "1.5", "18446744073709551616", " 1", "0x1", "true"},
	"cursor":    {"garbage!", "AAAA", "%%%", "null", strings.Repeat("A", 60)},
}

// The repeatable filters (did, linkDid, otherSubject) are trimmed and
// their empty values dropped (trimFilters): an otherSubject takes a
// target's bad values but the padded one.
func init() {
	for _, v := range badValues["target"] {
		if strings.TrimSpace(v) == v {
			badValues["otherSubject"] = append(badValues["otherSubject"], v)
		}
	}
}

// pathToOther takes a path's bad values; empty, it is the path "." (as
// in Constellation, which puts a dot before it).
func init() { badValues["pathToOther"] = badValues["path"] }

// kinds of parameters whose empty value means "absent".
var emptyIsAbsent = map[string]bool{"limit1000": true, "reverse": true, "minGen": true, "cursor": true, "did": true, "otherSubject": true}

// (Over 120 lines: table-driven: every endpoint x every parameter x every bad value.)
func TestParamErrors(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 40; i++ {
		f.write(like(i))
		f.write(like2(i))
	}
	gen := f.flush()

	cursorOf := func(path string, q url.Values, field string) func() string {
		return func() string {
			var out map[string]any
			if code, _ := f.get(path, q, &out); code != 200 {
				t.Fatalf("%s %v: %d %v", path, q, code, out)
			}
			c, _ := out[field].(string)
			if c == "" {
				t.Fatalf("%s %v: no cursor in %v", path, q, out)
			}
			return c
		}
	}
	likeSrc := "app.bsky.feed.like:subject.uri"
	specs := []endpointSpec{
		{
			name: "listBacklinks", path: "/xrpc/blue.cerulea.backlinks.listBacklinks",
			base:     url.Values{"target": {post}, "limit": {"5"}},
			params:   map[string]string{"target": "target", "limit": "limit1000", "cursor": "cursor", "minGeneration": "minGen"},
			required: []string{"target"},
		},
		{
			name: "getBacklinks", path: "/xrpc/blue.microcosm.links.getBacklinks",
			base:     url.Values{"subject": {post}, "source": {likeSrc}, "limit": {"5"}},
			params:   map[string]string{"subject": "target", "source": "source", "did": "did", "limit": "limit1000", "cursor": "cursor", "reverse": "reverse", "minGeneration": "minGen"},
			required: []string{"subject", "source"},
			repeats:  []string{"subject", "source", "did"},
		},
		{
			name: "getBacklinksCount", path: "/xrpc/blue.microcosm.links.getBacklinksCount",
			base:     url.Values{"subject": {post}, "source": {likeSrc}},
			params:   map[string]string{"subject": "target", "source": "source", "did": "did", "minGeneration": "minGen"},
			required: []string{"subject", "source"},
			repeats:  []string{"subject", "source", "did"},
		},
		{
			name: "getBacklinkDids", path: "/xrpc/blue.microcosm.links.getBacklinkDids",
			base:     url.Values{"subject": {post}, "source": {likeSrc}, "limit": {"5"}},
			params:   map[string]string{"subject": "target", "source": "source", "limit": "limit1000", "cursor": "cursor", "minGeneration": "minGen"},
			required: []string{"subject", "source"},
			repeats:  []string{"subject", "source"},
		},
		{
			name: "getManyToManyCounts", path: "/xrpc/blue.microcosm.links.getManyToManyCounts",
			base:     url.Values{"subject": {post}, "source": {likeSrc}, "pathToOther": {"subject.uri"}, "limit": {"5"}},
			params:   map[string]string{"subject": "target", "source": "source", "pathToOther": "pathToOther", "did": "did", "otherSubject": "otherSubject", "limit": "limit1000", "cursor": "cursor", "minGeneration": "minGen"},
			required: []string{"subject", "source", "pathToOther"},
			repeats:  []string{"did", "otherSubject"},
		},
		{
			name: "getManyToMany", path: "/xrpc/blue.microcosm.links.getManyToMany",
			base:     url.Values{"subject": {post}, "source": {likeSrc}, "pathToOther": {"subject.uri"}, "limit": {"5"}},
			params:   map[string]string{"subject": "target", "source": "source", "pathToOther": "pathToOther", "linkDid": "did", "otherSubject": "otherSubject", "limit": "limit1000", "cursor": "cursor", "minGeneration": "minGen"},
			required: []string{"subject", "source", "pathToOther"},
			repeats:  []string{"linkDid", "otherSubject"},
		},
		{
			name: "/links", path: "/links",
			base:     url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}, "limit": {"5"}},
			params:   map[string]string{"target": "target", "collection": "collection", "path": "path", "did": "did", "limit": "limit1000", "cursor": "cursor", "reverse": "reverse", "minGeneration": "minGen"},
			required: []string{"target", "collection", "path"},
			repeats:  []string{"did"},
		},
		{
			name: "/links/count", path: "/links/count",
			base:     url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}},
			params:   map[string]string{"target": "target", "collection": "collection", "path": "path", "minGeneration": "minGen"},
			required: []string{"target", "collection", "path"},
		},
		{
			name: "/links/count/distinct-dids", path: "/links/count/distinct-dids",
			base:     url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}},
			params:   map[string]string{"target": "target", "collection": "collection", "path": "path", "minGeneration": "minGen"},
			required: []string{"target", "collection", "path"},
		},
		{
			name: "/links/distinct-dids", path: "/links/distinct-dids",
			base:     url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}, "limit": {"5"}},
			params:   map[string]string{"target": "target", "collection": "collection", "path": "path", "limit": "limit1000", "cursor": "cursor", "minGeneration": "minGen"},
			required: []string{"target", "collection", "path"},
		},
		{
			name: "/links/all", path: "/links/all",
			base:     url.Values{"target": {post}},
			params:   map[string]string{"target": "target", "minGeneration": "minGen"},
			required: []string{"target"},
		},
		{
			name: "/links/all/count", path: "/links/all/count",
			base:     url.Values{"target": {post}},
			params:   map[string]string{"target": "target", "minGeneration": "minGen"},
			required: []string{"target"},
		},
	}
	for i := range specs {
		s := &specs[i]
		// (Every like links one post: getManyToManyCounts has one group, no second page.)
		if _, ok := s.params["cursor"]; ok && s.name != "getManyToManyCounts" {
			s.cursor = cursorOf(s.path, s.base, "cursor")
		}
	}
	with := func(base url.Values, k string, v ...string) url.Values {
		q := url.Values{}
		for kk, vv := range base {
			q[kk] = append([]string(nil), vv...)
		}
		if v == nil {
			delete(q, k)
		} else {
			q[k] = v
		}
		return q
	}
	expect := func(s endpointSpec, what string, q url.Values, code int, errName string) {
		t.Helper()
		status, h, body := f.raw(s.path, q.Encode())
		if status != code {
			t.Errorf("%s %s (%.200s): HTTP %d, want %d: %.300s", s.name, what, q.Encode(), status, code, body)
			return
		}
		if code == 200 {
			if h.Get(GenerationHeader) == "" {
				t.Errorf("%s %s: no %s header", s.name, what, GenerationHeader)
			}
			return
		}
		var e map[string]string
		if err := json.Unmarshal(body, &e); err != nil || e["error"] != errName || e["message"] == "" || len(e) != 2 {
			t.Errorf("%s %s (%.200s): body %.300s, want {\"error\":%q,\"message\":…}", s.name, what, q.Encode(), body, errName)
		}
		if ct := h.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", s.name, what, ct)
		}
	}
	cases := 0
	for _, s := range specs {
		// The controls: the valid query, boundary values and a real cursor
		// answer 200, so each 400 below is the bad value's doing.
		expect(s, "valid", s.base, 200, "")
		expect(s, "unknown parameter (ignored, as Constellation does)", with(s.base, "frobnicate", "1"), 200, "")
		expect(s, "minGeneration served", with(s.base, "minGeneration", strconv.FormatUint(gen, 10)), 200, "")
		for p, kind := range s.params {
			switch kind {
			case "limit1000":
				expect(s, "limit 1", with(s.base, p, "1"), 200, "")
				expect(s, "limit 1000", with(s.base, p, "1000"), 200, "")
			case "reverse":
				expect(s, "reverse true", with(s.base, p, "true"), 200, "")
				expect(s, "reverse false", with(s.base, p, "false"), 200, "")
			case "did":
				l5, _ := like(5)
				expect(s, "a did", with(s.base, p, didOf(l5)), 200, "")
				expect(s, "two dids", with(s.base, p, didOf(l5), "did:plc:nobodynobodynobodynobody"), 200, "")
				for _, v := range notDIDs {
					expect(s, p+"="+fmt.Sprintf("%.40q", v)+" (not a DID: matches nothing)", with(s.base, p, v), 200, "")
				}
			case "cursor":
				if s.cursor != nil {
					expect(s, "its cursor", with(s.base, p, s.cursor()), 200, "")
				}
			}
		}
		// Every bad value of every parameter.
		for p, kind := range s.params {
			for _, v := range badValues[kind] {
				expect(s, p+"="+fmt.Sprintf("%.40q", v), with(s.base, p, v), 400, "InvalidRequest")
				cases++
			}
			switch {
			case kind == "pathToOther":
				expect(s, p+" empty (the path .)", with(s.base, p, ""), 200, "")
			case !emptyIsAbsent[kind]:
				expect(s, p+" empty", with(s.base, p, ""), 400, "InvalidRequest")
				cases++
			}
			if slices.Contains(s.repeats, p) {
				vs := make([]string, 1001)
				for i := range vs {
					vs[i] = s.base.Get(p)
					if vs[i] == "" {
						vs[i] = "did:plc:nobodynobodynobodynobody"
					}
				}
				expect(s, p+" too many times", with(s.base, p, vs...), 400, "InvalidRequest")
				cases++
			} else {
				good := s.base.Get(p)
				if good == "" {
					good = map[string]string{"limit1000": "5", "reverse": "false", "minGen": "0", "cursor": "x"}[kind]
				}
				expect(s, p+" twice", with(s.base, p, good, good), 400, "InvalidRequest")
				cases++
			}
			// Too long for any parameter, and a malformed escape.
			tooLong := paramBytesMax + 1
			if slices.Contains(targetParams[:], p) {
				tooLong = targetParamBytesMax + 1
			}
			expect(s, p+" too long", with(s.base, p, strings.Repeat("a", tooLong)), 400, "InvalidRequest")
			status, _, body := f.raw(s.path, with(s.base, p).Encode()+"&"+p+"=%zz")
			if status != 400 || !strings.Contains(string(body), `"InvalidRequest"`) {
				t.Errorf("%s %s=%%zz: %d %s", s.name, p, status, body)
			}
			cases += 2
		}
		for _, p := range s.required {
			expect(s, "missing "+p, with(s.base, p), 400, "InvalidRequest")
			cases++
		}
		// Cursors: corrupt, forged, of another query, of another endpoint.
		if s.cursor == nil {
			continue
		}
		good := s.cursor()
		raw, err := base64.RawURLEncoding.DecodeString(good)
		if err != nil {
			t.Fatalf("%s cursor %q: %v", s.name, good, err)
		}
		bad := map[string]string{"truncated": good[:len(good)-2], "extended": good + "AA"}
		for i := range raw {
			b := append([]byte(nil), raw...)
			b[i] ^= 0x01
			bad[fmt.Sprintf("bit flipped in byte %d", i)] = base64.RawURLEncoding.EncodeToString(b)
		}
		forged := append([]byte(nil), raw...)
		for i := 2; i < len(forged); i++ {
			forged[i] = byte(i * 37)
		}
		bad["forged"] = base64.RawURLEncoding.EncodeToString(forged)
		other := with(s.base, "")
		for _, k := range []string{"target", "subject"} {
			if other.Get(k) != "" {
				other.Set(k, post2)
			}
		}
		bad["of another target"] = cursorOf(s.path, other, "cursor")()
		for what, c := range bad {
			expect(s, "cursor "+what, with(s.base, "cursor", c), 400, "InvalidRequest")
			cases++
		}
		// The cursor with the target unknown to the index, or with a did
		// filter added (another query).
		unknown := with(s.base, "cursor", good)
		for _, k := range []string{"target", "subject"} {
			if unknown.Get(k) != "" {
				unknown.Set(k, "did:plc:nobodynobodynobodynobody")
			}
		}
		expect(s, "cursor with an unknown target", unknown, 400, "InvalidRequest")
		cases++
		if _, ok := s.params["did"]; ok {
			l5, _ := like(5)
			expect(s, "cursor with a did filter added", with(with(s.base, "cursor", good), "did", didOf(l5)), 400, "InvalidRequest")
			// The same source spelled with its leading dot is the same query.
			expect(s, "cursor with the source's leading dot", with(with(s.base, "cursor", good), "source", "app.bsky.feed.like:.subject.uri"), 200, "")
			expect(s, "cursor in reverse", with(with(s.base, "cursor", good), "reverse", "true"), 400, "InvalidRequest")
			cases += 2
		}
		for _, o := range specs {
			if o.cursor == nil || o.name == s.name {
				continue
			}
			expect(s, "cursor of "+o.name, with(s.base, "cursor", o.cursor()), 400, "InvalidRequest")
			cases++
		}
	}
	t.Logf("%d bad requests answered 400 InvalidRequest", cases)
}

func didOf(uri string) string {
	return strings.SplitN(strings.TrimPrefix(uri, "at://"), "/", 2)[0]
}

// Past ConcurrentQueriesMax queries being answered a node answers 429 at
// once; the queries holding the slots are answered, and the slots come
// back.
func TestConcurrencyBound(t *testing.T) {
	f := newFixture(t)
	f.write(like(1))
	gen := f.flush()
	path := "/xrpc/blue.cerulea.backlinks.listBacklinks"
	plain := url.Values{"target": {post}}.Encode()
	// Each holder takes a slot and is answered once block is closed.
	block := make(chan struct{})
	holding := httptest.NewServer(f.qs.wrap(func(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
		<-block
		return totalOut{1}, nil
	}))
	defer holding.Close()
	type result struct {
		code int
		gen  string
	}
	results := make(chan result, ConcurrentQueriesMax)
	var wg sync.WaitGroup
	for i := 0; i < ConcurrentQueriesMax; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := http.Get(holding.URL + "/hold")
			if err != nil {
				results <- result{code: -1}
				return
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			results <- result{r.StatusCode, r.Header.Get(GenerationHeader)}
		}()
	}
	// Once every slot is held, a query is refused at once.
	deadline := time.Now().Add(45 * time.Second)
	for len(f.qs.sem) < ConcurrentQueriesMax {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d holders hold a slot after 45 s", len(f.qs.sem), ConcurrentQueriesMax)
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, h, body := f.raw(path, plain)
	var e map[string]string
	json.Unmarshal(body, &e)
	if code != http.StatusTooManyRequests || e["error"] != "RateLimitExceeded" || e["message"] == "" || h.Get("Retry-After") == "" {
		t.Fatalf("query past %d in flight: %d %s (Retry-After %q)", ConcurrentQueriesMax, code, body, h.Get("Retry-After"))
	}
	// Every endpoint shares the bound.
	for _, p := range []string{"/xrpc/blue.microcosm.links.getBacklinksCount?subject=" + url.QueryEscape(post) + "&source=app.bsky.feed.like:subject.uri", "/links/all?target=" + url.QueryEscape(post)} {
		r, err := http.Get(f.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s with every slot held: %d", p, r.StatusCode)
		}
	}
	close(block)
	wg.Wait()
	close(results)
	for r := range results {
		if r.code != 200 || r.gen != strconv.FormatUint(gen, 10) {
			t.Errorf("a holder got %d at generation %q", r.code, r.gen)
		}
	}
	// The slots are free again.
	if code, _, body := f.raw(path, plain); code != 200 || len(f.qs.sem) != 0 {
		t.Fatalf("after the holders: %d %s, %d slots held", code, body, len(f.qs.sem))
	}
}

// The largest listBacklinks page (LimitMax links from sources with
// near-maximal DIDs, collections and record keys) stays under
// ResponseBytesMax; a server whose bound is below an answer refuses it with
// 400 QueryTooBig rather than send it.
func TestResponseBound(t *testing.T) {
	f := newFixture(t)
	label := strings.Repeat("a", 62)
	did := "did:web:" + strings.Repeat(label+".", 30) + "example.com" // ~1.9 KiB
	coll := "com." + strings.Repeat(label+".", 4) + "like"            // 4 + 4*63 + 4 = 260 B
	target := "at://did:plc:dave000000000000000000000/app.bsky.feed.post/3mptbyplj5d2d"
	rec := `{"$type":"` + coll + `","subject":{"uri":"` + target + `","cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"}}`
	for i := 0; i < LimitMax; i++ {
		rkey := fmt.Sprintf("%04d", i) + strings.Repeat("k", 508)
		f.write(fmt.Sprintf("at://%s%d/%s/%s", did[:len(did)-1], i%10, coll, rkey), rec)
	}
	f.flush()
	q := url.Values{"target": {target}, "limit": {strconv.Itoa(LimitMax)}}.Encode()
	code, _, body := f.raw("/xrpc/blue.cerulea.backlinks.listBacklinks", q)
	if code != 200 {
		t.Fatalf("%d %s", code, body[:min(len(body), 300)])
	}
	var out listBacklinksOut
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range out.Backlinks {
		n += len(s)
	}
	if n != LimitMax || out.Cursor != nil {
		t.Fatalf("%d links, cursor %v", n, out.Cursor)
	}
	t.Logf("the largest page: %d links, %d bytes (bound %d)", n, len(body), ResponseBytesMax)
	if len(body) > ResponseBytesMax || len(body) < 2<<20 {
		t.Fatalf("%d bytes: want a page near the worst case, within %d", len(body), ResponseBytesMax)
	}
	// The bound is enforced: at exactly the answer's size it is sent, one
	// byte below it is refused.
	f.qs.ResponseBytesMax = len(body)
	if code, _, b := f.raw("/xrpc/blue.cerulea.backlinks.listBacklinks", q); code != 200 || len(b) != len(body) {
		t.Fatalf("at the bound: %d, %d bytes", code, len(b))
	}
	f.qs.ResponseBytesMax = len(body) - 1
	code, _, b := f.raw("/xrpc/blue.cerulea.backlinks.listBacklinks", q)
	var e map[string]string
	if json.Unmarshal(b, &e); code != 400 || e["error"] != "QueryTooBig" || e["message"] == "" {
		t.Fatalf("past the bound: %d %.300s", code, b)
	}
}

// /links/all answers at most LinksAllEntriesMax collection and path pairs;
// past them it refuses with 400 QueryTooBig rather than grow without bound.
func TestLinksAllBound(t *testing.T) {
	f := newFixture(t)
	target := "at://did:plc:erin0000000000000000000000/app.bsky.feed.post/3mptbyplj5d2e"
	// Records of one collection, each linking from 250 distinct keys.
	write := func(from, to int) {
		for r := from; r < to; r += 250 {
			var b strings.Builder
			b.WriteString(`{"$type":"app.test.many"`)
			for k := r; k < min(r+250, to); k++ {
				fmt.Fprintf(&b, `,"k%04d":%q`, k, target)
			}
			b.WriteString("}")
			f.write(fmt.Sprintf("at://did:plc:erin0000000000000000000000/app.test.many/r%04d", r), b.String())
		}
		f.flush()
	}
	q := url.Values{"target": {target}}
	write(0, LinksAllEntriesMax)
	var out map[string]map[string]map[string]pathCounts
	if code, _ := f.get("/links/all", q, &out); code != 200 || len(out["links"]["app.test.many"]) != LinksAllEntriesMax {
		t.Fatalf("%d pairs: %d, %d answered", LinksAllEntriesMax, code, len(out["links"]["app.test.many"]))
	}
	write(LinksAllEntriesMax, LinksAllEntriesMax+1)
	var e map[string]string
	if code, _ := f.get("/links/all", q, &e); code != 400 || e["error"] != "QueryTooBig" || e["message"] == "" {
		t.Fatalf("%d pairs: %d %v", LinksAllEntriesMax+1, code, e)
	}
}
