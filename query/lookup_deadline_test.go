package query

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/objstoretest"
)

// TestLookupsEndWithTheQuery: a query's reads of the names tree (to
// encode a did:web it filters by, to render a named record key it
// answers with) are bounded by the query's context, not by the names
// map's own 30 s (lsm.NameLookupTimeout): on a bucket that stopped
// answering, the query ends when its time does, with a message that says
// so. With the query's codec unbound (s.Codec instead of s.codec(ctx)),
// the stalled answers take 30 s and the test fails.
func TestLookupsEndWithTheQuery(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	base, err := local.New(f.storeDir) // the fixture's bucket
	if err != nil {
		t.Fatal(err)
	}
	cat := lsm.NewCatalog(t.TempDir(), base)
	empty, err := lsm.OpenView(ctx, cat, &lsm.Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	// The writer names the did:web and the record key "self".
	written := lsm.NewNameMap(lsm.NewReader(base, nil), lsm.Views(func() *lsm.View { return empty }), 0)
	f.codec.Names = written
	const src = "at://did:web:example.com/app.bsky.feed.like/self"
	_, body := like(0)
	f.write(src, body)
	f.flush()
	run, err := lsm.WriteRun(ctx, base, cat, lsm.TreeNames, lsm.RunDelta, 0, written.Seal().Records())
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := (&lsm.Manifest{}).Apply(lsm.Edit{Base: 0, Add: []lsm.Run{run}})
	if err != nil {
		t.Fatal(err)
	}
	named, err := lsm.OpenView(ctx, cat, m)
	if err != nil {
		t.Fatal(err)
	}
	store := objstoretest.NewStalling(base, "", 0)
	// Each query gets a node's names map of its own, whose cache is empty.
	serve := func(params url.Values, timeout time.Duration) (int, map[string]string, time.Duration) {
		f.qs.Codec = &link.Codec{Outlines: f.codec.Outlines, Names: lsm.NewNameMap(lsm.NewReader(store, nil), lsm.Views(func() *lsm.View { return named }), 0)}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		r := httptest.NewRequestWithContext(rctx, http.MethodGet, "/xrpc/blue.microcosm.links.getBacklinks?"+params.Encode(), nil)
		w := httptest.NewRecorder()
		start := time.Now()
		f.qs.Handler().ServeHTTP(w, r)
		took := time.Since(start)
		var e map[string]string
		if w.Code != http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatalf("an error without an XRPC body: %d %q", w.Code, w.Body.String())
			}
		} else {
			var page struct {
				Records []constellationRecord `json:"records"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
				t.Fatal(err)
			}
			if len(page.Records) != 1 || page.Records[0].DID != "did:web:example.com" || page.Records[0].RKey != "self" {
				t.Fatalf("answered %s; want the like from %s", w.Body.String(), src)
			}
		}
		return w.Code, e, took
	}
	rendered := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}
	filtered := url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}, "did": {"did:web:example.com"}}
	for _, q := range []url.Values{rendered, filtered} {
		before := store.Reads()
		if code, e, _ := serve(q, time.Minute); code != http.StatusOK {
			t.Fatalf("%v: %d %+v", q, code, e)
		}
		if store.Reads() == before {
			t.Fatalf("%v: answered without reading the names tree; the test would prove nothing", q)
		}
	}
	store.Stall(true)
	for _, q := range []url.Values{rendered, filtered} {
		code, e, took := serve(q, 500*time.Millisecond)
		if code != http.StatusInternalServerError || !strings.Contains(e["message"], "out of time") {
			t.Fatalf("%v on a stalled bucket: %d %+v; want 500 saying the query ran out of time", q, code, e)
		}
		if took > lsm.NameLookupTimeout/2 {
			t.Fatalf("%v: answered after %v, the names map's own bound; want the query's", q, took)
		}
	}
	// getManyToManyCounts folds a target's hashed key into its encoded
	// one: a rendering that fails there is the answer's error, not a
	// target left out of the fold (its counts split in two).
	id, err := f.codec.Record("did:web:example.com", "app.bsky.feed.like", "self", false)
	if err != nil {
		t.Fatal(err)
	}
	f.qs.Codec = &link.Codec{Outlines: f.codec.Outlines, Names: lsm.NewNameMap(lsm.NewReader(store, nil), lsm.Views(func() *lsm.View { return named }), 0)}
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, _, err := f.qs.hashKeyOf(dctx, id); !errors.Is(err, link.ErrLookup) {
		t.Fatalf("hashKeyOf of a record whose names cannot be read: %v; want link.ErrLookup", err)
	}
}
