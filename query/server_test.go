package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// dbSource adapts an lsm.DB to ManifestSource.
type dbSource struct {
	db *lsm.DB
	mu sync.Mutex
	ch []chan struct{}
}

func (d *dbSource) Manifest() *lsm.Manifest { return d.db.View().Manifest }
func (d *dbSource) Watch() <-chan struct{} {
	c := make(chan struct{}, 1)
	d.mu.Lock()
	d.ch = append(d.ch, c)
	d.mu.Unlock()
	return c
}
func (d *dbSource) notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.ch {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

type fixture struct {
	t     testing.TB
	db    *lsm.DB
	src   *dbSource
	codec *link.Codec
	views *Views
	srv   *httptest.Server
	qs    *Server
	stamp uint64
	// storeDir is the local object store's directory; catDir the serving
	// side's local metadata.
	storeDir, catDir string
}

func newFixture(t testing.TB) *fixture {
	storeDir := t.TempDir()
	store, err := local.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, store)
	f.storeDir = storeDir
	return f
}

// newFixtureOn is newFixture on another object store (storeDir empty).
func newFixtureOn(t testing.TB, store objstore.Store) *fixture {
	ctx := context.Background()
	db, err := lsm.Open(ctx, lsm.Options{Store: store, Dir: t.TempDir(), NoGCGrace: true})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, db: db, src: &dbSource{db: db}, codec: &link.Codec{Outlines: link.NewMemOutlines()}}
	f.catDir = t.TempDir()
	cat := lsm.NewCatalog(f.catDir, store) // the serving side keeps its own metadata, as a follower does
	f.views = NewViews(f.src, cat, nil)
	vctx, cancel := context.WithCancel(ctx)
	go f.views.Run(vctx)
	qs := NewServer(f.views, lsm.NewReader(store, nil), f.codec, nil)
	f.qs = qs
	f.srv = httptest.NewServer(qs.Handler())
	t.Cleanup(func() { f.srv.Close(); cancel() })
	return f
}

// write indexes a record (create) or revokes one (delete), as the writer does.
func (f *fixture) write(uri string, rec string) {
	f.t.Helper()
	f.stamp++
	u := strings.TrimPrefix(uri, "at://")
	parts := strings.SplitN(u, "/", 3)
	src, err := f.codec.Record(parts[0], parts[1], parts[2], true)
	if err != nil {
		f.t.Fatal(err)
	}
	if rec == "" {
		v := link.Revocation{Source: src, Rev: f.stamp}
		if err := f.db.AddRevocation(&v); err != nil {
			f.t.Fatal(err)
		}
		return
	}
	m, err := atdata.UnmarshalJSON([]byte(rec))
	if err != nil {
		f.t.Fatal(err)
	}
	links, _ := extract.Extract(m)
	for _, l := range links {
		tg := f.codec.TargetKey(&l.Target)
		loc, _ := f.codec.Location(l.Path, l.StrongRef, true)
		bl := link.Backlink{Target: tg, Source: src, Location: loc, SourceRev: f.stamp}
		if err := f.db.AddBacklink(&bl); err != nil {
			f.t.Fatal(err)
		}
		// As the writer does: a record of several links gets forward entries.
		if len(links) >= 2 {
			fl := link.Backlink{Target: link.ForwardKey(src), Source: tg, Location: loc, SourceRev: f.stamp}
			if err := f.db.AddBacklink(&fl); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

func (f *fixture) flush() uint64 {
	f.t.Helper()
	if err := f.db.Flush(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.src.notify()
	gen := f.db.View().Generation()
	if _, err := f.views.WaitFor(context.Background(), gen); err != nil {
		f.t.Fatal(err)
	}
	return gen
}

func (f *fixture) get(path string, params url.Values, out any) (int, http.Header) {
	f.t.Helper()
	r, err := http.Get(f.srv.URL + path + "?" + params.Encode())
	if err != nil {
		f.t.Fatal(err)
	}
	defer r.Body.Close()
	if err := json.NewDecoder(r.Body).Decode(out); err != nil {
		f.t.Fatalf("%s: %v", path, err)
	}
	return r.StatusCode, r.Header
}

const post = "at://did:plc:alice000000000000000000/app.bsky.feed.post/3mptbyplj5d2a"

func like(i int) (string, string) {
	return fmt.Sprintf("at://did:plc:u%023d/app.bsky.feed.like/3mptbyplj5d%02d", i, i%100),
		`{"$type":"app.bsky.feed.like","subject":{"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza","uri":"` + post + `"},"createdAt":"2026-07-04T14:38:08.999Z"}`
}

// (Over 120 lines: one scenario: every endpoint's answer on one fixture.)
func TestAPI(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 250; i++ {
		f.write(like(i))
	}
	reply := `{"$type":"app.bsky.feed.post","text":"hi","reply":{"root":{"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza","uri":"` + post + `"},"parent":{"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza","uri":"` + post + `"}},"facets":[{"features":[{"$type":"app.bsky.richtext.facet#link","uri":"https://example.com/a"}],"index":{"byteStart":0,"byteEnd":1}}]}`
	f.write("at://did:web:bob.example/app.bsky.feed.post/3mptbyplj5d2b", reply)
	f.flush()
	// Two likes deleted after they were published.
	l0, _ := like(0)
	l1, _ := like(1)
	f.write(l0, "")
	f.write(l1, "")
	gen := f.flush()

	// listBacklinks: grouped by seed 000 paths, paged with stable cursors.
	var all []string
	groups := map[string]int{}
	cursor := ""
	for page := 0; ; page++ {
		var out listBacklinksOut
		p := url.Values{"target": {post}, "limit": {"100"}}
		if cursor != "" {
			p.Set("cursor", cursor)
		}
		code, h := f.get("/xrpc/blue.cerulea.backlinks.listBacklinks", p, &out)
		if code != 200 || h.Get(GenerationHeader) != fmt.Sprint(gen) {
			t.Fatalf("page %d: %d generation %q", page, code, h.Get(GenerationHeader))
		}
		for path, srcs := range out.Backlinks {
			groups[path] += len(srcs)
			all = append(all, srcs...)
		}
		if out.Cursor == nil {
			break
		}
		cursor = *out.Cursor
	}
	if len(all) != 248+2 || groups["$.subject"] != 248 || groups["$.reply.root"] != 1 || groups["$.reply.parent"] != 1 {
		t.Fatalf("%d links, groups %v", len(all), groups)
	}
	seen := map[string]bool{}
	for _, s := range all {
		if s == l0 || s == l1 {
			t.Fatalf("deleted like %s answered", s)
		}
		if seen[s] && !strings.Contains(s, "did:web:bob") {
			t.Fatalf("%s answered twice", s)
		}
		seen[s] = true
	}

	// getBacklinks with a source filter, paging forward and in reverse.
	var forward []string
	for _, reverse := range []string{"false", "true"} {
		var recs []string
		cursor = ""
		var total uint64
		for {
			var out getBacklinksOut
			p := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"100"}, "reverse": {reverse}}
			if cursor != "" {
				p.Set("cursor", cursor)
			}
			if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", p, &out); code != 200 {
				t.Fatalf("getBacklinks: %d", code)
			}
			total = out.Total
			for _, r := range out.Records {
				if r.Collection != "app.bsky.feed.like" {
					t.Fatalf("record %+v", r)
				}
				recs = append(recs, "at://"+r.DID+"/"+r.Collection+"/"+r.RKey)
			}
			if out.Cursor == nil {
				break
			}
			cursor = *out.Cursor
		}
		if total != 248 || len(recs) != 248 {
			t.Fatalf("reverse=%s: total %d, %d records", reverse, total, len(recs))
		}
		// Pages come in source order; reverse is the mirror image.
		if reverse == "false" {
			forward = recs
			continue
		}
		for i := range recs {
			if recs[i] != forward[len(forward)-1-i] {
				t.Fatalf("reverse order differs at %d: %s vs %s", i, recs[i], forward[len(forward)-1-i])
			}
		}
	}
	// A did filter, the leading-dot form of the path, counts and DIDs.
	l5, _ := like(5)
	did5 := strings.SplitN(strings.TrimPrefix(l5, "at://"), "/", 2)[0]
	var one getBacklinksOut
	f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:.subject.uri"}, "did": {did5}}, &one)
	if one.Total != 1 || len(one.Records) != 1 || one.Records[0].DID != did5 {
		t.Fatalf("did filter: %+v", one)
	}
	var cnt map[string]uint64
	f.get("/xrpc/blue.microcosm.links.getBacklinksCount", url.Values{"subject": {post}, "source": {"app.bsky.feed.post:reply.parent.uri"}}, &cnt)
	if cnt["total"] != 1 {
		t.Fatalf("count %v", cnt)
	}
	var dids backlinkDidsOut
	var alldids []string
	cursor = ""
	for {
		p := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"100"}}
		if cursor != "" {
			p.Set("cursor", cursor)
		}
		dids = backlinkDidsOut{}
		f.get("/xrpc/blue.microcosm.links.getBacklinkDids", p, &dids)
		alldids = append(alldids, dids.LinkingDids...)
		if dids.Cursor == nil {
			break
		}
		cursor = *dids.Cursor
	}
	if dids.Total != 248 || len(alldids) != 248 {
		t.Fatalf("dids total %d, %d listed", dids.Total, len(alldids))
	}
	var summary map[string]map[string]map[string]pathCounts
	f.get("/links/all", url.Values{"target": {post}}, &summary)
	if summary["links"]["app.bsky.feed.like"][".subject.uri"] != (pathCounts{248, 248}) || summary["links"]["app.bsky.feed.post"][".reply.root.uri"] != (pathCounts{1, 1}) {
		t.Fatalf("links/all %v", summary)
	}
	// A URL target, normalised the same way as at ingest.
	var u listBacklinksOut
	f.get("/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"HTTPS://Example.com:443/a"}}, &u)
	if len(u.Backlinks["$.facets[].features[app.bsky.richtext.facet#link].uri"]) != 1 {
		t.Fatalf("url target %v", u)
	}
	// An unknown target: empty, not an error.
	var none listBacklinksOut
	if code, _ := f.get("/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"did:plc:nobodynobodynobodynobody"}}, &none); code != 200 || len(none.Backlinks) != 0 {
		t.Fatalf("unknown target: %d %v", code, none)
	}
}

func TestAPIErrors(t *testing.T) {
	f := newFixture(t)
	f.write(like(1))
	gen := f.flush()
	cases := []struct {
		path   string
		params url.Values
		code   int
		name   string
	}{
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"not a link"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {post}, "limit": {"0"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {post}, "limit": {"100000"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {post}, "cursor": {"garbage"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {post}, "minGeneration": {"x"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"HTTPS://" + strings.Repeat("a", 3000)}}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {"https://" + strings.Repeat("a", link.NormBytesMax)}}, 400, "InvalidRequest"},
		{"/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}}, 400, "InvalidRequest"},
		{"/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"nocolon"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "did": {"did:plc:\xff"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "reverse": {"maybe"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"1001"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {post}, "minGeneration": {fmt.Sprint(gen + 5)}}, 503, "GenerationNotReady"},
		{"/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"1", "2"}}, 400, "InvalidRequest"},
		{"/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "minGeneration": {"-1"}}, 400, "InvalidRequest"},
	}
	for _, c := range cases {
		var out map[string]string
		code, h := f.get(c.path, c.params, &out)
		if code != c.code || out["error"] != c.name || out["message"] == "" {
			t.Errorf("%s %v: %d %v", c.path, c.params, code, out)
		}
		// Every answer says the generation the node serves: a generation
		// not yet served, and a request refused before a view is taken (a
		// repeated or malformed parameter; before, those had no header).
		if h.Get(GenerationHeader) != fmt.Sprint(gen) {
			t.Errorf("%s %v: %s %q, want the served generation %d", c.path, c.params, GenerationHeader, h.Get(GenerationHeader), gen)
		}
		// A page on another origin reads the error and when to retry.
		if e := h.Get("Access-Control-Expose-Headers"); h.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(e, "Retry-After") || !strings.Contains(e, GenerationHeader) {
			t.Errorf("%s %v: Access-Control-Expose-Headers %q", c.path, c.params, e)
		}
	}
	// A cursor of one direction is refused in the other.
	for i := 2; i < 20; i++ {
		f.write(like(i))
	}
	f.flush()
	var page getBacklinksOut
	f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "limit": {"5"}}, &page)
	if page.Cursor == nil {
		t.Fatal("no cursor")
	}
	var out map[string]string
	if code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "reverse": {"true"}, "cursor": {*page.Cursor}}, &out); code != 400 {
		t.Fatalf("cross-direction cursor: %d", code)
	}
}

// A bucket that stops answering (a real MinIO behind a TCP proxy that is
// cut): a query that needs it answers 503 StoreUnavailable with
// Retry-After, counted, never 500 and never a shorter list; once the
// node's guard has called the store down (its probes) the answer comes
// at once instead of after the client's retries; when the bucket comes
// back the same query answers in full.
func TestStoreUnavailable(t *testing.T) {
	bucket, fw := miniotest.StoreBehindForwarder(t, "store-unavailable", 0) // the client's default retries: seconds
	guard := objstore.NewGuard(bucket)
	f := newFixtureOn(t, guard)
	m := NewMetrics()
	f.qs.StoreUnavailable = m.StoreUnavailable
	for i := range 40 {
		f.write(like(i))
	}
	f.flush()
	path, q := "/xrpc/blue.cerulea.backlinks.listBacklinks", url.Values{"target": {post}}.Encode()
	unavailable := func(what string) time.Duration {
		t.Helper()
		t0 := time.Now()
		code, h, body := f.raw(path, q)
		d := time.Since(t0)
		var e map[string]string
		json.Unmarshal(body, &e)
		if code != http.StatusServiceUnavailable || e["error"] != "StoreUnavailable" || e["message"] == "" || h.Get("Retry-After") != "1" {
			t.Fatalf("%s: %d %s (Retry-After %q)", what, code, body, h.Get("Retry-After"))
		}
		return d
	}

	fw.Cut()
	slow := unavailable("the bucket cut, before the guard knows")
	ctx := context.Background()
	for range objstore.GuardFailures {
		guard.Probe(ctx, 300*time.Millisecond)
	}
	if d := unavailable("the bucket down"); d > time.Second || d > slow/2 {
		t.Fatalf("a query took %v with the bucket known down (%v before the guard knew): it was sent", d, slow)
	}
	if n := testutil.ToFloat64(m.StoreUnavailable); n != 2 {
		t.Fatalf("eddy_query_store_unavailable_total %v, want 2", n)
	}

	fw.Restore()
	if err := guard.Probe(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Backlinks map[string][]string `json:"backlinks"`
	}
	if code, _ := f.get(path, url.Values{"target": {post}, "limit": {"100"}}, &out); code != 200 || len(out.Backlinks["$.subject"]) != 40 {
		t.Fatalf("after the bucket came back: %d, %d links", code, len(out.Backlinks["$.subject"]))
	}
}

// A node that is not ready answers 503 NotReady, unless the client asks
// with allowStale=true: then it answers from its view, saying why it was
// not ready in X-Eddy-Stale; a value other than true or false, or the
// parameter given twice, is 400, whether the node has a readiness gate or
// not.
func TestAllowStale(t *testing.T) {
	f := newFixture(t)
	f.write(like(1))
	f.flush()
	behind := errors.New("serving generation 1; the leader had generation 9 31s ago")
	f.qs.Ready = func() error { return behind }
	path := "/xrpc/blue.cerulea.backlinks.listBacklinks"
	var e map[string]string
	if code, h := f.get(path, url.Values{"target": {post}}, &e); code != 503 || e["error"] != "NotReady" || h.Get("Retry-After") == "" || !strings.Contains(e["message"], "allowStale=true") {
		t.Fatalf("not ready, no allowStale: %d %v", code, e)
	}
	var page struct {
		Backlinks map[string][]string `json:"backlinks"`
	}
	code, h := f.get(path, url.Values{"target": {post}, "allowStale": {"true"}}, &page)
	if code != 200 || len(page.Backlinks["$.subject"]) != 1 || h.Get(StaleHeader) != behind.Error() || h.Get(GenerationHeader) == "" {
		t.Fatalf("not ready, allowStale=true: %d %v (%s %q)", code, page, StaleHeader, h.Get(StaleHeader))
	}
	e = nil
	if code, _ := f.get(path, url.Values{"target": {post}, "allowStale": {"yes"}}, &e); code != 400 || e["error"] != "InvalidRequest" {
		t.Fatalf("allowStale=yes: %d %v", code, e)
	}
	// Given twice it is 400, as any single-valued parameter.
	if code, _, body := f.raw(path, url.Values{"target": {post}, "allowStale": {"true", "false"}}.Encode()); code != 400 || !strings.Contains(string(body), `"InvalidRequest"`) || !strings.Contains(string(body), "allowStale") {
		t.Fatalf("allowStale twice, not ready: %d %s", code, body)
	}
	f.qs.Ready = func() error { return nil }
	code, h = f.get(path, url.Values{"target": {post}, "allowStale": {"true"}}, &page)
	if code != 200 || h.Get(StaleHeader) != "" {
		t.Fatalf("ready, allowStale=true: %d, %s %q", code, StaleHeader, h.Get(StaleHeader))
	}
	// A server without a readiness gate checks it the same.
	f.qs.Ready = nil
	for _, bad := range [][]string{{"yes"}, {"true", "false"}, {"true", "true"}} {
		if code, _, body := f.raw(path, url.Values{"target": {post}, "allowStale": bad}.Encode()); code != 400 || !strings.Contains(string(body), `"InvalidRequest"`) {
			t.Fatalf("allowStale=%q, no readiness gate: %d %s", bad, code, body)
		}
	}
	if code, _ := f.get(path, url.Values{"target": {post}, "allowStale": {"false"}}, &page); code != 200 {
		t.Fatalf("allowStale=false, no readiness gate: %d", code)
	}
}

// from_dids past DIDsMax is refused naming from_dids, not the did
// parameter the client never gave.
func TestFromDIDsBound(t *testing.T) {
	f := newFixture(t)
	f.write(like(1))
	f.flush()
	dids := make([]string, DIDsMax+1)
	for i := range dids {
		dids[i] = fmt.Sprintf("did:plc:%024d", i)
	}
	var out map[string]string
	code, _ := f.get("/links", url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}, "from_dids": {strings.Join(dids, ",")}}, &out)
	if code != 400 || out["error"] != "InvalidRequest" || !strings.Contains(out["message"], "from_dids names 1001 DIDs; at most 1000") {
		t.Fatalf("from_dids of %d DIDs: %d %v", len(dids), code, out)
	}
	var page map[string]any
	code, _ = f.get("/links", url.Values{"target": {post}, "collection": {"app.bsky.feed.like"}, "path": {".subject.uri"}, "from_dids": {strings.Join(dids[:DIDsMax], ",")}}, &page)
	if code != 200 {
		t.Fatalf("from_dids of %d DIDs: %d %v", DIDsMax, code, page)
	}
}
