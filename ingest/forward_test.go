package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// forwardWriter is a writer on a one-node cluster over a local store, with
// its metrics registered.
func forwardWriter(t *testing.T) (*Writer, *cluster.Node, objstore.Store, *prometheus.Registry) {
	return testWriterOf(t, 1<<20)
}

// testWriterOf is a writer on one node and a local store, with memtables
// of memtableBytes.
func testWriterOf(t testing.TB, memtableBytes int) (*Writer, *cluster.Node, objstore.Store, *prometheus.Registry) {
	t.Helper()
	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, reg := registeredMetrics(t)
	w, err := NewWriter(context.Background(), Config{Node: node, Store: store, Catalog: lsm.NewCatalog(t.TempDir(), store), MemtableBytes: memtableBytes, Metrics: m,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	return w, node, store, reg
}

// jsCommit is a Jetstream commit event (record nil for a delete).
func jsCommit(t *testing.T, timeUS int64, did, operation, collection, rkey string, record map[string]any) event.Op {
	t.Helper()
	c := map[string]any{"rev": "3mptbypluud2a", "operation": operation, "collection": collection, "rkey": rkey}
	if record != nil {
		record["$type"] = collection
		c["record"], c["cid"] = record, "bafyreiguce4jh7kcbmof3pmcvasifqtw24b6isakj5ve5ga2b4z4alpc4i"
	}
	return jsEvent(t, map[string]any{"did": did, "time_us": timeUS, "kind": "commit", "commit": c})
}

// jsEvent decodes a Jetstream event given as JSON fields.
func jsEvent(t *testing.T, ev map[string]any) event.Op {
	t.Helper()
	msg, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	op, err := event.DecodeJetstream(msg)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func strongRef(uri string) map[string]any {
	return map[string]any{"uri": uri, "cid": "bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"}
}

// linkFacets is a post's facets linking to each URL.
func linkFacets(urls ...string) []any {
	var fs []any
	for i, u := range urls {
		fs = append(fs, map[string]any{
			"features": []any{map[string]any{"$type": "app.bsky.richtext.facet#link", "uri": u}},
			"index":    map[string]any{"byteStart": i, "byteEnd": i + 1},
		})
	}
	return fs
}

// linksTree reads every record of the published links tree.
func linksTree(t *testing.T, store objstore.Store, m *lsm.Manifest) []link.Backlink {
	t.Helper()
	ctx := context.Background()
	cat := lsm.NewCatalog(t.TempDir(), store)
	var out []link.Backlink
	for _, run := range m.RunsOf(lsm.TreeLinks) {
		for _, ref := range run.Tables {
			meta, err := cat.Load(ctx, lsm.TreeLinks, ref)
			if err != nil {
				t.Fatal(err)
			}
			key, _ := lsm.TableKeys(lsm.TreeLinks, ref.ID)
			data, err := store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			for i := range meta.Frames {
				off, n := meta.ByteRange(i, i)
				recs, err := meta.DecodeFrame(i, data[off:off+n], nil)
				if err != nil {
					t.Fatal(err)
				}
				for o := 0; o < len(recs); o += link.BacklinkSize {
					out = append(out, link.GetBacklink(recs[o:]))
				}
			}
		}
	}
	return out
}

// The writer's forward entries, through the real write path (Jetstream
// events, a whole repository), flushed and read back: a record with three
// links gets three forward entries, which Forward returns with their
// targets and locations, equal to the backlinks; a record with one link
// gets none; a deleted record, an account gone inactive, an update to one
// link: nothing; an update to other links: the new ones only; a deleted
// target does not hide the links to it. No forward entry shows up among a
// real target's links, and the links metric counts the links alone.
// (Over 120 lines: one scenario through the real writer: events, a repository, then every check.)
func TestWriterForwardEntries(t *testing.T) {
	ctx := context.Background()
	w, node, store, reg := forwardWriter(t)
	const (
		alice = "did:plc:wq4aajammjtxdomz3e23667t"
		bob   = "did:plc:r2zybk6op3ymzpz6jhqpkoy5"
		carol = "did:plc:dclwtltrt2ggsryagfzk7dp4"
		dave  = "did:plc:z4tknqutdjexaohajbum43vf"
		erin  = "did:web:erin.example.com"
	)
	post, list := "app.bsky.feed.post", "app.bsky.graph.listitem"
	alicePost := "at://" + alice + "/app.bsky.feed.post/3mpsjbtci2c2o"
	carolPost := "at://" + carol + "/app.bsky.feed.post/3mpsjbtci2c3o"
	bobList := "at://" + bob + "/app.bsky.graph.list/3mpsjbtci2c4o"
	at := int64(1783175888000000)
	apply := func(op event.Op) {
		t.Helper()
		at++
		if err := w.Apply(ctx, "js", fmt.Sprint(at), &op); err != nil {
			t.Fatal(err)
		}
	}
	type src struct{ did, coll, rkey string }
	reply := src{bob, post, "3mptbyplj5d2a"}                // 3 links
	like := src{bob, "app.bsky.feed.like", "3mptbyplj5d3a"} // 1 link
	item := src{bob, list, "3mptbyplj5d4a"}                 // 2 links, deleted
	edited := src{bob, post, "3mptbyplj5d5a"}               // 2 links, then 3 others
	shrunk := src{bob, post, "3mptbyplj5d6a"}               // 2 links, then 1
	gone := src{dave, list, "3mptbyplj5d7a"}                // 2 links, account deleted
	repoItem := src{erin, list, "3mptbyplj5d8a"}            // 2 links, through ApplyRepo
	repoLike := src{erin, "app.bsky.feed.like", "3mptbyplj5d9a"}

	apply(jsCommit(t, at, reply.did, "create", reply.coll, reply.rkey, map[string]any{
		"text":  "re",
		"reply": map[string]any{"root": strongRef(alicePost), "parent": strongRef(carolPost)},
		"embed": map[string]any{"$type": "app.bsky.embed.external", "external": map[string]any{"uri": "https://example.com/a", "title": "a", "description": ""}},
	}))
	apply(jsCommit(t, at, like.did, "create", like.coll, like.rkey, map[string]any{"subject": strongRef(alicePost), "createdAt": "2026-07-04T14:38:08.999Z"}))
	apply(jsCommit(t, at, item.did, "create", item.coll, item.rkey, map[string]any{"subject": carol, "list": bobList, "createdAt": "2026-07-04T14:38:08.999Z"}))
	apply(jsCommit(t, at, edited.did, "create", edited.coll, edited.rkey, map[string]any{"text": "ab", "facets": linkFacets("https://example.com/a", "https://example.com/b")}))
	apply(jsCommit(t, at, shrunk.did, "create", shrunk.coll, shrunk.rkey, map[string]any{"text": "ab", "facets": linkFacets("https://example.com/a", "https://example.com/b")}))
	apply(jsCommit(t, at, gone.did, "create", gone.coll, gone.rkey, map[string]any{"subject": carol, "list": bobList, "createdAt": "2026-07-04T14:38:08.999Z"}))
	stamp, err := w.ReserveStamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ApplyRepo(ctx, "backfill", erin, stamp, []event.Op{
		jsCommit(t, 0, repoItem.did, "create", repoItem.coll, repoItem.rkey, map[string]any{"subject": carol, "list": bobList, "createdAt": "2026-07-04T14:38:08.999Z"}),
		jsCommit(t, 0, repoLike.did, "create", repoLike.coll, repoLike.rkey, map[string]any{"subject": strongRef(carolPost), "createdAt": "2026-07-04T14:38:08.999Z"}),
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Every record but the likes has two links or more: one forward entry
	// per link, 3+2+2+2+2+2.
	nFwd := func() int {
		n := 0
		for _, l := range linksTree(t, store, node.FSM.Manifest()) {
			if l.Target.IsForward() {
				n++
			}
		}
		return n
	}
	if n := nFwd(); n != 13 {
		t.Fatalf("%d forward entries in the links tree, want 13", n)
	}
	apply(jsCommit(t, at, item.did, "delete", item.coll, item.rkey, nil))
	apply(jsCommit(t, at, edited.did, "update", edited.coll, edited.rkey, map[string]any{"text": "bcd",
		"facets": linkFacets("https://example.com/b", "https://example.com/c", "https://example.com/d")}))
	apply(jsCommit(t, at, shrunk.did, "update", shrunk.coll, shrunk.rkey, map[string]any{"text": "b", "facets": linkFacets("https://example.com/b")}))
	apply(jsCommit(t, at, alice, "delete", post, "3mpsjbtci2c2o", nil)) // a target of reply: its links stay
	msg, _ := json.Marshal(map[string]any{"did": dave, "time_us": at, "kind": "account", "account": map[string]any{"did": dave, "active": false, "status": "deleted", "seq": 7, "time": "2026-07-04T14:38:09Z"}})
	acct, err := event.DecodeJetstream(msg)
	if err != nil {
		t.Fatal(err)
	}
	apply(acct)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := nFwd(); n != 13+3 {
		t.Fatalf("%d forward entries in the links tree, want 16 (edited's new three)", n)
	}
	vals := metricstest.Values(t, reg)
	if l := vals["eddy_ingest_links_total{source=js}"] + vals["eddy_ingest_links_total{source=backfill}"]; l != 3+1+2+2+2+2+2+1+3+1 {
		t.Fatalf("links metric %v, want the 19 links alone", l)
	}

	view, err := lsm.OpenView(ctx, lsm.NewCatalog(t.TempDir(), store), node.FSM.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	reader := lsm.NewReader(store, nil)
	codec := &link.Codec{Outlines: node.FSM, Names: lsm.NewNameMap(reader, lsm.Views(func() *lsm.View { return view }), 0)}
	id := func(s src) link.RecordID {
		r, err := codec.Record(s.did, s.coll, s.rkey, false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	targetID := func(s string) link.RecordID {
		tg, err := link.ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := codec.TargetKeys(&tg)
		if err != nil {
			t.Fatal(err)
		}
		return keys[0]
	}
	targets := []string{alicePost, carolPost, bobList, carol, "https://example.com/a", "https://example.com/b", "https://example.com/c", "https://example.com/d"}
	// The live links out of a source, through the backlinks of every
	// target; and no forward entry among a target's links.
	backlinksOf := func(s link.RecordID) []link.Backlink {
		var out []link.Backlink
		for _, tg := range targets {
			all, _, err := reader.All(ctx, view, targetID(tg), lsm.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			n, _, err := reader.Count(ctx, view, targetID(tg), lsm.Filter{})
			if err != nil || n != uint64(len(all)) {
				t.Fatalf("target %s: count %d (%v), %d links", tg, n, err, len(all))
			}
			for _, l := range all {
				if l.Source.IsForward() || l.Target.IsForward() {
					t.Fatalf("target %s: forward entry %v among its links", tg, l)
				}
				if l.Source == s {
					out = append(out, l)
				}
			}
		}
		slices.SortFunc(out, func(a, b link.Backlink) int { return a.Compare(&b) })
		return out
	}
	ask := []src{reply, like, item, edited, shrunk, gone, repoItem, repoLike}
	ids := make([]link.RecordID, len(ask))
	for i, s := range ask {
		ids[i] = id(s)
	}
	got, st, err := reader.Forward(ctx, view, ids)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forward stats %+v", st)
	paths := func(ls []link.Backlink) string {
		var ps []string
		for _, l := range ls {
			p, err := codec.RenderLocation(l.Location, link.StyleConstellation)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		slices.Sort(ps)
		return strings.Join(ps, " ")
	}
	for i, s := range ask {
		want := backlinksOf(ids[i])
		n := len(got[i])
		switch s {
		case reply, edited:
			if n != 3 || !slices.Equal(got[i], want) {
				t.Fatalf("%v: forward\n %v\nwant the backlinks\n %v", s, got[i], want)
			}
		case repoItem:
			if n != 2 || !slices.Equal(got[i], want) {
				t.Fatalf("%v: forward\n %v\nwant the backlinks\n %v", s, got[i], want)
			}
		case like, repoLike, shrunk:
			if n != 0 || len(want) != 1 {
				t.Fatalf("%v: forward %v, backlinks %v: want none and one", s, got[i], want)
			}
		case item, gone:
			if n != 0 || len(want) != 0 {
				t.Fatalf("%v: forward %v, backlinks %v: want nothing", s, got[i], want)
			}
		}
	}
	if p := paths(got[0]); p != ".embed.external.uri .reply.parent.uri .reply.root.uri" {
		t.Fatalf("reply's paths %q", p)
	}
	var tgs []link.RecordID
	for _, l := range got[3] {
		tgs = append(tgs, l.Target)
	}
	for _, u := range []string{"https://example.com/b", "https://example.com/c", "https://example.com/d"} {
		if !slices.Contains(tgs, targetID(u)) {
			t.Fatalf("edited's forward targets %v lack %s", tgs, u)
		}
	}
	// The URLs those forward entries name are in the names tree (what
	// many-to-many renders them by); a URL no record linked is not.
	for _, u := range []string{"https://example.com/a", "https://example.com/b", "https://example.com/c", "https://example.com/d"} {
		s, ok, err := codec.RenderHashedTarget(targetID(u))
		if err != nil || !ok || s != u {
			t.Fatalf("the name of %s's key: %q %v %v", u, s, ok, err)
		}
	}
	if s, ok, err := codec.RenderHashedTarget(link.HashTarget("https://example.com/never")); ok || err != nil {
		t.Fatalf("a URL never linked has a name: %q %v", s, err)
	}
	if !slices.Contains([]link.RecordID{got[0][0].Target, got[0][1].Target, got[0][2].Target}, targetID(alicePost)) {
		t.Fatalf("reply's link to the deleted %s is gone: %v", alicePost, got[0])
	}
}

// The room check counts forward entries: records of LinksPerRecordMax
// links each (twice the bytes with their forward entries) never overflow
// the memtable, however the earlier records left it.
func TestWriterForwardRoom(t *testing.T) {
	ctx := context.Background()
	w, node, store, _ := forwardWriter(t)
	const did = "did:plc:wq4aajammjtxdomz3e23667t"
	at := int64(1783175888000000)
	apply := func(op event.Op) {
		t.Helper()
		at++
		if err := w.Apply(ctx, "js", fmt.Sprint(at), &op); err != nil {
			t.Fatal(err)
		}
	}
	apply(jsCommit(t, at, did, "create", "app.bsky.feed.like", "3mptbyplj5d2a", map[string]any{"subject": strongRef("at://" + did + "/app.bsky.feed.post/3mpsjbtci2c2o")}))
	const records = 20 // 1.25 MiB of links and as much of forward entries, in 1 MiB memtables
	for r := range records {
		urls := make([]string, extract.LinksPerRecordMax)
		for i := range urls {
			urls[i] = fmt.Sprintf("https://example.com/%d/%d", r, i)
		}
		apply(jsCommit(t, at, did, "create", "app.bsky.feed.post", fmt.Sprintf("3mptbyplj%d2a", 10+r), map[string]any{"text": "x", "facets": linkFacets(urls...)}))
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fwd, all := 0, 0
	for _, l := range linksTree(t, store, node.FSM.Manifest()) {
		all++
		if l.Target.IsForward() {
			fwd++
		}
	}
	if want := records * extract.LinksPerRecordMax; fwd != want || all != 1+2*want {
		t.Fatalf("%d records, %d forward entries; want %d, %d", all, fwd, 1+2*want, want)
	}
}

// Sources applying at once never overflow the memtable: each checks for
// room and adds its record under one hold of the lock. Checked and added
// under two, two sources could both find room for one record, and the
// second fail half-written with lsm.ErrFull (its source then stopped).
func TestWriterRoomConcurrentSources(t *testing.T) {
	ctx := context.Background()
	w, node, store, _ := forwardWriter(t)
	const did = "did:plc:wq4aajammjtxdomz3e23667t"
	// Rounds: one catches the race most of the time (8 in 10 runs of the
	// old code), three nearly always.
	const rounds, sources, records = 3, 8, 16
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, sources)
		for s := range sources {
			wg.Go(func() {
				for r := range records {
					urls := make([]string, extract.LinksPerRecordMax)
					for i := range urls {
						urls[i] = fmt.Sprintf("https://example.com/%d/%d/%d/%d", round, s, r, i)
					}
					at := int64(1783175888000000 + round*100000 + s*1000 + r)
					op := jsCommit(t, at, did, "create", "app.bsky.feed.post", fmt.Sprintf("3mptbyp%c%c%c2a", 'a'+round, 'a'+s, 'a'+r), map[string]any{"text": "x", "facets": linkFacets(urls...)})
					if err := w.Apply(ctx, fmt.Sprint("js", s), fmt.Sprint(at), &op); err != nil {
						errs <- fmt.Errorf("round %d source %d record %d: %w", round, s, r, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fwd := 0
	for _, l := range linksTree(t, store, node.FSM.Manifest()) {
		if l.Target.IsForward() {
			fwd++
		}
	}
	if want := rounds * sources * records * extract.LinksPerRecordMax; fwd != want {
		t.Fatalf("%d forward entries, want %d", fwd, want)
	}
}

// The writer names the hashed targets of records with forward entries
// only (two links or more), at most TargetNamesPerRecordMax of a record,
// none longer than TargetNameBytesMax; a record of one link names none.
func TestWriterTargetNames(t *testing.T) {
	ctx := context.Background()
	w, node, store, _ := forwardWriter(t)
	const bob = "did:plc:r2zybk6op3ymzpz6jhqpkoy5"
	at := int64(1783175888000000)
	apply := func(rkey string, rec map[string]any) {
		t.Helper()
		at++
		if err := w.Apply(ctx, "js", fmt.Sprint(at), ptr(jsCommit(t, at, bob, "create", "app.bsky.feed.post", rkey, rec))); err != nil {
			t.Fatal(err)
		}
	}
	url := func(i int) string { return fmt.Sprintf("https://example.com/names/%d", i) }
	long := "https://example.com/" + strings.Repeat("l", TargetNameBytesMax)
	// One link: no forward entries, no name.
	apply("3mptbyplj5d2a", map[string]any{"text": "a", "embed": map[string]any{"$type": "app.bsky.embed.external", "external": map[string]any{"uri": "https://example.com/single", "title": "", "description": ""}}})
	// More hashed targets than a record may name, and a long one first.
	urls := []string{long}
	for i := range TargetNamesPerRecordMax + 4 {
		urls = append(urls, url(i))
	}
	apply("3mptbyplj5d3a", map[string]any{"text": "many", "facets": linkFacets(urls...)})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	view, err := lsm.OpenView(ctx, lsm.NewCatalog(t.TempDir(), store), node.FSM.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	codec := &link.Codec{Outlines: node.FSM, Names: lsm.NewNameMap(lsm.NewReader(store, nil), lsm.Views(func() *lsm.View { return view }), 0)}
	named := func(u string) bool {
		t.Helper()
		tg, err := link.ParseTarget(u)
		if err != nil {
			t.Fatal(err)
		}
		s, ok, err := codec.RenderHashedTarget(codec.TargetKey(&tg))
		if err != nil || (ok && s != tg.Norm) {
			t.Fatalf("%s: %q, %v", u, s, err)
		}
		return ok
	}
	if named("https://example.com/single") {
		t.Fatal("the target of a record of one link was named")
	}
	if named(long) {
		t.Fatalf("a target of %d bytes was named", len(long))
	}
	n := 0
	for i := range TargetNamesPerRecordMax + 4 {
		if named(url(i)) {
			n++
		}
	}
	if n != TargetNamesPerRecordMax {
		t.Fatalf("%d targets of one record named, want %d", n, TargetNamesPerRecordMax)
	}
}

func ptr[T any](v T) *T { return &v }
