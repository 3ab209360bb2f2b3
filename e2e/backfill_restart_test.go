package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// A cluster whose only source is a backfill misses what the network does
// after the crawl; `eddy-ctl backfill restart` crawls it again, the leader
// SIGKILLed as it starts (its successor carries the request out), and
// every node then equals the network as it is now: records created and
// deleted since, accounts gone since, every link once.
func TestBackfillRestartCluster(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 21, Accounts: 120})
	world.Step(4000)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	lc := up(t, "--flush-interval", "300ms", "--source", "backfill+"+sim.RelayURL()+"?plc="+url.QueryEscape(sim.PLCURL())+"&didweb="+url.QueryEscape(sim.PLCURL()))
	lc.waitCaughtUp(t, "the first crawl", 120*time.Second, ingestProgress{}, nil)

	world.Step(4000) // the network goes on; no stream follows it
	var admins []string
	for _, n := range lc.Nodes {
		admins = append(admins, n.Admin)
	}
	out := ctl(t, "backfill", "restart", "--yes", "--addr", strings.Join(admins, ","), "--token-file", lc.TokenFile)
	if !strings.Contains(out, "crawl again asked of leader") {
		t.Fatalf("backfill restart: %s", out)
	}
	killed := lc.killLeader(t)
	t.Logf("leader %s killed after the request", killed.ID)
	lc.waitCaughtUp(t, "the second crawl", 180*time.Second, ingestProgress{}, func(n localNode, st cluster.NodeStatus) error {
		for k := range st.Cursors {
			if strings.HasPrefix(k, "backfill_restarted:") {
				return nil
			}
		}
		return fmt.Errorf("%s: no restart carried out yet", n.ID)
	})
	targets, links := lc.assertModel(t, world)
	t.Logf("%d targets, %d links on %d nodes: all equal to the network after the second crawl", targets, links, len(lc.Nodes))
}
