package query

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// A target's links under both of its keys: the first likes of a feed
// generator come before any record of its collection (written under the
// target's hash, no outline assigned), the generator's own record then
// makes its parts known (later likes are written in its encoding). Every
// endpoint answers all of them, at every page size, and a delete of an
// early like revokes it.
func TestTargetUnderBothKeys(t *testing.T) {
	f := newFixture(t)
	const gen = "at://did:plc:gen00000000000000000000/app.bsky.feed.generator/for-you"
	like := func(i int) string {
		return fmt.Sprintf("at://did:plc:liker%018d/app.bsky.feed.like/%s", i, tid(i))
	}
	body := `{"$type":"app.bsky.feed.like","subject":{"uri":"` + gen + `","cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"},"createdAt":"2026-07-04T14:38:08.999Z"}`
	tg, err := link.ParseTarget(gen)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		f.write(like(i), body)
	}
	const list = "https://lists.example/picks"
	pick := func(i int) {
		f.write(fmt.Sprintf("at://did:plc:picker%017d/com.example.pick/%s", i, tid(i)), `{"$type":"com.example.pick","list":"`+list+`","feed":"`+gen+`"}`)
	}
	for i := range 3 {
		pick(i)
	}
	hashed := f.codec.TargetKey(&tg)
	if !hashed.IsHashed() {
		t.Fatalf("a generator of an unknown collection written as %v, want its hash", hashed)
	}
	if _, ok := f.codec.Outlines.Lookup(link.OutlineCollection, "app.bsky.feed.generator"); ok {
		t.Fatal("a target assigned a collection outline")
	}
	f.flush()
	f.write(gen, `{"$type":"app.bsky.feed.generator","did":"did:web:feed.example","displayName":"For you","createdAt":"2026-07-04T14:38:08.999Z"}`)
	for i := 7; i < 12; i++ {
		f.write(like(i), body)
	}
	f.write(like(2), "") // an early like deleted: revoked under the hash key
	if k := f.codec.TargetKey(&tg); k.IsHashed() {
		t.Fatalf("a known generator written as %v, want its encoding", k)
	}
	// Two early likes written again now that the generator is known (a
	// create replayed: a new leader's rewind, a backfill of a repository
	// the stream wrote): each is now under both keys, and counts once.
	f.write(like(0), body)
	f.write(like(5), body)
	// Picks naming a list (a URL) and the generator: three before it was
	// known (written under its hash), two after.
	pick(3)
	pick(4)
	// And an early pick written again: under both keys, one item.
	pick(1)
	f.flush()

	want := map[string]bool{}
	for i := range 12 {
		if i != 2 {
			want[fmt.Sprintf("did:plc:liker%018d %s", i, tid(i))] = true
		}
	}
	base := url.Values{"subject": {gen}, "source": {"app.bsky.feed.like:subject.uri"}}
	var ref []rec
	for _, rev := range []string{"false", "true"} {
		for _, limit := range []string{"1", "2", "3", "5", "100"} {
			q := cloneValues(base)
			q.Set("limit", limit)
			q.Set("reverse", rev)
			got := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records")
			have := map[string]bool{}
			for _, r := range got {
				have[r.DID+" "+r.RKey] = true
			}
			if len(got) != len(want) || len(have) != len(want) {
				t.Fatalf("getBacklinks limit %s reverse %s: %d records (%d distinct), want %d", limit, rev, len(got), len(have), len(want))
			}
			for k := range want {
				if !have[k] {
					t.Fatalf("getBacklinks limit %s reverse %s: missing %s", limit, rev, k)
				}
			}
			if rev == "false" {
				if ref == nil {
					ref = got
				} else if !slices.Equal(got, ref) {
					t.Fatalf("limit %s: another order\n%v\n%v", limit, got, ref)
				}
			}
		}
	}
	// Newest first is oldest first reversed.
	q := cloneValues(base)
	q.Set("reverse", "true")
	q.Set("limit", "4")
	back := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records")
	slices.Reverse(back)
	q.Set("reverse", "false")
	if fwd := f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records"); !slices.Equal(back, fwd) {
		t.Fatalf("reverse order is not the forward order reversed:\n%v\n%v", back, fwd)
	}
	var total map[string]any
	f.get("/xrpc/blue.microcosm.links.getBacklinks", base, &total)
	if total["total"].(float64) != float64(len(want)) {
		t.Fatalf("getBacklinks total %v, want %d", total["total"], len(want))
	}
	var count totalOut
	f.get("/xrpc/blue.microcosm.links.getBacklinksCount", base, &count)
	if count.Total != uint64(len(want)) {
		t.Fatalf("getBacklinksCount %d, want %d", count.Total, len(want))
	}
	var dids backlinkDidsOut
	f.get("/xrpc/blue.microcosm.links.getBacklinkDids", base, &dids)
	if dids.Total != len(want) || len(dids.LinkingDids) != len(want) {
		t.Fatalf("getBacklinkDids %d (%d listed), want %d", dids.Total, len(dids.LinkingDids), len(want))
	}
	var all struct {
		Links map[string]map[string]pathCounts `json:"links"`
	}
	f.get("/links/all", url.Values{"target": {gen}}, &all)
	if c := all.Links["app.bsky.feed.like"][".subject.uri"]; c.Records != len(want) || c.DistinctDids != len(want) {
		t.Fatalf("/links/all %v, want %d records", all, len(want))
	}
	// Many-to-many: the likes as join records, their other subject the
	// generator itself (under either key), one item per like at any page
	// size; and the picks of the list grouped by feed, one group for the
	// generator, both keys' picks in it.
	for _, limit := range []string{"1", "3", "100"} {
		var items []string
		q := url.Values{"subject": {gen}, "source": {"app.bsky.feed.like:subject.uri"}, "pathToOther": {"subject.uri"}, "limit": {limit}}
		for _, it := range f.m2mItems(q) {
			if it.OtherSubject != gen {
				t.Fatalf("getManyToMany: other subject %q, want %s", it.OtherSubject, gen)
			}
			items = append(items, it.LinkRecord.DID+" "+it.LinkRecord.RKey)
		}
		slices.Sort(items)
		if len(items) != len(want) || len(slices.Compact(items)) != len(want) {
			t.Fatalf("getManyToMany limit %s: %d items, want %d: %v", limit, len(items), len(want), items)
		}
	}
	// The picks as join records, the generator their other subject: one
	// item a pick, the one written under both keys once, at any page size
	// (the items' count agrees with the group's total below).
	hb := hashed.Bytes()
	hashName := hashedPrefix + hex.EncodeToString(hb[:8]) + hex.EncodeToString(hb[16:])
	for _, limit := range []string{"1", "2", "100"} {
		var items []string
		q := url.Values{"subject": {list}, "source": {"com.example.pick:list"}, "pathToOther": {"feed"}, "limit": {limit}}
		for _, it := range f.m2mItems(q) {
			// The early picks' hashed key is named by its hash here: this
			// fixture writes no target names (the ingest writer does, and
			// names them gen).
			if it.OtherSubject != gen && it.OtherSubject != hashName {
				t.Fatalf("getManyToMany of the picks: other subject %q, want %s or %s", it.OtherSubject, gen, hashName)
			}
			items = append(items, it.LinkRecord.DID)
		}
		slices.Sort(items)
		if len(items) != 5 || len(slices.Compact(items)) != 5 {
			t.Fatalf("getManyToMany of the picks, limit %s: %d items, want 5, one a pick: %v", limit, len(items), items)
		}
	}
	var groups m2mCountsOut
	f.get("/xrpc/blue.microcosm.links.getManyToManyCounts", url.Values{"subject": {list}, "source": {"com.example.pick:list"}, "pathToOther": {"feed"}}, &groups)
	if len(groups.CountsByOtherSubject) != 1 || groups.CountsByOtherSubject[0] != (m2mCount{Subject: gen, Total: 5, Distinct: 5}) {
		t.Fatalf("getManyToManyCounts: %+v, want one group of 5 picks for %s", groups.CountsByOtherSubject, gen)
	}
	// listBacklinks, the design's API, two links a page.
	var served []string
	q = url.Values{"target": {gen}, "limit": {"2"}}
	for page := 0; ; page++ {
		if page > 20 {
			t.Fatal("listBacklinks: paging does not end")
		}
		var out listBacklinksOut
		if code, _ := f.get("/xrpc/blue.cerulea.backlinks.listBacklinks", q, &out); code != 200 {
			t.Fatalf("listBacklinks: %d", code)
		}
		for _, srcs := range out.Backlinks {
			served = append(served, srcs...)
		}
		if out.Cursor == nil {
			break
		}
		q.Set("cursor", *out.Cursor)
	}
	slices.Sort(served)
	if n := len(want) + 5; len(served) != n || len(slices.Compact(served)) != n { // the likes and the five picks
		t.Fatalf("listBacklinks: %d sources, want %d: %v", len(served), n, served)
	}
}

// BenchmarkTargetKeys: what reading a target under its second key costs a
// page of a known target (its hashed key is in no table: a filter probe a
// run), against reading its encoding alone. 16 runs, 150 links.
//
//	go test -run '^$' -bench BenchmarkTargetKeys ./query
func BenchmarkTargetKeys(b *testing.B) {
	f := newFixture(b)
	const post = "at://did:plc:author0000000000000000000/app.bsky.feed.post/3mptbyplj5d22"
	f.write(post, `{"$type":"app.bsky.feed.post","text":"x","createdAt":"2026-07-04T14:38:08.999Z"}`)
	body := `{"$type":"app.bsky.feed.like","subject":{"uri":"` + post + `","cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"},"createdAt":"2026-07-04T14:38:08.999Z"}`
	other := `{"$type":"app.bsky.feed.like","subject":{"uri":"at://did:plc:author0000000000000000000/app.bsky.feed.post/3mptbyplj5d33","cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"},"createdAt":"2026-07-04T14:38:08.999Z"}`
	n := 0
	for run := range 16 {
		for i := range 200 {
			n++
			uri := fmt.Sprintf("at://did:plc:liker%018d/app.bsky.feed.like/%s", n, tid(n))
			if i < 10 {
				f.write(uri, body)
			} else {
				f.write(uri, other)
			}
		}
		_ = run
		f.flush()
	}
	sub, err := f.qs.parseSubject(context.Background(), "subject", post)
	if err != nil || len(sub.keys) != 2 || sub.keys[0].IsHashed() {
		b.Fatalf("keys %v %v", sub.keys, err)
	}
	v, err := f.views.WaitFor(context.Background(), f.db.View().Generation())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		keys []link.RecordID
	}{{"encoding", sub.keys[:1]}, {"both", sub.keys}} {
		s := sub
		s.keys = c.keys
		lq := &linkQuery{known: byKey([]subject{s})}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				links, _, err := f.qs.pageLinks(context.Background(), v, lq, nil, true, 100)
				if err != nil || len(links) != 100 {
					b.Fatalf("%d links, %v", len(links), err)
				}
			}
		})
	}
}

// One record links subject X (under both of X's keys: written while X was
// unknown, then again once it was known) and subject Y at one path, and Y's
// key sorts between X's two: a page of a question about both that ends at
// the record's link to Y gives its link to X once, at every page size and
// in both orders. (The next page read the record again under X's later
// key and gave it a second time.)
func TestTwinAcrossAPageEndingAtAnotherSubject(t *testing.T) {
	f := newFixture(t)
	const x = "at://did:plc:gen00000000000000000000/com.example.thing/3mptbyplj5d22"
	tx, err := link.ParseTarget(x)
	if err != nil {
		t.Fatal(err)
	}
	hashX := f.codec.TargetKey(&tx)
	if !hashX.IsHashed() {
		t.Fatal("X known before its record")
	}
	// Y, a URL, is stored under its hash: one whose key sorts after X's
	// encoding (its record key, a TID's value, below 2^61 for this one)
	// and before X's hash.
	var y string
	var hashY link.RecordID
	for i := 0; ; i++ {
		y = fmt.Sprintf("https://example.com/%d", i)
		ty, err := link.ParseTarget(y)
		if err != nil {
			t.Fatal(err)
		}
		if hashY = f.codec.TargetKey(&ty); hashY.Compare(hashX) < 0 && hashY.RKey > 1<<61 {
			break
		}
	}
	const src = "at://did:plc:src00000000000000000000/com.example.multi/3mptbyplj5d23"
	body := `{"$type":"com.example.multi","refs":["` + x + `","` + y + `"]}`
	f.write(src, body) // X unknown: under its hash
	f.write(x, `{"$type":"com.example.thing","name":"x"}`)
	encX := f.codec.TargetKey(&tx)
	if encX.IsHashed() || encX.Compare(hashY) >= 0 {
		t.Fatalf("X's keys %v and %v, Y's %v: want Y's between", encX, hashX, hashY)
	}
	f.write(src, body) // replayed: under X's encoding too
	// Two more records linking Y, around src in time.
	f.write("at://did:plc:zzz00000000000000000000/com.example.multi/3mptbyplj5d24", `{"$type":"com.example.multi","refs":["`+y+`"]}`)
	f.write("at://did:plc:aaa00000000000000000000/com.example.multi/3mptbyplj5c22", `{"$type":"com.example.multi","refs":["`+y+`"]}`)
	f.flush()
	var want []string
	for _, rev := range []string{"false", "true"} {
		for _, limit := range []string{"1", "2", "3", "100"} {
			q := url.Values{"subject": {x, y}, "source": {"com.example.multi:refs[]"}, "limit": {limit}, "reverse": {rev}}
			var got []string
			for _, r := range f.pageAll("/xrpc/blue.microcosm.links.getBacklinks", q, "records") { // fails on a record given twice
				got = append(got, r.DID+" "+r.Subject)
			}
			slices.Sort(got)
			if want == nil {
				want = got
			}
			if len(got) != 4 || !slices.Equal(got, want) {
				t.Fatalf("reverse %s, limit %s: %v, want the four links %v", rev, limit, got, want)
			}
		}
	}
}
