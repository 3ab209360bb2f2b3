package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// The query API against a three-node cluster loaded from the simulated
// network (backfill of the history, then the live firehose), with one hot
// target holding over 100,000 live links (the world's mega post, linked by
// 90% of record creates). In order:
//
//  1. identical answers: with the world paused and every node caught up,
//     every endpoint for hundreds of targets (the hot one included) asked
//     of all three nodes at the same X-Eddy-Generation gives byte-identical
//     bodies, equal to the model's live links;
//  2. paging the hot target with limit 100 while the world goes on, the
//     pages round-robin over the three nodes: every link live when paging
//     began and live throughout appears exactly once (the exact rule is at
//     qPageWhileIngesting);
//  3. freshness: from the moment the simulated network emits an event to
//     the moment each node first answers it, over a few hundred events;
//  4. query latency over HTTP from one follower, warm (figures only).
//
// Sizes (make test: 500 accounts, 150,000 steps, 300 targets, 300 freshness
// events, 200 latency queries per endpoint); larger runs:
//
//	EDDY_E2E_QUERY_ACCOUNTS=2000 EDDY_E2E_QUERY_STEPS=300000 EDDY_E2E_QUERY_TARGETS=2000 \
//	  EDDY_E2E_QUERY_EVENTS=1000 EDDY_E2E_QUERY_LATENCY=2000 go test -count=1 -timeout 60m -run TestQueryCluster -v ./e2e
func TestQueryCluster(t *testing.T) {
	accounts := scale("EDDY_E2E_QUERY_ACCOUNTS", 500)
	steps := scale("EDDY_E2E_QUERY_STEPS", 150000)
	nTargets := scale("EDDY_E2E_QUERY_TARGETS", 300)
	nEvents := scale("EDDY_E2E_QUERY_EVENTS", 300)
	nLatency := scale("EDDY_E2E_QUERY_LATENCY", 200)
	const flushInterval = 300 * time.Millisecond

	world := simnet.NewWorld(simnet.Config{Seed: 23, Accounts: accounts, Mega: simnet.MegaPost, MegaShare: 0.9})
	world.Step(steps / 2) // history: reached by the backfill
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	backfill := "backfill+" + sim.RelayURL() + "?plc=" + url.QueryEscape(sim.PLCURL()) + "&didweb=" + url.QueryEscape(sim.PLCURL())
	begin := time.Now()
	lc := up(t, "--flush-interval", flushInterval.String(), "--source", "firehose+"+sim.FirehoseURL(), "--source", backfill)
	live := steps - steps/2
	for i := 0; i < 30; i++ {
		world.Step(live / 30)
		time.Sleep(100 * time.Millisecond)
	}
	world.Step(live % 30)
	q := &qCluster{lc: lc, world: world, http: &http.Client{Timeout: 30 * time.Second}}
	q.floor = q.caughtUp(t)
	t.Logf("%d accounts, %d steps: loaded and caught up at generation %d in %v", accounts, steps, q.floor, time.Since(begin).Round(time.Millisecond))

	hot := world.Mega()
	model := world.LiveLinks()
	if n := len(model[hot]); n <= 100000 {
		if os.Getenv("EDDY_E2E_QUERY_STEPS") == "" && os.Getenv("EDDY_E2E_QUERY_ACCOUNTS") == "" {
			t.Fatalf("the hot target has %d live links, want over 100,000", n)
		}
		t.Logf("smaller run: the hot target has %d live links", n)
	}

	t.Run("identical", func(t *testing.T) { q.identical(t, model, hot, nTargets) })
	if t.Failed() {
		return
	}
	t.Run("paging", func(t *testing.T) { q.pageWhileIngesting(t, hot) })
	if t.Failed() {
		return
	}
	q.floor = q.caughtUp(t)
	t.Run("freshness", func(t *testing.T) { q.freshness(t, nEvents, flushInterval) })
	if t.Failed() {
		return
	}
	q.floor = q.caughtUp(t)
	t.Run("latency", func(t *testing.T) { q.latency(t, hot, nLatency) })
	t.Logf("503 NotReady answers asked again: %d", q.notReady.Load())
}

type qCluster struct {
	lc       *localCluster
	world    *simnet.World
	http     *http.Client
	floor    uint64       // minGeneration of every comparison
	asked    int          // comparisons made (each asks all three nodes)
	notReady atomic.Int64 // 503 NotReady answers asked again
}

// leader waits for a leader every node agrees on.
func (q *qCluster) leader(t *testing.T) localNode {
	t.Helper()
	var lead localNode
	q.lc.waitFor(t, "a leader", 30*time.Second, func() error {
		l, err := q.lc.leader(nil)
		lead = l
		return err
	})
	return lead
}

// caughtUp waits until the backfill is done, the firehose cursor is the
// world's last event, no resync is pending and every node serves the same
// generation; it returns that generation.
func (q *qCluster) caughtUp(t *testing.T) uint64 {
	t.Helper()
	want := fmt.Sprint(q.world.LastSeq())
	return q.lc.waitCaughtUp(t, "backfill done, stream caught up, every node serving it", 180*time.Second, ingestProgress{stream: want}, nil)
}

// get asks one node; minGen > 0 adds minGeneration.
func (q *qCluster) get(n localNode, path string, minGen uint64) (int, []byte, uint64, error) {
	return q.getCtx(context.Background(), n, path, minGen)
}

// getCtx is get with a context. A node that answers 503 NotReady (it
// knows no leader, or trails it: every node does during an election, which
// a starved machine can cause) is asked again for up to 60 s; the retries
// are counted.
func (q *qCluster) getCtx(ctx context.Context, n localNode, path string, minGen uint64) (int, []byte, uint64, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, b, gen, err := q.getOnce(ctx, n, path, minGen)
		if err != nil || st != http.StatusServiceUnavailable || !bytes.Contains(b, []byte(`"error":"NotReady"`)) || time.Now().After(deadline) {
			return st, b, gen, err
		}
		q.notReady.Add(1)
		select {
		case <-ctx.Done():
			return 0, nil, 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (q *qCluster) getOnce(ctx context.Context, n localNode, path string, minGen uint64) (int, []byte, uint64, error) {
	return getAt(ctx, q.http, n, path, minGen)
}

// getAt asks node n for path (a query string already begun) at
// minGeneration minGen (0: none), returning the status, the body and the
// generation that answered.
func getAt(ctx context.Context, c *http.Client, n localNode, path string, minGen uint64) (int, []byte, uint64, error) {
	u := "http://" + n.HTTP + path
	if minGen > 0 {
		u += "&minGeneration=" + strconv.FormatUint(minGen, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, 0, err
	}
	r, err := c.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return 0, nil, 0, err
	}
	gen, err := strconv.ParseUint(r.Header.Get("X-Eddy-Generation"), 10, 64)
	if err != nil && r.StatusCode == 200 {
		return 0, nil, 0, fmt.Errorf("%s: X-Eddy-Generation %q", u, r.Header.Get("X-Eddy-Generation"))
	}
	return r.StatusCode, b, gen, nil
}

// same asks every node for path at the same generation (at least q.floor;
// when a node has moved on, all are asked again at the newest) and
// demands byte-identical 200 answers; it returns the body.
func (q *qCluster) same(t *testing.T, path string) []byte {
	t.Helper()
	for attempt := 0; ; attempt++ {
		bodies := make([][]byte, len(q.lc.Nodes))
		gens := make([]uint64, len(q.lc.Nodes))
		errs := make([]error, len(q.lc.Nodes))
		var wg sync.WaitGroup
		for i, n := range q.lc.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, b, g, err := q.get(n, path, q.floor)
				if err == nil && st != 200 {
					err = fmt.Errorf("HTTP %d: %s", st, b)
				}
				bodies[i], gens[i], errs[i] = b, g, err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s %s: %v", q.lc.Nodes[i].ID, path, err)
			}
		}
		if top := slices.Max(gens); slices.Min(gens) != top {
			if attempt >= 20 {
				t.Fatalf("%s: the nodes never answered at one generation: %v", path, gens)
			}
			q.floor = top
			continue
		}
		for i := 1; i < len(bodies); i++ {
			if !bytes.Equal(bodies[0], bodies[i]) {
				t.Fatalf("%s at generation %d:\n%s answered %s\n%s answered %s", path, gens[0], q.lc.Nodes[0].ID, qClip(bodies[0]), q.lc.Nodes[i].ID, qClip(bodies[i]))
			}
		}
		q.asked++
		return bodies[0]
	}
}

func qClip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

func qDecode(t *testing.T, path string, b []byte, out any) {
	t.Helper()
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v: %s", path, err, qClip(b))
	}
}

// qKey names one link independently of the path style: Constellation's
// ".subject.uri" and seed 000's "$.subject" (a strong reference at its own
// path) are the same link. The model's keys are checked for collisions.
func qKey(source, path string) string {
	return source + " " + strings.TrimSuffix(strings.TrimPrefix(path, "$"), ".uri")
}

func qKeys(t *testing.T, refs []simnet.LinkRef) map[string]bool {
	t.Helper()
	out := make(map[string]bool, len(refs))
	for _, r := range refs {
		out[qKey(r.Source, r.Path)] = true
	}
	if len(out) != len(refs) {
		t.Fatalf("%d links make %d keys: the path-style-free key collides", len(refs), len(out))
	}
	return out
}

// qSplit splits an at-uri into DID, collection and record key.
func qSplit(uri string) (did, coll, rkey string) {
	p := strings.SplitN(strings.TrimPrefix(uri, "at://"), "/", 3)
	for len(p) < 3 {
		p = append(p, "")
	}
	return p[0], p[1], p[2]
}

func qSortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func qDiff(have, want map[string]bool) string {
	var missing, extra []string
	for k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	for k := range have {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 5 {
		missing = append(missing[:5], "…")
	}
	if len(extra) > 5 {
		extra = append(extra[:5], "…")
	}
	return fmt.Sprintf("%d missing %v, %d extra %v", len(qCount(want, have)), missing, len(qCount(have, want)), extra)
}

func qCount(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	return out
}

// qTargets picks the targets to compare: the hot one, the ten most
// linked, an even spread over the sorted rest (at-uris, DIDs and URLs) and
// two that nothing links to.
func qTargets(model map[string][]simnet.LinkRef, hot string, n int) []string {
	all := make([]string, 0, len(model))
	for k := range model {
		all = append(all, k)
	}
	slices.Sort(all)
	pick := map[string]bool{hot: true}
	byLinks := slices.Clone(all)
	sort.SliceStable(byLinks, func(i, j int) bool { return len(model[byLinks[i]]) > len(model[byLinks[j]]) })
	for _, k := range byLinks[:min(10, len(byLinks))] {
		pick[k] = true
	}
	if n <= 0 || n >= len(all) {
		for _, k := range all {
			pick[k] = true
		}
	} else {
		for i := 0; len(pick) < n; i++ {
			pick[all[i*len(all)/n%len(all)]] = true
			if i > 2*n {
				break
			}
		}
	}
	out := qSortedKeys(pick)
	return append(out, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "https://nobody.example.org/links/here")
}

// identical compares every endpoint on all three nodes, and with the
// model, for the chosen targets.
func (q *qCluster) identical(t *testing.T, model map[string][]simnet.LinkRef, hot string, n int) {
	targets := qTargets(model, hot, n)
	start := time.Now()
	kinds := map[string]int{}
	links := 0
	for _, tg := range targets {
		switch {
		case strings.HasPrefix(tg, "at://"):
			kinds["at-uri"]++
		case strings.HasPrefix(tg, "did:"):
			kinds["DID"]++
		default:
			kinds["URL"]++
		}
		t0 := time.Now()
		q.compareTarget(t, tg, model[tg], tg == hot)
		if tg == hot {
			t.Logf("the hot target: %v", time.Since(t0).Round(time.Millisecond))
		}
		links += len(model[tg])
	}
	// A DID target asked as at://did answers what did: answers.
	for _, tg := range targets {
		if strings.HasPrefix(tg, "did:") && len(model[tg]) > 0 {
			a := q.same(t, "/xrpc/blue.cerulea.backlinks.listBacklinks?limit=1000&target="+url.QueryEscape(tg))
			b := q.same(t, "/xrpc/blue.cerulea.backlinks.listBacklinks?limit=1000&target="+url.QueryEscape("at://"+tg))
			if !bytes.Equal(a, b) {
				t.Fatalf("%s and at://%s answer differently:\n%s\n%s", tg, tg, qClip(a), qClip(b))
			}
			break
		}
	}
	t.Logf("%d targets (%v; %d links, the hot one %d): %d requests asked of all 3 nodes, byte-identical at one generation and equal to the model, in %v",
		len(targets), kinds, links, len(model[hot]), q.asked, time.Since(start).Round(time.Millisecond))
	fmt.Printf("e2e query: %d targets, %d links (hot target %d), %d requests × 3 nodes: identical, equal to the model\n", len(targets), links, len(model[hot]), q.asked)
}

type qGroup struct {
	coll, path string
	sources    []string // sorted
}

func (q *qCluster) compareTarget(t *testing.T, tg string, refs []simnet.LinkRef, hot bool) {
	t.Helper()
	et := url.QueryEscape(tg)
	want := qKeys(t, refs)

	// Groups by collection and path, as the Constellation endpoints see them.
	byGroup := map[string]*qGroup{}
	for _, r := range refs {
		_, coll, _ := qSplit(r.Source)
		k := coll + ":" + r.Path
		if byGroup[k] == nil {
			byGroup[k] = &qGroup{coll: coll, path: r.Path}
		}
		byGroup[k].sources = append(byGroup[k].sources, r.Source)
	}
	groups := make([]*qGroup, 0, len(byGroup))
	for _, g := range byGroup {
		slices.Sort(g.sources)
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].coll+groups[i].path < groups[j].coll+groups[j].path })

	// /links/all: records and distinct DIDs per collection and path.
	p := "/links/all?target=" + et
	var all struct {
		Links map[string]map[string]struct {
			Records      int `json:"records"`
			DistinctDids int `json:"distinct_dids"`
		} `json:"links"`
	}
	qDecode(t, p, q.same(t, p), &all)
	nAll := 0
	for _, paths := range all.Links {
		nAll += len(paths)
	}
	if nAll != len(groups) {
		t.Fatalf("%s: /links/all has %d collection:path entries, the model %d", p, nAll, len(groups))
	}
	for _, g := range groups {
		have := all.Links[g.coll][g.path]
		dids := map[string]bool{}
		for _, s := range g.sources {
			d, _, _ := qSplit(s)
			dids[d] = true
		}
		if have.Records != len(g.sources) || have.DistinctDids != len(dids) {
			t.Fatalf("%s: %s %s: %d records, %d DIDs; the model %d, %d", p, g.coll, g.path, have.Records, have.DistinctDids, len(g.sources), len(dids))
		}
	}

	// listBacklinks, every page, limit 1000; small targets also limit 7.
	limits := []int{1000}
	if len(refs) <= 300 {
		limits = append(limits, 7)
	}
	for _, limit := range limits {
		have := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			p := fmt.Sprintf("/xrpc/blue.cerulea.backlinks.listBacklinks?limit=%d&target=%s", limit, et)
			if cursor != "" {
				p += "&cursor=" + url.QueryEscape(cursor)
			}
			var page struct {
				Backlinks map[string][]string `json:"backlinks"`
				Cursor    *string             `json:"cursor"`
			}
			qDecode(t, p, q.same(t, p), &page)
			n := 0
			for path, srcs := range page.Backlinks {
				if !strings.HasPrefix(path, "$.") {
					t.Fatalf("%s: path %q", p, path)
				}
				for _, s := range srcs {
					k := qKey(s, path)
					if have[k] {
						t.Fatalf("%s: %s twice", p, k)
					}
					have[k] = true
					n++
				}
			}
			if n > limit || (page.Cursor != nil && n != limit) {
				t.Fatalf("%s: %d links on a page of limit %d, cursor %v", p, n, limit, page.Cursor != nil)
			}
			if page.Cursor == nil {
				break
			}
			cursor = *page.Cursor
		}
		if len(have) != len(want) || len(qCount(want, have)) != 0 {
			t.Fatalf("listBacklinks %s (limit %d): %s", tg, limit, qDiff(have, want))
		}
	}

	for _, g := range groups {
		q.compareGroup(t, tg, g, hot)
	}
	// An unknown collection:path and a DID that links nothing: empty answers.
	for _, extra := range []string{"&source=" + url.QueryEscape("com.example.nothing:subject.uri"), "&source=app.bsky.feed.like:subject.uri&did=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"} {
		p := "/xrpc/blue.microcosm.links.getBacklinks?subject=" + et + extra
		var page struct {
			Total   int               `json:"total"`
			Records []json.RawMessage `json:"records"`
			Cursor  *string           `json:"cursor"`
		}
		qDecode(t, p, q.same(t, p), &page)
		if page.Total != 0 || len(page.Records) != 0 || page.Cursor != nil {
			t.Fatalf("%s: %s", p, q.same(t, p))
		}
	}
}

type qRecordsPage struct {
	Total   int `json:"total"`
	Records []struct {
		DID        string `json:"did"`
		Collection string `json:"collection"`
		RKey       string `json:"rkey"`
	} `json:"records"`
	Cursor *string `json:"cursor"`
}

// pages pages getBacklinks (base has subject and source) up to maxPages
// (0: all) and returns the sources in answer order and whether it reached
// the end.
func (q *qCluster) pages(t *testing.T, base string, maxPages int, total int) ([]string, bool) {
	t.Helper()
	var out []string
	cursor := ""
	for pages := 0; maxPages == 0 || pages < maxPages; pages++ {
		p := base
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		var page qRecordsPage
		qDecode(t, p, q.same(t, p), &page)
		if total >= 0 && page.Total != total {
			t.Fatalf("%s: total %d, the model %d", p, page.Total, total)
		}
		for _, r := range page.Records {
			out = append(out, "at://"+r.DID+"/"+r.Collection+"/"+r.RKey)
		}
		if page.Cursor == nil {
			return out, true
		}
		cursor = *page.Cursor
	}
	return out, false
}

// compareGroup checks the Constellation endpoints for one collection:path
// of one target.
func (q *qCluster) compareGroup(t *testing.T, tg string, g *qGroup, hot bool) {
	t.Helper()
	src := url.QueryEscape(g.coll + ":" + strings.TrimPrefix(g.path, "."))
	base := "subject=" + url.QueryEscape(tg) + "&source=" + src
	n := len(g.sources)

	// getBacklinksCount.
	p := "/xrpc/blue.microcosm.links.getBacklinksCount?" + base
	var cnt struct {
		Total int `json:"total"`
	}
	qDecode(t, p, q.same(t, p), &cnt)
	if cnt.Total != n {
		t.Fatalf("%s: %d, the model %d", p, cnt.Total, n)
	}

	// getBacklinks forward, limit 100: every page (the first 2 of a group
	// over 2,000 links: each page of the hot target counts its links).
	maxPages := 0
	if n > 2000 {
		maxPages = 2
	}
	fwd, done := q.pages(t, "/xrpc/blue.microcosm.links.getBacklinks?limit=100&"+base, maxPages, n)
	if dup := qDup(fwd); dup != "" {
		t.Fatalf("getBacklinks %s: %s twice", base, dup)
	}
	for _, s := range fwd {
		if _, ok := slices.BinarySearch(g.sources, s); !ok {
			t.Fatalf("getBacklinks %s: %s is not a live link of the model", base, s)
		}
	}
	if done && len(fwd) != n {
		t.Fatalf("getBacklinks %s: %d records, the model %d", base, len(fwd), n)
	}
	if !done && len(fwd) != 100*maxPages {
		t.Fatalf("getBacklinks %s: %d records in %d full pages", base, len(fwd), maxPages)
	}
	// Reverse: the same order backwards.
	rev, rdone := q.pages(t, "/xrpc/blue.microcosm.links.getBacklinks?limit=100&reverse=true&"+base, min(maxPages, 1), n)
	if rdone != done || (done && !slices.Equal(qReversed(rev), fwd)) {
		t.Fatalf("getBacklinks %s reverse=true: %d records (end %v), not the %d forward ones reversed", base, len(rev), rdone, len(fwd))
	}
	if !rdone { // over 2,000 links: the last 100 are not among the first 200
		for _, s := range rev {
			if _, ok := slices.BinarySearch(g.sources, s); !ok || slices.Contains(fwd, s) {
				t.Fatalf("getBacklinks %s reverse=true: %s unexpected (in the model %v, also forward %v)", base, s, ok, slices.Contains(fwd, s))
			}
		}
	}
	// Small pages: the first pages of limit 5 are the forward order's head.
	small, _ := q.pages(t, "/xrpc/blue.microcosm.links.getBacklinks?limit=5&"+base, 2, n)
	if !slices.Equal(small, fwd[:min(len(fwd), 10)]) {
		t.Fatalf("getBacklinks %s limit 5: %v, forward order starts %v", base, small, fwd[:min(len(fwd), 10)])
	}
	// The did filter: the two accounts with the fewest links here.
	per := map[string][]string{}
	for _, s := range g.sources {
		d, _, _ := qSplit(s)
		per[d] = append(per[d], s)
	}
	dids := make([]string, 0, len(per))
	for d := range per {
		dids = append(dids, d)
	}
	sort.Slice(dids, func(i, j int) bool {
		if len(per[dids[i]]) != len(per[dids[j]]) {
			return len(per[dids[i]]) < len(per[dids[j]])
		}
		return dids[i] < dids[j]
	})
	pick := dids[:min(2, len(dids))]
	var wantDID []string
	fp := "/xrpc/blue.microcosm.links.getBacklinks?limit=100&" + base
	for _, d := range pick {
		fp += "&did=" + url.QueryEscape(d)
		wantDID = append(wantDID, per[d]...)
	}
	slices.Sort(wantDID)
	haveDID, _ := q.pages(t, fp, 0, len(wantDID))
	slices.Sort(haveDID)
	if !slices.Equal(haveDID, wantDID) {
		t.Fatalf("%s: %d records, the model %d", fp, len(haveDID), len(wantDID))
	}

	// getBacklinkDids, every page of 100 (a page of 7 for small groups).
	limit := 100
	if len(per) <= 30 {
		limit = 7
	}
	seen := map[string]bool{}
	cursor := ""
	for {
		p := fmt.Sprintf("/xrpc/blue.microcosm.links.getBacklinkDids?limit=%d&%s", limit, base)
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Total       int      `json:"total"`
			LinkingDids []string `json:"linking_dids"`
			Cursor      *string  `json:"cursor"`
		}
		qDecode(t, p, q.same(t, p), &page)
		if page.Total != len(per) {
			t.Fatalf("%s: total %d, the model %d DIDs", p, page.Total, len(per))
		}
		for _, d := range page.LinkingDids {
			if seen[d] || per[d] == nil {
				t.Fatalf("%s: %s twice or not linking (model %d links)", p, d, len(per[d]))
			}
			seen[d] = true
		}
		if page.Cursor == nil {
			break
		}
		cursor = *page.Cursor
	}
	if len(seen) != len(per) {
		t.Fatalf("getBacklinkDids %s: %d DIDs, the model %d", base, len(seen), len(per))
	}
}

func qDup(xs []string) string {
	seen := make(map[string]bool, len(xs))
	for _, x := range xs {
		if seen[x] {
			return x
		}
		seen[x] = true
	}
	return ""
}

func qReversed(xs []string) []string {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}

// pageWhileIngesting pages the hot target with listBacklinks, limit 100,
// round-robin over the three nodes, while the world goes on (creates that
// mostly link the hot target, deletes, updates, account events).
//
// The rule, from the issue ("returns every link that was live before
// paging began, exactly once"), made exact: S0 is the model's live set
// when paging begins (world paused at relay seq0, every node serving a
// generation that holds seq0; every page asks minGeneration of it).
//   - No link appears twice.
//   - Every link of S0 that stayed live throughout appears: its record was
//     not deleted during paging, no update during paging wrote a version
//     without it, and its account's status did not change.
//   - A link of S0 that stopped being live during paging may appear or not
//     (it appears when its page was read before the removal reached the
//     node that answered). So may a link that became live during paging: a
//     create or update wrote it, or its account was reactivated (the
//     repository's existing records come back). Nothing else appears: no
//     link that was never live.
//
// (Over 120 lines: one scenario: paging both APIs in both directions while links arrive.)
func (q *qCluster) pageWhileIngesting(t *testing.T, hot string) {
	seq0 := q.world.LastSeq()
	startLinks := q.world.LiveLinksTo(hot)
	s0 := qKeys(t, startLinks)
	startBySource := map[string][]string{}
	for _, r := range startLinks {
		startBySource[r.Source] = append(startBySource[r.Source], qKey(r.Source, r.Path))
	}

	stop := make(chan struct{})
	stepped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				stepped <- n
				return
			default:
			}
			q.world.Step(40)
			n += 40
			time.Sleep(100 * time.Millisecond)
		}
	}()
	seen := map[string]int{}
	gens := map[uint64]bool{}
	byNode := map[string]int{}
	cursor := ""
	pages := 0
	// Paging lasts at least 3 s (ten flush intervals), however fast the
	// machine: the pages must span generations the world changed.
	pace := 3 * time.Second / time.Duration(len(startLinks)/100+1)
	start := time.Now()
	for ; ; pages++ {
		if ahead := time.Duration(pages)*pace - time.Since(start); ahead > 0 {
			time.Sleep(ahead)
		}
		n := q.lc.Nodes[pages%len(q.lc.Nodes)]
		p := "/xrpc/blue.cerulea.backlinks.listBacklinks?limit=100&target=" + url.QueryEscape(hot)
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		st, b, gen, err := q.get(n, p, q.floor)
		if err != nil || st != 200 {
			close(stop)
			<-stepped
			t.Fatalf("page %d from %s: HTTP %d %v: %s", pages, n.ID, st, err, qClip(b))
		}
		gens[gen] = true
		byNode[n.ID]++
		var page struct {
			Backlinks map[string][]string `json:"backlinks"`
			Cursor    *string             `json:"cursor"`
		}
		qDecode(t, p, b, &page)
		for path, srcs := range page.Backlinks {
			for _, s := range srcs {
				seen[qKey(s, path)]++
			}
		}
		if page.Cursor == nil {
			break
		}
		cursor = *page.Cursor
	}
	took := time.Since(start)
	close(stop)
	steps := <-stepped

	// What happened to the hot target's links meanwhile.
	written := map[string]bool{}  // keys written during paging
	gone := map[string]bool{}     // keys that were not live throughout
	accounts := map[string]bool{} // DIDs whose status changed
	for _, c := range q.world.ChangesSince(seq0) {
		switch c.Action {
		case "account":
			accounts[c.DID] = true
		case "delete":
			gone[c.Source] = true
		case "create", "update":
			var ks []string
			for _, l := range c.Links {
				if l.Target == hot {
					ks = append(ks, qKey(c.Source, l.Path))
				}
			}
			for _, k := range ks {
				written[k] = true
			}
			if c.Action == "update" {
				// A start link this version lacks stopped being live.
				for _, k := range startBySource[c.Source] {
					if !slices.Contains(ks, k) {
						gone[k] = true
					}
				}
			}
		}
	}
	var bad []string // what breaks the rule
	required, mayLack := 0, 0
	for _, r := range startLinks {
		k := qKey(r.Source, r.Path)
		did, _, _ := qSplit(r.Source)
		if gone[k] || gone[r.Source] || accounts[did] {
			mayLack++
			continue
		}
		required++
		if seen[k] != 1 {
			bad = append(bad, fmt.Sprintf("start link %s, live throughout, appeared %d times", k, seen[k]))
		}
	}
	added, restored, startSeen := 0, 0, 0
	for k, c := range seen {
		if c > 1 {
			bad = append(bad, fmt.Sprintf("%s appeared %d times", k, c))
		}
		did, _, _ := qSplit(k)
		switch {
		case s0[k]:
			startSeen++
		case written[k]:
			added++
		case accounts[did]:
			restored++ // an existing record of a reactivated account
		default:
			bad = append(bad, k+" appeared, but was not live when paging began, nor written since, nor of an account whose status changed")
		}
	}
	writtenNew := 0
	for k := range written {
		if !s0[k] {
			writtenNew++
		}
	}
	t.Logf("%d pages (by node %v) in %v over %d generations while the world took %d steps (%d new hot links written, %d start links deleted, updated away or of an account whose status changed): %d distinct links seen: %d of the %d start links (all %d that stayed live), %d new, %d of reactivated accounts",
		pages+1, byNode, took.Round(time.Millisecond), len(gens), steps, writtenNew, mayLack, len(seen), startSeen, len(s0), required, added, restored)
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Fatalf("%d links break the paging rule, e.g.:\n%s", len(bad), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}
	fmt.Printf("e2e query: paged the %d-link target with limit 100 over 3 nodes during ingest: %d pages, %d generations, every start link live throughout seen exactly once (%d), no duplicates\n",
		len(s0), pages+1, len(gens), required)
	// The run must have had something to prove: the pages spanned new
	// generations, and links were both written and removed meanwhile.
	if len(gens) < 3 || writtenNew == 0 || mayLack == 0 {
		t.Fatalf("paging saw %d generations, %d new links, %d removed: no concurrent ingest to speak of", len(gens), writtenNew, mayLack)
	}
	if len(s0) >= 100000 && pages < 1000 {
		t.Fatalf("%d pages for %d links at limit 100", pages+1, len(s0))
	}
}

// qFresh is one link an event wrote, followed until each node answers it.
type qFresh struct {
	seq      int64
	emitted  time.Time
	path     string // getBacklinks query that finds it: subject, source, did, newest first (TID record keys order sources)
	source   string
	answered []time.Duration // per node; 0 until answered (under the mutex)
	dropped  bool            // changed again before every node answered: not measured
}

// freshness steps the world one operation at a time (5–25 ms after each
// measured one) and
// measures, for the first link of each record a create wrote to a target
// of up to 1,000 links, the time from the event's emission (Step
// returning: the servers send it at once) to the first moment each node
// serves a generation whose answer holds it.
// Every node is long-polled for its next generation (minGeneration=g+1 on
// a query that costs nothing) and, on each new generation, asked for the
// pending links emitted before it was seen.
// (Over 120 lines: one measurement: emit, poll every node, tabulate.)
func (q *qCluster) freshness(t *testing.T, nEvents int, flushInterval time.Duration) {
	lead := q.leader(t)
	var mu sync.Mutex
	var events []*qFresh
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(q.lc.Nodes))
	for ni, n := range q.lc.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gen := q.floor
			next := 0 // events before next are answered on n
			for ctx.Err() == nil {
				st, b, g, err := q.getCtx(ctx, n, "/xrpc/blue.microcosm.links.getBacklinksCount?subject=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa&source=app.bsky.feed.like:subject.uri", gen+1)
				if ctx.Err() != nil {
					return
				}
				if err != nil || (st != 200 && st != 503) {
					errs <- fmt.Errorf("%s: generation poll: HTTP %d %v %s", n.ID, st, err, b)
					return
				}
				if st == 503 { // no new generation for 5 s
					continue
				}
				seenAt := time.Now()
				gen = g
				mu.Lock()
				pending := events[next:]
				mu.Unlock()
				for _, ev := range pending {
					if !ev.emitted.Before(seenAt) {
						break
					}
					mu.Lock()
					skip := ev.answered[ni] != 0 || ev.dropped
					mu.Unlock()
					if skip {
						continue
					}
					st, b, ag, err := q.getCtx(ctx, n, ev.path, gen)
					if ctx.Err() != nil {
						return
					}
					if err != nil || st != 200 {
						errs <- fmt.Errorf("%s %s: HTTP %d %v %s", n.ID, ev.path, st, err, b)
						return
					}
					var page qRecordsPage
					if err := json.Unmarshal(b, &page); err != nil {
						errs <- err
						return
					}
					found := false
					for _, r := range page.Records {
						found = found || "at://"+r.DID+"/"+r.Collection+"/"+r.RKey == ev.source
					}
					if !found {
						continue
					}
					at := seenAt
					if ag != gen {
						at = time.Now() // a newer generation than the one seen answered
					}
					mu.Lock()
					ev.answered[ni] = at.Sub(ev.emitted)
					mu.Unlock()
				}
				mu.Lock()
				for next < len(events) && (events[next].answered[ni] != 0 || events[next].dropped) {
					next++
				}
				mu.Unlock()
			}
		}()
	}
	stopAll := func() { cancel(); wg.Wait() }

	// Links to targets with up to 1,000 live links only: a query that
	// finds one link among the hot target's would cost as much as counting
	// them all (getBacklinks counts) and would measure the check, not the
	// pipeline. The hot target's links flow all the same.
	popular := map[string]bool{}
	for tg, refs := range q.world.LiveLinks() {
		if len(refs) > 1000 {
			popular[tg] = true
		}
	}
	rng := rand.New(rand.NewPCG(8, 9))
	seq0 := q.world.LastSeq()
	start := time.Now()
	for n := 0; n < nEvents; {
		seq := q.world.LastSeq()
		q.world.Step(1)
		at := time.Now()
		for _, c := range q.world.ChangesSince(seq) {
			i := slices.IndexFunc(c.Links, func(l simnet.WrittenLink) bool { return !popular[l.Target] })
			if c.Action != "create" || i < 0 {
				continue
			}
			l := c.Links[i]
			did, coll, _ := qSplit(c.Source)
			ev := &qFresh{seq: c.Seq, emitted: at, source: c.Source, answered: make([]time.Duration, len(q.lc.Nodes)),
				path: "/xrpc/blue.microcosm.links.getBacklinks?reverse=true&limit=100&subject=" + url.QueryEscape(l.Target) +
					"&source=" + url.QueryEscape(coll+":"+strings.TrimPrefix(l.Path, ".")) + "&did=" + url.QueryEscape(did)}
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
			n++
			// Spread the measured events over the flush cycle.
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
			break
		}
	}
	emitting := time.Since(start)
	// A record deleted or updated, or an account whose status changed,
	// after the create may never be answered as created: not measured.
	changed := map[string]int64{}
	for _, c := range q.world.ChangesSince(seq0) {
		switch c.Action {
		case "update", "delete":
			changed[c.Source] = c.Seq
		case "account":
			changed[c.DID] = c.Seq
		}
	}
	mu.Lock()
	dropped := 0
	for _, ev := range events {
		did, _, _ := qSplit(ev.source)
		if changed[ev.source] > ev.seq || changed[did] > ev.seq {
			ev.dropped = true
			dropped++
		}
	}
	mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		left := 0
		for _, ev := range events {
			if !ev.dropped && slices.Contains(ev.answered, 0) {
				left++
			}
		}
		mu.Unlock()
		if left == 0 {
			break
		}
		select {
		case err := <-errs:
			stopAll()
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			stopAll()
			t.Fatalf("%d of %d links not answered by every node within 60 s of the last event", left, len(events))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopAll()

	var followers []time.Duration
	var lines []string
	for ni, n := range q.lc.Nodes {
		var ds []time.Duration
		for _, ev := range events {
			if !ev.dropped {
				ds = append(ds, ev.answered[ni])
			}
		}
		role := "follower"
		if n.ID == lead.ID {
			role = "leader"
		} else {
			followers = append(followers, ds...)
		}
		lines = append(lines, fmt.Sprintf("%s (%s) p50 %v p90 %v max %v", n.ID, role, qPct(ds, 50), qPct(ds, 90), qPct(ds, 100)))
	}
	measured := len(events) - dropped
	t.Logf("freshness over %d events emitted in %v (%d more changed again before answered, not measured), flush interval %v: %s",
		measured, emitting.Round(time.Millisecond), dropped, flushInterval, strings.Join(lines, "; "))
	fmt.Printf("e2e query: freshness, emit to answer, %d events × 2 followers, flush interval %v: p50 %v, p90 %v, max %v\n",
		measured, flushInterval, qPct(followers, 50), qPct(followers, 90), qPct(followers, 100))
	if measured < nEvents*9/10 {
		t.Fatalf("only %d of %d events measured", measured, nEvents)
	}
}

// qPct returns the p-th percentile (nearest rank), rounded to 0.1 ms.
func qPct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(100 * time.Microsecond)
}

// qCPU returns a process's user+system CPU time (clock ticks of 10 ms).
func qCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// latency measures queries over HTTP from one follower, warm (each query
// asked once before the measured pass), one at a time: every endpoint on
// targets with 1 to 1,000 links, and getBacklinksCount on the hot target.
// Figures only; the answers are checked against the model.
func (q *qCluster) latency(t *testing.T, hot string, n int) {
	lead := q.leader(t)
	node := q.lc.Nodes[0]
	if node.ID == lead.ID {
		node = q.lc.Nodes[1]
	}
	model := q.world.LiveLinks()
	var small []string
	for tg, refs := range model {
		if len(refs) <= 1000 {
			small = append(small, tg)
		}
	}
	slices.Sort(small)
	rng := rand.New(rand.NewPCG(10, 11))
	rng.Shuffle(len(small), func(i, j int) { small[i], small[j] = small[j], small[i] })
	small = small[:min(n, len(small))]
	type qq struct {
		endpoint, path string
		total          int // getBacklinksCount's answer, -1 unchecked
	}
	var qs []qq
	for _, tg := range small {
		refs := model[tg]
		_, coll, _ := qSplit(refs[0].Source)
		src := url.QueryEscape(coll + ":" + strings.TrimPrefix(refs[0].Path, "."))
		inGroup := 0
		for _, r := range refs {
			if _, c, _ := qSplit(r.Source); c == coll && r.Path == refs[0].Path {
				inGroup++
			}
		}
		et := url.QueryEscape(tg)
		qs = append(qs,
			qq{"listBacklinks", "/xrpc/blue.cerulea.backlinks.listBacklinks?target=" + et, -1},
			qq{"getBacklinks", "/xrpc/blue.microcosm.links.getBacklinks?subject=" + et + "&source=" + src, -1},
			qq{"getBacklinksCount", "/xrpc/blue.microcosm.links.getBacklinksCount?subject=" + et + "&source=" + src, inGroup},
			qq{"getBacklinkDids", "/xrpc/blue.microcosm.links.getBacklinkDids?subject=" + et + "&source=" + src, -1},
			qq{"links/all", "/links/all?target=" + et, -1})
	}
	hotLikes := 0
	for _, r := range model[hot] {
		if _, c, _ := qSplit(r.Source); c == "app.bsky.feed.like" && r.Path == ".subject.uri" {
			hotLikes++
		}
	}
	var hotQs []qq
	for i := 0; i < 10; i++ {
		hotQs = append(hotQs, qq{"hot getBacklinksCount", "/xrpc/blue.microcosm.links.getBacklinksCount?subject=" + url.QueryEscape(hot) + "&source=app.bsky.feed.like:subject.uri", hotLikes})
	}
	ask := func(x qq) time.Duration {
		t0 := time.Now()
		st, b, _, err := q.get(node, x.path, 0)
		d := time.Since(t0)
		if err != nil || st != 200 {
			t.Fatalf("%s: HTTP %d %v %s", x.path, st, err, b)
		}
		if x.total >= 0 {
			var c struct{ Total int }
			if json.Unmarshal(b, &c) != nil || c.Total != x.total {
				t.Fatalf("%s: %s, the model %d", x.path, b, x.total)
			}
		}
		return d
	}
	by := map[string][]time.Duration{}
	var all []time.Duration
	// pass asks the first warm queries unmeasured (warm-up), then every
	// one measured, and returns the node's CPU time per measured query.
	pass := func(qs []qq, warm int) (time.Duration, error) {
		for _, x := range qs[:warm] {
			ask(x)
		}
		cpu0, err := qCPU(node.PID)
		for _, x := range qs {
			d := ask(x)
			by[x.endpoint] = append(by[x.endpoint], d)
			if !strings.HasPrefix(x.endpoint, "hot") {
				all = append(all, d)
			}
		}
		cpu1, err1 := qCPU(node.PID)
		if err == nil {
			err = err1
		}
		return (cpu1 - cpu0) / time.Duration(len(qs)), err
	}
	retried := q.notReady.Load()
	start := time.Now()
	cpuSmall, err1 := pass(qs, len(qs))
	wall := time.Since(start)
	cpuHot, err2 := pass(hotQs, 2) // the same query: the first answer warms the cache
	load, _ := os.ReadFile("/proc/loadavg")
	var lines []string
	for _, e := range []string{"listBacklinks", "getBacklinks", "getBacklinksCount", "getBacklinkDids", "links/all", "hot getBacklinksCount"} {
		ds := by[e]
		lines = append(lines, fmt.Sprintf("%s (%d): p50 %v p99 %v max %v", e, len(ds), qPct(ds, 50), qPct(ds, 99), qPct(ds, 100)))
	}
	cpuNote := "node CPU unknown"
	if err1 == nil && err2 == nil {
		cpuNote = fmt.Sprintf("node CPU per query %v (≤1,000 links), %v (hot count)", cpuSmall.Round(time.Microsecond), cpuHot.Round(100*time.Microsecond))
	}
	if r := q.notReady.Load() - retried; r > 0 {
		cpuNote += fmt.Sprintf("; %d NotReady retries during the measurement, included", r)
	}
	t.Logf("latency from %s over HTTP, warm, one at a time, %d targets of 1–1,000 links, in %v (%s; load %s): %s",
		node.ID, len(small), wall.Round(time.Millisecond), cpuNote, strings.TrimSpace(string(load)), strings.Join(lines, "; "))
	fmt.Printf("e2e query: latency, %d targets of ≤1,000 links, all endpoints: p50 %v p99 %v; getBacklinksCount on the %d-link target (%d likes): p50 %v max %v; %s\n",
		len(small), qPct(all, 50), qPct(all, 99), len(model[hot]), hotLikes, qPct(by["hot getBacklinksCount"], 50), qPct(by["hot getBacklinksCount"], 100), cpuNote)
}
