package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// A three-node cluster whose bucket (a real MinIO) is behind an HTTP
// proxy failing one request in ten of every kind (503 SlowDown, 500,
// connections reset, GET bodies cut half way, answers held back 100 ms to
// 2 s; seeded), flushing every 200 ms and compacting pairs of runs, so
// that the bucket is read and written all along:
//  1. a simulated network's firehose is ingested while the faults go on,
//     and every node catches up;
//  2. targets of every size, asked through eddy-ctl query with the nodes
//     in turn first, answer exactly the model's links: no failed query,
//     no short answer;
//  3. more of the network is ingested under the faults, which then stop:
//     ingest catches up within a minute.
func TestStoreFaultsCluster(t *testing.T) {
	endpoint, access, secret := miniotest.StartMinIO(t)
	fp, err := miniotest.NewFaultProxy(endpoint, 15)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	keys := t.TempDir()
	for name, v := range map[string]string{"access": access, "secret": secret} {
		if err := os.WriteFile(filepath.Join(keys, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store := fmt.Sprintf("s3://%s/storefaults?endpoint=%s&insecure=true&region=us-east-1&access_key_file=%s&secret_key_file=%s",
		miniotest.Bucket, fp.Endpoint(), filepath.Join(keys, "access"), filepath.Join(keys, "secret"))

	// 1. Ingest under faults. PUTs are few (a flush or a compaction
	// each: a few dozen here), so they fail at 30%: at 10% a run could
	// end with none failed, and the check below would hold by chance.
	fp.SetRate("", 0.1)
	fp.SetRate("put", 0.3)
	start := time.Now()
	lc, world := simCluster(t, t.TempDir(), 15, "--store", store, "--node-arg=--compaction-interval=500ms", "--node-arg=--compaction-fan-in=2")
	for range 20 {
		world.Step(1500)
		time.Sleep(150 * time.Millisecond)
	}
	caughtUp := func(what string, timeout time.Duration) { lc.caughtUpWith(t, world, what, timeout) }
	caughtUp("every node caught up with the store failing", 3*time.Minute)
	t.Logf("30,000 steps ingested with 10%% of store requests (30%% of PUTs) failing: caught up %v after the start", time.Since(start).Round(time.Millisecond))

	// 2. Queries under faults.
	model := world.LiveLinks()
	targets := sampleTargets(model, 240)
	var addrs []string
	for _, n := range lc.Nodes {
		addrs = append(addrs, "http://"+n.HTTP)
	}
	cmp := ctlCompare(t, addrs, targets, model)
	failed, short, links, firstBad, answeredBy := cmp.failed, cmp.short, cmp.links, cmp.firstBad, cmp.answeredBy
	by, total, requests := fp.Injected()
	t.Logf("%d targets (%d links) through eddy-ctl query: %d failed, %d short, answered by %v; the store so far: %d faults in %d requests (%v)",
		len(targets), links, failed, short, answeredBy, total, requests, by)
	if failed != 0 || short != 0 {
		t.Fatalf("with the store failing: %d failed, %d short of %d (first: %s)", failed, short, len(targets), firstBad)
	}
	if by["truncate get_range"]+by["truncate get"] == 0 || by["reset put"]+by["slowdown put"]+by["internal put"] == 0 {
		t.Fatalf("the schedule cut no GET body short or failed no PUT: %v", by)
	}

	// 3. More ingest under faults; the faults stop; caught up within a
	// minute.
	for range 10 {
		world.Step(1500)
		time.Sleep(100 * time.Millisecond)
	}
	fp.SetRate("", 0)
	healed := time.Now()
	caughtUp("every node caught up within a minute of the store healing", time.Minute)
	took := time.Since(healed)
	_, total, requests = fp.Injected()
	t.Logf("caught up %v after the faults stopped; %d faults in %d store requests in all", took.Round(time.Millisecond), total, requests)
	fmt.Printf("e2e: store failing 10%% of requests: %d targets asked through eddy-ctl query, 0 failed, 0 short; caught up %v after the faults stopped (%d faults in %d store requests)\n",
		len(targets), took.Round(time.Millisecond), total, requests)
}

// sampleTargets picks about n targets with live links from the model,
// spread over their sorted order.
func sampleTargets(model map[string][]simnet.LinkRef, n int) []string {
	var targets []string
	for tg, refs := range model {
		if len(refs) > 0 {
			targets = append(targets, tg)
		}
	}
	sort.Strings(targets)
	if len(targets) > n {
		step := len(targets) / n
		var pick []string
		for i := 0; i < len(targets); i += step {
			pick = append(pick, targets[i])
		}
		targets = pick
	}
	return targets
}

// ctlResult is what ctlCompare found.
type ctlResult struct {
	failed, short, links int
	firstBad             string
	answeredBy           map[string]int
}

// ctlCompare asks every target through eddy-ctl query (every page, 1,000
// links a page) across addrs, a different address first for each target,
// and compares each answer's sources with the model's.
func ctlCompare(t *testing.T, addrs, targets []string, model map[string][]simnet.LinkRef) ctlResult {
	t.Helper()
	res := ctlResult{answeredBy: map[string]int{}}
	var mu sync.Mutex
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range jobs {
				tg := targets[i]
				order := append(slices.Clone(addrs[i%len(addrs):]), addrs[:i%len(addrs)]...)
				out, err := ctlQuery(order, tg)
				var page struct {
					Node      string              `json:"node"`
					Backlinks map[string][]string `json:"backlinks"`
				}
				var have, want []string
				if err == nil && json.Unmarshal(out, &page) == nil {
					for _, ss := range page.Backlinks {
						have = append(have, ss...)
					}
				}
				for _, r := range model[tg] {
					want = append(want, r.Source)
				}
				slices.Sort(have)
				slices.Sort(want)
				mu.Lock()
				switch {
				case err != nil:
					res.failed++
					if res.firstBad == "" {
						res.firstBad = fmt.Sprintf("%s: %v %s", tg, err, out)
					}
				case !slices.Equal(have, want):
					res.short++
					if res.firstBad == "" {
						res.firstBad = fmt.Sprintf("%s: %d sources from %s, want %d", tg, len(have), page.Node, len(want))
					}
				default:
					res.answeredBy[page.Node]++
					res.links += len(want)
				}
				mu.Unlock()
			}
		})
	}
	for i := range targets {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return res
}

// ctlQuery asks eddy-ctl query for every page of tg (1,000 links a page)
// across addrs, in that order, as JSON.
func ctlQuery(addrs []string, tg string) ([]byte, error) {
	return exec.Command(filepath.Join(binDir, "eddy-ctl"), "query", tg, "--json", "--all", "--limit", "1000", "--addr", strings.Join(addrs, ",")).Output()
}

// simCluster starts a simulated network of 300 accounts (seed) and a
// three-node cluster in dir ingesting its firehose and backfill, flushing
// every 200 ms, with more eddy-ctl local up arguments; both end with the
// test.
func simCluster(t *testing.T, dir string, seed int64, args ...string) (*localCluster, *simnet.World) {
	t.Helper()
	world := simnet.NewWorld(simnet.Config{Seed: seed, Accounts: 300})
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	backfill := "backfill+" + sim.RelayURL() + "?plc=" + url.QueryEscape(sim.PLCURL()) + "&didweb=" + url.QueryEscape(sim.PLCURL())
	lc := upIn(t, dir, append([]string{"--flush-interval", "200ms", "--source", "firehose+" + sim.FirehoseURL(), "--source", backfill}, args...)...)
	return lc, world
}

// caughtUpWith waits until every node has ingested the world's last event
// and serves it.
func (lc *localCluster) caughtUpWith(t *testing.T, world *simnet.World, what string, timeout time.Duration) {
	t.Helper()
	lc.waitCaughtUp(t, what, timeout, ingestProgress{stream: fmt.Sprint(world.LastSeq())}, nil)
}

// keepStepping makes the world go on (150 steps every 100 ms) until the
// returned function is called.
func keepStepping(world *simnet.World) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			world.Step(150)
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
