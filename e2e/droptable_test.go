package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// A links table lost from the bucket (both objects) fails the queries of
// its targets on every node; `eddy-ctl tables drop` through a follower,
// the leader SIGKILLed right after the request, takes it out of the index
// (its successor carries the request out): every target answers again,
// some without the lost links, and a crawl again (`eddy-ctl backfill
// restart`) brings them back: every node then equals the network.
func TestDropLostTableCluster(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 27, Accounts: 120})
	world.Step(4000)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	// The relay's firehose and a crawl, whose runs are kept apart (no
	// full compaction at the crawl's end, and a fan-in the flushes never
	// reach: a tree of one run would lose every link with its table);
	// replaced tables deleted at once, so that the bucket's tables are the
	// live ones.
	lc := up(t, "--flush-interval", "300ms", "--node-arg=--gc-grace=1s", "--node-arg=--compaction-fan-in=64",
		"--source", "firehose+"+sim.FirehoseURL(),
		"--source", "backfill+"+sim.RelayURL()+"?compact=false&plc="+url.QueryEscape(sim.PLCURL())+"&didweb="+url.QueryEscape(sim.PLCURL()))
	time.Sleep(time.Second)
	for range 4 { // the network goes on: flushes of the firehose beside the crawl's
		world.Step(300)
		time.Sleep(700 * time.Millisecond)
	}
	live := ingestProgress{stream: fmt.Sprint(world.LastSeq())}
	lc.waitCaughtUp(t, "the crawl and the firehose", 120*time.Second, live, nil)
	lc.waitFor(t, "no garbage left", 60*time.Second, func() error {
		if _, pending, err := lc.gcLive(); err != nil || pending > 0 {
			return fmt.Errorf("%v garbage tables pending (%v)", pending, err)
		}
		return nil
	})

	// The bucket loses the largest links table.
	store, err := local.New(filepath.Join(lc.dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	var lost string
	var lostBytes int64
	if err := store.List(context.Background(), "tables/links/", func(key string, size int64) error {
		if strings.HasSuffix(key, ".data") && size > lostBytes {
			lost, lostBytes = strings.TrimSuffix(strings.TrimPrefix(key, "tables/links/"), ".data"), size
		}
		return nil
	}); err != nil || lost == "" {
		t.Fatalf("no links table in the bucket (%v)", err)
	}
	for _, ext := range []string{".data", ".meta"} {
		if err := store.Delete(context.Background(), "tables/links/"+lost+ext); err != nil {
			t.Fatal(err)
		}
	}
	model := world.LiveLinks()
	unavailable := 0
	for target := range model {
		resp, err := http.Get("http://" + lc.Nodes[0].HTTP + "/links/all?target=" + url.QueryEscape(target))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte(`"TableUnavailable"`)) {
			unavailable++
		}
	}
	t.Logf("table %s (%d bytes) lost: %d of %d targets answered TableUnavailable", lost, lostBytes, unavailable, len(model))
	if unavailable == 0 {
		t.Fatal("no query met the lost table")
	}

	leader, _, err := lc.leaderStatus()
	if err != nil {
		t.Fatal(err)
	}
	var follower localNode
	for _, n := range lc.Nodes {
		if n.ID != leader.ID {
			follower = n
		}
	}
	out := ctl(t, "tables", "drop", "--tree", "links", "--tables", lost, "--yes", "--addr", follower.Admin, "--token-file", lc.TokenFile)
	if !strings.Contains(out, "links table "+lost) || !strings.Contains(out, "asked of leader "+leader.ID) {
		t.Fatalf("tables drop: %s", out)
	}
	killed := lc.killLeader(t)
	t.Logf("leader %s killed after the request", killed.ID)
	lc.waitCaughtUp(t, "the drop", 120*time.Second, live, func(n localNode, st cluster.NodeStatus) error {
		if p, ok := st.Extra["drops_pending"]; ok {
			return fmt.Errorf("%s: drops pending %v", n.ID, p)
		}
		return nil
	})
	missing := 0
	for _, n := range lc.Nodes {
		for target, refs := range model {
			var want []string
			for _, l := range refs {
				want = append(want, l.Source+" "+l.Path)
			}
			have := nodeLinks(t, n, target) // fails on any error answer
			for _, h := range have {
				if !slices.Contains(want, h) {
					t.Fatalf("%s: target %s answers %s, not in the network", n.ID, target, h)
				}
			}
			missing += len(want) - len(have)
		}
	}
	all := 0
	for _, refs := range model {
		all += len(refs)
	}
	t.Logf("after the drop every target answers on %d nodes; %d links of %d missing (counted on every node)", len(lc.Nodes), missing, all*len(lc.Nodes))
	if missing == 0 || missing >= all*len(lc.Nodes) {
		t.Fatalf("%d links missing after the drop of a table on %d nodes, of %d each: want some, not all", missing, len(lc.Nodes), all)
	}

	out = ctl(t, "backfill", "restart", "--yes", "--addr", follower.Admin, "--token-file", lc.TokenFile)
	if !strings.Contains(out, "crawl again asked of leader") {
		t.Fatalf("backfill restart: %s", out)
	}
	lc.waitCaughtUp(t, "the second crawl", 180*time.Second, live, func(n localNode, st cluster.NodeStatus) error {
		for k := range st.Cursors {
			if strings.HasPrefix(k, "backfill_restarted:") {
				return nil
			}
		}
		return fmt.Errorf("%s: no restart carried out yet", n.ID)
	})
	targets, links := lc.assertModel(t, world)
	t.Logf("%d targets, %d links on %d nodes: all equal to the network after the crawl again", targets, links, len(lc.Nodes))
}
