package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// A three-node cluster whose bucket (a real MinIO) is behind an HTTP
// proxy failing one request in ten of every kind (503 SlowDown, 500,
// connections reset, GET bodies cut half way, answers held back 100 ms to
// 2 s; seeded): the replay of a real capture is ingested, and every
// target, asked through eddy-ctl query across the three nodes while the
// faults go on, answers exactly the capture's links: no failed query, no
// short answer.
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
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	want := wantLinks(t, "--jetstream", src)

	fp.SetRate("", 0.1)
	start := time.Now()
	lc := up(t, "--flush-interval", "200ms", "--source", "replay+file://"+src, "--store", store)
	lc.waitFor(t, "every node serves the replay with the store failing", 3*time.Minute, func() error {
		for _, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			done := false
			for _, c := range st.Cursors {
				done = done || strings.HasPrefix(c, "eof:")
			}
			if !done || st.ViewGeneration != st.Generation {
				return fmt.Errorf("%s: cursors %v, serving %d of %d", n.ID, st.Cursors, st.ViewGeneration, st.Generation)
			}
		}
		return nil
	})
	t.Logf("replay ingested with 10%% of store requests failing in %v", time.Since(start).Round(time.Millisecond))

	var addrs []string
	for _, n := range lc.Nodes {
		addrs = append(addrs, "http://"+n.HTTP)
	}
	targets := make([]string, 0, len(want))
	for k := range want {
		targets = append(targets, k)
	}
	sort.Strings(targets)
	var mu sync.Mutex
	failed, short := 0, 0
	var firstBad string
	answeredBy := map[string]int{}
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for tg := range jobs {
				out, err := exec.Command(filepath.Join(binDir, "eddy-ctl"), "query", tg, "--json", "--all", "--limit", "1000", "--addr", strings.Join(addrs, ",")).Output()
				var page struct {
					Node      string              `json:"node"`
					Backlinks map[string][]string `json:"backlinks"`
				}
				var srcs, exp []string
				if err == nil && json.Unmarshal(out, &page) == nil {
					for _, ss := range page.Backlinks {
						srcs = append(srcs, ss...)
					}
					for _, k := range want[tg] {
						s, _, _ := strings.Cut(k, " ")
						exp = append(exp, s)
					}
					slices.Sort(srcs)
					slices.Sort(exp)
				}
				mu.Lock()
				switch {
				case err != nil:
					failed++
					if firstBad == "" {
						firstBad = fmt.Sprintf("%s: %v %s", tg, err, out)
					}
				case !slices.Equal(srcs, exp):
					short++
					if firstBad == "" {
						firstBad = fmt.Sprintf("%s: %d sources from %s, want %d", tg, len(srcs), page.Node, len(exp))
					}
				default:
					answeredBy[page.Node]++
				}
				mu.Unlock()
			}
		})
	}
	for _, tg := range targets {
		jobs <- tg
	}
	close(jobs)
	wg.Wait()
	by, total, requests := fp.Injected()
	t.Logf("%d targets through eddy-ctl query: %d failed, %d short, answered by %v; the store: %d faults in %d requests (%v)",
		len(targets), failed, short, answeredBy, total, requests, by)
	fmt.Printf("e2e: store failing 10%% of requests: %d targets asked, %d failed, %d short; %d faults in %d store requests\n", len(targets), failed, short, total, requests)
	if failed != 0 || short != 0 {
		t.Fatalf("with the store failing: %d failed, %d short of %d (first: %s)", failed, short, len(targets), firstBad)
	}
	if total == 0 {
		t.Fatal("no fault was injected")
	}
}
