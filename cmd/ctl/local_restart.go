package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

const localRestartUsage = `Usage: eddy-ctl local restart --dir DIR --id NODE [--node-bin PATH] [--grace 20s]

Stops one node of a local cluster (started by 'eddy-ctl local up') and
starts it again with the same arguments and data directory: SIGTERM first
(a leader publishes what it buffered and hands leadership over), SIGKILL
after --grace. With --node-bin, the new process runs that eddy-node binary,
and cluster.json records it for later restarts. The command returns once
the old process is gone and the new one runs; it does not wait for the node
to catch up (eddy-ctl roll does). As the restart command of a rolling
upgrade:

  eddy-ctl roll --addr ADMIN_ADDRS --token-file DIR/certs/admin-token \
    --restart-cmd 'eddy-ctl local restart --dir DIR --id "$EDDY_ROLL_NODE_ID" --node-bin NEW/eddy-node'

Flags:
`

// localStartCheck is how long a restarted process must stay up before
// local restart reports it started (a bad binary or flag exits at once).
const localStartCheck = 300 * time.Millisecond

func runLocalRestart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("local restart", localRestartUsage, stderr)
	dir := fs.String("dir", "", "directory of the local cluster (required)")
	id := fs.String("id", "", "ID of the node to restart (required)")
	nodeBin := fs.String("node-bin", "", "eddy-node binary to start (default: the one the node ran)")
	grace := fs.Duration("grace", 20*time.Second, "time between SIGTERM and SIGKILL")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *id == "" {
		return fmt.Errorf("local restart --dir DIR --id NODE: %w", errUsage)
	}
	if *grace <= 0 {
		return fmt.Errorf("--grace must be positive: %w", errUsage)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	bin := ""
	if *nodeBin != "" {
		if bin, err = filepath.Abs(*nodeBin); err != nil {
			return err
		}
		if st, err := os.Stat(bin); err != nil {
			return fmt.Errorf("--node-bin: %w", err)
		} else if st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("--node-bin %s: not an executable file", bin)
		}
	}
	// One restart at a time per cluster: cluster.json is read, changed and
	// written back.
	unlock, err := lockLocalCluster(abs)
	if err != nil {
		return err
	}
	defer unlock()
	lc, err := ReadLocalCluster(abs)
	if err != nil {
		return fmt.Errorf("no local cluster in %s: %w", abs, err)
	}
	i := slices.IndexFunc(lc.Nodes, func(n LocalNode) bool { return n.ID == *id })
	if i < 0 {
		var ids []string
		for _, n := range lc.Nodes {
			ids = append(ids, n.ID)
		}
		return fmt.Errorf("%w: no node %q in %s (nodes: %s)", errUsage, *id, abs, strings.Join(ids, ", "))
	}
	n := &lc.Nodes[i]
	if err := stopLocalNode(ctx, n, *grace, stdout); err != nil {
		return err
	}
	if bin != "" {
		n.Bin = bin
	}
	pid, err := StartNode(n)
	if err != nil {
		return err
	}
	// A process that exits at once (a bad binary, a refused flag, a port
	// still taken) is reported here, with its log.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(localStartCheck):
	}
	if !alive(pid) {
		return fmt.Errorf("%s: the new process (pid %d, %s) exited at once; its log %s ends:\n%s", n.ID, pid, n.Bin, n.Log, logTail(n.Log, 2000))
	}
	n.PID = pid
	if err := writeJSONFile(filepath.Join(abs, "cluster.json"), lc); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: started pid %d (%s)\n", n.ID, pid, n.Bin)
	return nil
}

// stopLocalNode stops n's process if it still runs: SIGTERM, then SIGKILL
// after grace. A recorded pid that now names another process (the node
// died and the pid was reused) is left alone.
func stopLocalNode(ctx context.Context, n *LocalNode, grace time.Duration, stdout io.Writer) error {
	if n.PID <= 0 || !alive(n.PID) {
		fmt.Fprintf(stdout, "%s: not running\n", n.ID)
		return nil
	}
	if !isLocalNodeProcess(n.PID, n) {
		fmt.Fprintf(stdout, "%s: pid %d is another process now; not stopping it\n", n.ID, n.PID)
		return nil
	}
	start := time.Now()
	if err := syscall.Kill(n.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: SIGTERM pid %d: %w", n.ID, n.PID, err)
	}
	how := "SIGTERM"
	if !waitExit(ctx, n.PID, grace) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		how = fmt.Sprintf("SIGKILL after %v", grace)
		syscall.Kill(n.PID, syscall.SIGKILL)
		if !waitExit(ctx, n.PID, 10*time.Second) {
			return fmt.Errorf("%s: pid %d still runs after SIGKILL", n.ID, n.PID)
		}
	}
	fmt.Fprintf(stdout, "%s: stopped pid %d (%s, %v)\n", n.ID, n.PID, how, time.Since(start).Round(time.Millisecond))
	return nil
}

// waitExit waits until pid is gone (or a zombie), for at most d.
func waitExit(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// isLocalNodeProcess reports whether pid runs n's command line (its data
// directory argument), so a reused pid is never signalled.
func isLocalNodeProcess(pid int, n *LocalNode) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	for i, a := range n.Args {
		if a == "--data-dir" && i+1 < len(n.Args) {
			return slices.Contains(args, n.Args[i+1])
		}
	}
	return false
}

// lockLocalCluster takes an exclusive lock on DIR/cluster.json.lock.
func lockLocalCluster(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "cluster.json.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("no local cluster in %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// logTail returns the last n bytes of a file.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
