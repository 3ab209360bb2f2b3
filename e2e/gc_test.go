package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// gcGrace is the e2e cluster's --gc-grace: far above its compactions (tens
// of milliseconds), short enough for the test.
const gcGrace = 3 * time.Second

// A cluster that flushes and compacts often (fan-in 2) while it ingests a
// simulated network, its leader SIGKILLed three times (each restarted),
// queries answered throughout without one error: at the end the bucket
// holds at most 1.1 times the bytes of the live manifest's tables (the
// replaced tables of every leader, the dead ones included, were deleted
// after the grace), and a table object planted unreferenced is swept.
// (Over 120 lines: one scenario, phase after phase.)
func TestGCWithLeaderKills(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 21, Accounts: 120})
	world.Step(300)
	targets := gcTargets(world)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	start := time.Now()
	lc := up(t, "--flush-interval", "200ms", "--source", "jetstream+"+sim.JetstreamURL(),
		"--node-arg=--gc-grace="+gcGrace.String(), "--node-arg=--compaction-fan-in=2", "--node-arg=--compaction-interval=300ms")
	store, err := local.New(filepath.Join(lc.dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	planted := plantOrphan(t, store)

	q := startQueries(lc, targets)
	stepDone := make(chan struct{})
	go func() {
		defer close(stepDone)
		for i := 0; i < 30; i++ {
			world.Step(200)
			time.Sleep(150 * time.Millisecond)
		}
	}()
	for k := 0; k < 3; k++ {
		time.Sleep(1200 * time.Millisecond)
		lead := lc.killLeader(t)
		t.Logf("kill %d: SIGKILLed leader %s (restarted)", k+1, lead.ID)
	}
	<-stepDone
	want := fmt.Sprint(world.LastTimeUS())
	lc.waitFor(t, "every node serves the stream's end", 60*time.Second, func() error { return lc.servesCursor("jetstream", want) })

	// An operator's full compaction (through a follower or the leader),
	// while the queries go on: its inputs are garbage like any replaced
	// run's, which the bounds below then hold.
	var admins []string
	for _, n := range lc.Nodes {
		admins = append(admins, n.Admin)
	}
	runs := func() (links, revs float64, err error) {
		ln, _, err := lc.leaderStatus()
		if err != nil {
			return 0, 0, err
		}
		m, err := scrapeMetrics(ln.HTTP)
		if err != nil {
			return 0, 0, err
		}
		links, _ = family(m, "eddy_lsm_runs", `tree="links"`)
		revs, _ = family(m, "eddy_lsm_runs", `tree="revocations"`)
		return links, revs, nil
	}
	linksBefore, revsBefore, err := runs()
	if err != nil {
		t.Fatal(err)
	}
	if out := ctl(t, "compact", "--full", "--addr", strings.Join(admins, ","), "--token-file", lc.TokenFile); !strings.Contains(out, "full compaction asked") {
		t.Fatalf("compact --full: %s", out)
	}
	// The request is replicated: a follower's status shows it (the
	// leader merges one tree a compaction tick and deletes a tree's
	// request only once its merge is published, a tick or more later).
	lead, err := lc.leader(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range lc.Nodes {
		if n.ID == lead.ID {
			continue
		}
		lc.waitFor(t, "a follower holding the full compaction request", 2*time.Second, func() error {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if _, ok := st.Extra["full_compaction_pending"]; !ok {
				return fmt.Errorf("follower %s shows no full compaction pending", n.ID)
			}
			return nil
		})
		break
	}
	// The leader that took the request dies before it can have merged
	// every tree: the next leader carries it out, its garbage collected
	// like the rest. (In this small world the ordinary compactions, fan-in
	// 2, would also end at one run a tree; that a new leader carries out
	// a request it did not take is TestIngestSimulatedNetwork's.)
	lead = lc.killLeader(t)
	t.Logf("SIGKILLed leader %s right after the full compaction request (restarted)", lead.ID)
	lc.waitFor(t, "the full compaction merged every tree", 60*time.Second, func() error {
		_, st, err := lc.leaderStatus()
		if err != nil {
			return err
		}
		if p, ok := st.Extra["full_compaction_pending"]; ok {
			return fmt.Errorf("trees %v still to merge", p)
		}
		if l, r, err := runs(); err != nil || l != 1 || r > 1 {
			return fmt.Errorf("%v runs of links, %v of revocations (%v)", l, r, err)
		}
		return nil
	})
	t.Logf("full compaction: %v runs of links and %v of revocations became one each", linksBefore, revsBefore)

	// After the grace, every leader's garbage is gone.
	var bucket, tables, live uint64
	var pending float64
	lc.waitFor(t, "the bucket down to the live tables", 30*time.Second, func() error {
		var err error
		if bucket, tables, err = bucketBytes(store); err != nil {
			return err
		}
		if live, pending, err = lc.gcLive(); err != nil {
			return err
		}
		if exists(t, store, planted) {
			return fmt.Errorf("the planted orphan %s is still there", planted)
		}
		if live == 0 || pending > 0 || float64(bucket) > 1.1*float64(live) {
			return fmt.Errorf("bucket %d bytes (tables %d), live tables %d, %v pending", bucket, tables, live, pending)
		}
		return nil
	})
	// Every node forgot the replaced tables: its local metadata holds only
	// tables still in the bucket (which now holds only the live ones).
	lc.waitFor(t, "no node keeps the metadata of a deleted table", 10*time.Second, func() error { return lc.staleMetas(store) })
	ok, failed, failures := q.stop()
	deleted, orphans, missing := gcCounters(t, lc)
	t.Logf("bucket %d bytes (tables/ %d), live tables %d (%.3fx), %v pending; deleted %v replaced, %v orphan tables; %d queries, %d failed %v; %v missing-table answers",
		bucket, tables, live, float64(bucket)/float64(live), pending, deleted, orphans, ok, failed, failures, missing)
	fmt.Printf("e2e: gc after 3 leader SIGKILLs: bucket %d bytes, live tables %d bytes (%.3fx); %v replaced and %v orphan tables deleted; %d queries, %d failed; %v\n",
		bucket, live, float64(bucket)/float64(live), deleted, orphans, ok, failed, time.Since(start).Round(time.Second))
	if failed != 0 || ok == 0 {
		t.Fatalf("%d of %d queries failed: %v", failed, ok+failed, failures)
	}
	// The deletion counters are per process: a killed leader's are gone,
	// so they are logged, not asserted (the bucket's bound and the planted
	// orphan's deletion above are what show the deletions).
	if missing != 0 {
		t.Fatalf("eddy_query_missing_table_total %v (deleted: replaced %v, orphan %v)", missing, deleted, orphans)
	}
}

// gcTargets returns up to 20 targets of the world's model, most linked first.
func gcTargets(world *simnet.World) []string {
	model := world.LiveLinks()
	ts := make([]string, 0, len(model))
	for k := range model {
		ts = append(ts, k)
	}
	sort.Slice(ts, func(i, j int) bool {
		if len(model[ts[i]]) != len(model[ts[j]]) {
			return len(model[ts[i]]) > len(model[ts[j]])
		}
		return ts[i] < ts[j]
	})
	return ts[:min(20, len(ts))]
}

// plantOrphan puts a table object that no manifest will ever name (what a
// deposed leader's unpublished upload leaves) and returns its key.
func plantOrphan(t *testing.T, store objstore.Store) string {
	data, _ := lsm.TableKeys(lsm.TreeLinks, lsm.NewID())
	if err := store.Put(context.Background(), data, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	return data
}

func exists(t *testing.T, store objstore.Store, key string) bool {
	_, err := store.Size(context.Background(), key)
	return err == nil
}

// bucketBytes sums every object of the bucket, and those under tables/.
func bucketBytes(store objstore.Store) (all, tables uint64, err error) {
	err = store.List(context.Background(), "", func(key string, size int64) error {
		all += uint64(size)
		if strings.HasPrefix(key, "tables/") {
			tables += uint64(size)
		}
		return nil
	})
	return all, tables, err
}

// servesCursor reports whether every node applied and serves the cursor
// want of the source named name.
func (lc *localCluster) servesCursor(name, want string) error {
	for _, n := range lc.Nodes {
		st, err := lc.status(n)
		if err != nil {
			return err
		}
		if got := st.Cursors[name]; got != want || st.ViewGeneration != st.Generation {
			return fmt.Errorf("%s: cursor %q of %q, serving %d of %d", n.ID, got, want, st.ViewGeneration, st.Generation)
		}
	}
	return nil
}

// gcCounters sums, over the nodes, the tables deleted as replaced and as
// orphans, and the queries that met a missing table.
func gcCounters(t *testing.T, lc *localCluster) (replaced, orphan, missing float64) {
	for _, n := range lc.Nodes {
		m, err := scrapeMetrics(n.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := family(m, "eddy_gc_deleted_total", `reason="replaced"`)
		o, _ := family(m, "eddy_gc_deleted_total", `reason="orphan"`)
		x, _ := family(m, "eddy_query_missing_table_total")
		replaced, orphan, missing = replaced+r, orphan+o, missing+x
	}
	return replaced, orphan, missing
}

// gcQueries asks the cluster's nodes for the targets' backlinks until
// stopped, as a client that fails over does: a node that refuses the
// connection or answers 503 NotReady (restarting, catching up) is skipped
// for the next; any other answer but 200, or no node answering, fails.
type gcQueries struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
	done       chan struct{}
	wg         sync.WaitGroup
}

func startQueries(lc *localCluster, targets []string) *gcQueries {
	q := &gcQueries{done: make(chan struct{})}
	hc := &http.Client{Timeout: 5 * time.Second}
	for w := 0; w < 3; w++ {
		q.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-q.done:
					return
				default:
				}
				if err := queryOnce(hc, lc.Nodes, i, targets[i%len(targets)]); err != nil {
					q.failed.Add(1)
					q.mu.Lock()
					if len(q.failures) < 5 {
						q.failures = append(q.failures, err.Error())
					}
					q.mu.Unlock()
				} else {
					q.ok.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return q
}

func (q *gcQueries) stop() (ok, failed int64, failures []string) {
	close(q.done)
	q.wg.Wait()
	return q.ok.Load(), q.failed.Load(), q.failures
}

// queryOnce asks the nodes in turn, from the i-th, for target's backlinks.
func queryOnce(hc *http.Client, nodes []localNode, i int, target string) error {
	var tried []string
	for k := range nodes {
		n := nodes[(i+k)%len(nodes)]
		resp, err := hc.Get("http://" + n.HTTP + "/xrpc/blue.cerulea.backlinks.listBacklinks?limit=100&target=" + url.QueryEscape(target))
		if err != nil {
			tried = append(tried, n.ID+": "+err.Error())
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error string }
		json.Unmarshal(body, &e)
		switch {
		case resp.StatusCode == 200:
			return nil
		case resp.StatusCode == 503 && e.Error == "NotReady":
			tried = append(tried, n.ID+": NotReady")
			continue
		}
		return fmt.Errorf("%s answered %d %s", n.ID, resp.StatusCode, body)
	}
	return fmt.Errorf("no node answered: %s", strings.Join(tried, "; "))
}

// staleMetas reports a node's local table metadata (data-dir/meta) of a
// table the bucket no longer holds.
func (lc *localCluster) staleMetas(store objstore.Store) error {
	inBucket := map[string]bool{}
	if err := store.List(context.Background(), "tables/", func(key string, _ int64) error {
		inBucket[strings.TrimSuffix(strings.TrimSuffix(key, ".data"), ".meta")] = true
		return nil
	}); err != nil {
		return err
	}
	for _, n := range lc.Nodes {
		metas, err := filepath.Glob(filepath.Join(lc.dir, n.ID, "meta", "tables", "*", "*.meta"))
		if err != nil {
			return err
		}
		for _, m := range metas {
			tree := filepath.Base(filepath.Dir(m))
			if id := strings.TrimSuffix(filepath.Base(m), ".meta"); !inBucket["tables/"+tree+"/"+id] {
				return fmt.Errorf("%s keeps the metadata of deleted table %s/%s (of %d local)", n.ID, tree, id, len(metas))
			}
		}
	}
	return nil
}

// gcLive returns what the leader's status says of the live tables' bytes
// and of the tables waiting for deletion.
func (lc *localCluster) gcLive() (live uint64, pending float64, err error) {
	_, st, err := lc.leaderStatus()
	if err != nil {
		return 0, 0, err
	}
	var gc struct {
		LiveBytes     uint64  `json:"live_bytes"`
		PendingTables float64 `json:"pending_tables"`
	}
	b, _ := json.Marshal(st.Extra["gc"])
	if err := json.Unmarshal(b, &gc); err != nil {
		return 0, 0, err
	}
	return gc.LiveBytes, gc.PendingTables, nil
}
