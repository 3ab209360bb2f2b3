package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// scrapeMetrics fetches a node's /metrics as "name{labels}" -> value.
func scrapeMetrics(addr string) (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("bad line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("bad value in %q", line)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// family returns the sum of a metric family's series whose labels
// contain every given "k=\"v\"" pair, and how many series matched.
func family(m map[string]float64, name string, labels ...string) (float64, int) {
	sum, n := 0.0, 0
	for k, v := range m {
		base, lab, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(lab, l) {
				ok = false
			}
		}
		if ok {
			sum += v
			n++
		}
	}
	return sum, n
}

// Every metric the operations issue names exists on a real cluster and
// moves while it ingests from a simulated network and a replay (with a bad
// line), answers queries, and hands leadership over; the logs never show
// the admin token.
// (Over 120 lines: one scenario: each metric checked as the cluster moves through its phases.)
func TestMetricsMove(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 21, Accounts: 100, Start: time.Now().Add(-30 * time.Second)})
	world.Step(2000)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	// A replay of the real capture, repeated (replayed events fold into the
	// same answers) so that reading it takes a while, with one undecodable
	// line at its end: a skipped input.
	src, err := os.ReadFile(corpus + "expected_v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(src) > 0 && src[len(src)-1] != '\n' {
		src = append(src, '\n')
	}
	var capture []byte
	for i := 0; i < 100; i++ {
		capture = append(capture, src...)
	}
	capture = append(capture, "{not json\n"...)
	replay := filepath.Join(t.TempDir(), "capture.jsonl")
	if err := os.WriteFile(replay, capture, 0o644); err != nil {
		t.Fatal(err)
	}
	// Scrape every node every 200 ms from the moment the nodes are started
	// (the replay is then under way); keep every scrape.
	type sample struct {
		node string
		m    map[string]float64
	}
	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	lc := upWatched(t, func(lc *localCluster) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				for _, n := range lc.Nodes {
					if m, err := scrapeMetrics(n.HTTP); err == nil {
						mu.Lock()
						samples = append(samples, sample{n.ID, m})
						mu.Unlock()
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}, "--flush-interval", "200ms", "--source", "jetstream+"+sim.JetstreamURL(), "--source", "replay+file://"+replay)

	// `local up` returns once the configuration is whole: a node that has
	// just joined may still be catching up, and says so with 503 NotReady.
	lc.waitFor(t, "every node ready", 30*time.Second, func() error {
		for _, n := range lc.Nodes {
			if code, body, err := readyz(n.HTTP); err != nil || code != http.StatusOK {
				return fmt.Errorf("%s /readyz %d %s %v", n.ID, code, body, err)
			}
		}
		return nil
	})

	// The world goes on while queries run on every node; leadership moves
	// once midway.
	queried := 0
	for round := 0; round < 40; round++ {
		world.Step(100)
		if round == 20 {
			ctl(t, "transfer-leadership", "--addr", lc.Nodes[0].Admin+","+lc.Nodes[1].Admin+","+lc.Nodes[2].Admin, "--token-file", lc.TokenFile)
		}
		targets := world.Targets()
		sort.Strings(targets)
		for i, tgt := range targets {
			if i >= 3 {
				break
			}
			for _, n := range lc.Nodes {
				for _, path := range []string{
					"/xrpc/blue.cerulea.backlinks.listBacklinks?target=" + url.QueryEscape(tgt),
					"/xrpc/blue.microcosm.links.getBacklinksCount?subject=" + url.QueryEscape(tgt) + "&source=app.bsky.feed.like:subject.uri",
				} {
					resp, err := http.Get("http://" + n.HTTP + path)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Fatalf("%s %s: %s", n.ID, path, resp.Status)
					}
					queried++
				}
			}
		}
		time.Sleep(150 * time.Millisecond)
	}
	// The replay reaches its end (its bad line), then a compaction (every
	// 5 s) lands.
	lc.waitFor(t, "the replay read to its end", 120*time.Second, func() error {
		_, st, err := lc.leaderStatus()
		if err != nil {
			return err
		}
		for k, c := range st.Cursors {
			if strings.HasPrefix(k, "replay:") && strings.HasPrefix(c, "eof:") {
				return nil
			}
		}
		return fmt.Errorf("cursors %v", st.Cursors)
	})
	time.Sleep(6 * time.Second)
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d queries, %d scrapes", queried, len(samples))
	for _, s := range samples {
		if v, n := family(s.m, "eddy_ingest_lag_events", `source="replay:`); n > 0 && v > 0 {
			t.Logf("first scrape with the replay under way: %s, %v events behind", s.node, v)
			break
		}
	}
	if len(samples) > 0 {
		s := samples[len(samples)-1]
		v, _ := family(s.m, "eddy_ingest_lag_events", `source="replay:`)
		t.Logf("last scrape: %s, replay %v events behind", s.node, v)
	}

	// moved: the family (selected by labels) took at least two distinct
	// values on some node across the scrapes.
	check := func(name string, labels ...string) {
		t.Helper()
		distinct := map[string]map[float64]bool{}
		found := false
		counterLike := strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count")
		for _, s := range samples {
			v, n := family(s.m, name, labels...)
			if n == 0 && !counterLike {
				continue
			}
			// A counter series not yet created is at zero.
			found = found || n > 0
			if distinct[s.node] == nil {
				distinct[s.node] = map[float64]bool{}
			}
			distinct[s.node][v] = true
		}
		if !found {
			t.Errorf("%s%v: absent from /metrics", name, labels)
			return
		}
		for _, d := range distinct {
			if len(d) >= 2 {
				return
			}
		}
		t.Errorf("%s%v: never moved: %v", name, labels, distinct)
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		// ingest lag, by source
		{"eddy_ingest_lag_seconds", []string{`source="jetstream"`}},
		{"eddy_ingest_lag_events", []string{`source="jetstream"`}},
		{"eddy_ingest_lag_events", []string{`source="replay:`}},
		// events and links (counters: rate() gives per second)
		{"eddy_ingest_events_total", []string{`source="jetstream"`}},
		{"eddy_ingest_events_total", []string{`source="replay:`}},
		{"eddy_ingest_links_total", nil},
		// skipped inputs by reason
		{"eddy_ingest_skipped_total", []string{`reason="bad_event"`}},
		// flush and publish latency
		{"eddy_ingest_flush_seconds_count", nil},
		{"eddy_ingest_publish_seconds_count", nil},
		{"eddy_ingest_published_generation", nil},
		// compaction backlog
		{"eddy_compaction_backlog_runs", []string{`tree="links"`}},
		{"eddy_lsm_runs", []string{`tree="links"`}},
		// object store requests, bytes, latency by kind
		{"eddy_objstore_requests_total", []string{`kind="put"`}},
		{"eddy_objstore_requests_total", []string{`kind="get_range"`}},
		{"eddy_objstore_bytes_total", []string{`kind="put"`}},
		{"eddy_objstore_bytes_total", []string{`kind="get_range"`}},
		{"eddy_objstore_request_seconds_count", []string{`kind="put"`}},
		// frame cache
		{"eddy_frame_cache_hits_total", nil},
		{"eddy_frame_cache_misses_total", nil},
		{"eddy_frame_cache_hit_ratio", nil},
		{"eddy_frame_cache_bytes", nil},
		// query latency by endpoint
		{"eddy_query_request_seconds_count", []string{`endpoint="/xrpc/blue.cerulea.backlinks.listBacklinks"`}},
		{"eddy_query_request_seconds_count", []string{`endpoint="/xrpc/blue.microcosm.links.getBacklinksCount"`}},
		// Raft state and last contact
		{"eddy_raft_state", []string{`state="Leader"`}},
		{"eddy_raft_is_leader", nil},
		{"eddy_raft_last_contact_seconds", nil},
		{"eddy_raft_applied_index", nil},
		{"eddy_raft_commit_index", nil},
		{"eddy_raft_term", nil},
		// freshness
		{"eddy_manifest_generation", nil},
		{"eddy_view_generation", nil},
		{"eddy_leader_generation", nil},
	} {
		check(c.name, c.labels...)
	}
	// Present (their movement is shown by unit tests: objstore errors need
	// a failing store).
	last := map[string]map[string]float64{}
	for _, s := range samples {
		last[s.node] = s.m
	}
	for _, name := range []string{"eddy_objstore_errors_total", "eddy_objstore_http_attempts_total", "eddy_ready", "eddy_view_stale_seconds", "eddy_frame_cache_evictions_total", "eddy_build_info", "eddy_raft_voters",
		"go_gc_gomemlimit_bytes", "go_gc_heap_live_bytes"} {
		for node, m := range last {
			if _, n := family(m, name); n == 0 {
				t.Errorf("%s: %s absent", node, name)
			}
		}
	}
	for node, m := range last {
		// The soft memory limit (--memory-limit auto: 3/4 of the machine
		// or cgroup) and the live heap beneath it.
		limit, _ := family(m, "go_gc_gomemlimit_bytes")
		if live, _ := family(m, "go_gc_heap_live_bytes"); live <= 0 || limit <= live || limit >= 1<<62 {
			t.Errorf("%s: go_gc_heap_live_bytes %v, go_gc_gomemlimit_bytes %v: want a live heap under a set limit", node, live, limit)
		}
		if v, _ := family(m, "eddy_ready"); v != 1 {
			body := ""
			for _, n := range lc.Nodes {
				if n.ID == node {
					if resp, err := http.Get("http://" + n.HTTP + "/readyz"); err == nil {
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						body = string(b)
					}
				}
			}
			t.Errorf("%s: eddy_ready = %v at the end; /readyz: %s", node, v, body)
		}
		if v, _ := family(m, "eddy_raft_voters"); v != 3 {
			t.Errorf("%s: eddy_raft_voters = %v", node, v)
		}
	}
	// Structured logs, and no secret in them.
	for _, n := range lc.Nodes {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), lc.token) {
			t.Errorf("%s's log shows the admin token", n.ID)
		}
		if !strings.Contains(string(b), "[INFO]  eddy: configuration:") {
			t.Errorf("%s's log lacks the hclog configuration line", n.ID)
		}
	}
}

// upWatched is up, except that watch gets the cluster as soon as its nodes
// are started (cluster.json is written once the first node leads), before
// the cluster is healthy and up would return.
func upWatched(t *testing.T, watch func(*localCluster), args ...string) *localCluster {
	t.Helper()
	dir := t.TempDir()
	lc := &localCluster{dir: dir}
	lc.downAtCleanup(t)
	errc := make(chan error, 1)
	go func() {
		out, err := exec.Command(filepath.Join(binDir, "eddy-ctl"), append([]string{"local", "up", "--dir", dir}, args...)...).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("eddy-ctl local up: %v\n%s", err, out)
		}
		errc <- err
	}()
	for {
		select {
		case err := <-errc:
			if err == nil {
				err = lc.read()
			}
			if err != nil {
				t.Fatal(err)
			}
			watch(lc)
			return lc
		case <-time.After(20 * time.Millisecond):
		}
		if lc.read() == nil {
			watch(lc)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			return lc
		}
	}
}
