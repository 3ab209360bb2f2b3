package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A leader whose write path fails (here: the store refuses every table,
// its tables/ being a file) starts it again from the committed state, and
// past a few failures in a row hands leadership over; once the store
// heals, ingest completes and every node answers exactly the capture's
// links.
func TestWritePathFailureRecovers(t *testing.T) {
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	want := wantLinks(t, "--jetstream", src)
	store := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(store, "tables")
	if err := os.WriteFile(broken, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	lc := up(t, "--store", "file://"+store, "--flush-interval", "200ms", "--source", "replay+file://"+src)

	count := func(s string) (n int) {
		for _, nd := range lc.Nodes {
			b, _ := os.ReadFile(nd.Log)
			n += strings.Count(string(b), s)
		}
		return n
	}
	lc.waitFor(t, "the write path failing and leadership handed over", 90*time.Second, func() error {
		restarts, handovers := count("write path ended while leading"), count("handing leadership over")
		if restarts < 3 || handovers < 1 || count("became leader") < 2 {
			return fmt.Errorf("%d restarts, %d handovers, %d leaderships", restarts, handovers, count("became leader"))
		}
		return nil
	})
	t.Logf("store broken: %d write path restarts, %d handovers, %d leaderships", count("write path ended while leading"), count("handing leadership over"), count("became leader"))

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	lc.waitFor(t, "the capture published on every node", 90*time.Second, func() error {
		for _, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if c := st.Cursors["replay:"+src]; !strings.HasPrefix(c, "eof:") || st.ViewGeneration != st.Generation {
				return fmt.Errorf("%s: cursor %q, serving %d of %d", n.ID, c, st.ViewGeneration, st.Generation)
			}
		}
		return nil
	})
	links := 0
	for _, n := range lc.Nodes {
		links += checkAnswers(t, n, want)
	}
	t.Logf("store healed: capture published %v later; %d targets, %d links equal on %d nodes", time.Since(healed).Round(time.Millisecond), len(want), links, len(lc.Nodes))
}
