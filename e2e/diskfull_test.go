package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A follower whose data directory (a 48 MiB tmpfs) fills up while the
// network goes on: the node stays up and says so (/readyz 503), the other
// two keep ingesting and serving (eddy-ctl query with the full node first:
// no failed query); once space returns the node catches up, and every
// node equals the model: nothing lost, nothing revived.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounting a small tmpfs needs root (the CI machine runs as root)")
	}
	t.Setenv("EDDY_READY_LAG_MAX", "3s") // read by every node
	dir := t.TempDir()
	small := filepath.Join(dir, "n3")
	if err := os.MkdirAll(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", small).Run() }) // after the cluster is down (cleanups run last first)
	lc, world := simCluster(t, dir, 17)
	world.Step(5000)
	caughtUp := func(what string, timeout time.Duration) { lc.caughtUpWith(t, world, what, timeout) }
	caughtUp("every node caught up", 2*time.Minute)
	var full localNode
	for _, n := range lc.Nodes {
		if n.ID == "n3" {
			full = n
		}
	}
	if st, _ := lc.status(full); st.State == "Leader" {
		ctl(t, "transfer-leadership", "--addr", full.Admin, "--token-file", lc.TokenFile)
	}

	// Fill the disk.
	filler := filepath.Join(small, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	// The network goes on; the full node turns unready; the others serve.
	stopStepping := keepStepping(world)
	var unready string
	lc.waitFor(t, "the full node unready", 60*time.Second, func() error {
		// Not before it met its full disk: a 503 for another reason (the
		// leadership moved off it above) would let the test free the
		// disk before the node ever wrote to it.
		if b, err := os.ReadFile(full.Log); err != nil || !strings.Contains(string(b), "no space left on device") {
			return fmt.Errorf("%s has not met its full disk yet (%v)", full.ID, err)
		}
		code, body, err := readyz(full.HTTP)
		if err != nil {
			return err
		}
		if code != 503 {
			return fmt.Errorf("%s /readyz %d", full.ID, code)
		}
		unready = body
		return nil
	})
	m, err := scrapeMetrics(full.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	if free, n := family(m, "eddy_data_dir_free_bytes"); n != 1 || free > 1<<20 {
		t.Fatalf("%s eddy_data_dir_free_bytes = %v (%d series) with its disk full", full.ID, free, n)
	}
	addrs := []string{"http://" + full.HTTP}
	for _, n := range lc.Nodes {
		if n.ID != full.ID {
			addrs = append(addrs, "http://"+n.HTTP)
		}
	}
	model := world.LiveLinks()
	asked := 0
	for _, tg := range sampleTargets(model, 40) {
		if out, err := ctlQuery(addrs, tg); err != nil {
			t.Fatalf("query %s with %s's disk full: %v %s", tg, full.ID, err, out)
		}
		asked++
	}
	if err := syscall.Kill(full.PID, 0); err != nil {
		t.Fatalf("%s died with its disk full: %v", full.ID, err)
	}
	stopStepping()

	// Space returns: the node catches up; the model holds everywhere.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	caughtUp("every node caught up once space returned", 2*time.Minute)
	took := time.Since(freed)
	model = world.LiveLinks()
	targets := sampleTargets(model, 120)
	for _, n := range lc.Nodes {
		res := ctlCompare(t, []string{"http://" + n.HTTP}, targets, model)
		if res.failed != 0 || res.short != 0 {
			t.Fatalf("%s after its disk was freed: %d failed, %d differ from the model of %d targets (first: %s)", n.ID, res.failed, res.short, len(targets), res.firstBad)
		}
	}
	// It said why in its log.
	logb, err := os.ReadFile(full.Log)
	if err != nil {
		t.Fatal(err)
	}
	var said string
	for _, l := range strings.Split(string(logb), "\n") {
		if strings.Contains(l, "no space left on device") {
			said = l
			break
		}
	}
	if said == "" {
		t.Fatalf("%s's log never says its disk is full", full.ID)
	}
	t.Logf("%s logged: %s", full.ID, said)
	t.Logf("%s's disk full: /readyz said %q; %d queries with it listed first, 0 failed; caught up %v after space returned; %d targets equal the model on every node",
		full.ID, unready, asked, took.Round(time.Millisecond), len(targets))
}
