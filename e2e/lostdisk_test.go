package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A node whose data directory is lost, started again with its own command
// line (what systemd does), is refused and stops, saying why, instead of
// taking part under its old ID: a voter started with --join would vote as a
// blank voter (for any candidate, one that lacks committed entries
// included), and the first node, started with --bootstrap, would form a
// second cluster over the bucket whose garbage collection deletes the
// first one's tables. Neither makes Raft state.
func TestLostDataDirectoryRefused(t *testing.T) {
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	lc := up(t, "--flush-interval", "200ms", "--source", "replay+file://"+src)
	lc.waitFor(t, "the replay is published", 30*time.Second, func() error {
		_, st, err := lc.leaderStatus()
		if err != nil {
			return err
		}
		for _, c := range st.Cursors {
			if strings.HasPrefix(c, "eof:") && st.Generation > 0 {
				return nil
			}
		}
		return fmt.Errorf("generation %d, cursors %v", st.Generation, st.Cursors)
	})
	// The voter that joined (n2 or n3; not the one started with
	// --bootstrap), then the first node.
	var joined, first localNode
	for _, n := range lc.Nodes {
		switch {
		case slices.Contains(n.Args, "--bootstrap"):
			first = n
		case slices.Contains(n.Args, "--join") && joined.ID == "":
			joined = n
		}
	}
	if joined.ID == "" || first.ID == "" {
		t.Fatalf("nodes %+v", lc.Nodes)
	}
	for _, c := range []struct {
		n    localNode
		want string
	}{{joined, "FreshVoter"}, {first, "--bootstrap refused"}} {
		if err := syscall.Kill(c.n.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		dataDir := c.n.Args[slices.Index(c.n.Args, "--data-dir")+1]
		time.Sleep(200 * time.Millisecond) // the killed process is gone
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, c.n.Bin, c.n.Args...)
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		var exit *exec.ExitError
		if timedOut || !errors.As(err, &exit) || !strings.Contains(string(out), c.want) {
			t.Fatalf("%s started again on an empty data directory: %v (want an exit saying %q); its log:\n%s", c.n.ID, err, c.want, tail(out, 3000))
		}
		if _, err := os.Stat(filepath.Join(dataDir, "raft", "raft.db")); err == nil {
			t.Fatalf("%s, refused, made Raft state", c.n.ID)
		}
		t.Logf("%s refused: %s", c.n.ID, lastLine(out, c.want))
	}
}

func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }

// lastLine returns the last line of out that holds s.
func lastLine(out []byte, s string) string {
	lines := strings.Split(string(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}
