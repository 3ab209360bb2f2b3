package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo runs what `make demo` runs (scripts/demo.sh, on this test's
// build of the binaries) and checks that every query it shows printed real
// links, not only a header.
func TestDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command("bash", "../scripts/demo.sh")
	cmd.Env = append(os.Environ(), "EDDY_BIN="+binDir, "EDDY_DEMO_DIR="+dir)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Cleanup(func() {
		down := exec.Command(filepath.Join(binDir, "eddy-ctl"), "local", "down", "--dir", dir)
		if b, err := down.CombinedOutput(); err != nil {
			t.Errorf("local down: %v\n%s", err, b)
		}
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	t.Logf("demo took %v", took.Round(time.Millisecond))

	// Each "$ eddy-ctl query X" block: a "# answered by" line, then one
	// "path<TAB>at://..." line or more.
	blocks := strings.Split(string(out), "$ eddy-ctl query ")[1:]
	if len(blocks) < 4 {
		t.Fatalf("demo showed %d queries, want 4:\n%s", len(blocks), out)
	}
	linkLine := regexp.MustCompile(`(?m)^\$\.[^\t]+\tat://did:[a-z]+:[^/]+/[a-z0-9.]+/[a-z0-9]+$`)
	for _, b := range blocks {
		target, _, _ := strings.Cut(b, "\n")
		if !strings.Contains(b, "# answered by http://") {
			t.Errorf("query %s: no answering node in\n%s", target, b)
		}
		if n := len(linkLine.FindAllString(b, -1)); n == 0 {
			t.Errorf("query %s: no links in\n%s", target, b)
		} else {
			t.Logf("query %s: %d links", target, n)
		}
	}
	if !strings.Contains(string(out), "Stop it with:") {
		t.Errorf("demo did not print how to go on:\n%s", out)
	}
}

// TestSystemdUnit has systemd check the unit we ship (with ExecStart
// pointed at this test's build, since verify demands an executable) and
// checks the hardening the deployment guide promises.
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze not found (scripts/install-test-deps.sh installs it): %v", err)
	}
	raw, err := os.ReadFile("../deploy/systemd/eddy-node.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	for _, opt := range []string{
		"Restart=on-failure", "StateDirectory=eddy", "NoNewPrivileges=yes",
		"ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "CapabilityBoundingSet=",
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(opt) + `\s*$`).MatchString(unit) {
			t.Errorf("unit lacks %q", opt)
		}
	}
	const exec0 = "ExecStart=/usr/local/bin/eddy-node"
	if !strings.Contains(unit, exec0+"\n") {
		t.Fatalf("unit has no %q line", exec0)
	}
	unit = strings.Replace(unit, exec0, "ExecStart="+filepath.Join(binDir, "eddy-node"), 1)
	path := filepath.Join(t.TempDir(), "eddy-node.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}

	// A unit systemd rejects must fail the check, or the check proves
	// nothing.
	bad := strings.Replace(unit, "Restart=on-failure", "Restart=sometimes", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err == nil && len(strings.TrimSpace(string(out))) == 0 {
		t.Fatalf("systemd-analyze accepted an invalid Restart= value")
	}
}

// TestRunUnreachable runs what `make run` runs with the Jetstream pointed
// at a loopback port nobody listens on (this machine has no other
// network): the script must say the network cannot be reached, and the
// node must go on serving queries.
func TestRunUnreachable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command("bash", "../scripts/run.sh")
	cmd.Env = append(os.Environ(), "EDDY_BIN="+binDir, "EDDY_RUN_DIR="+dir, "EDDY_RUN_DETACH=1",
		"EDDY_RUN_JETSTREAM=ws://127.0.0.1:1/subscribe,ws://127.0.0.2:1/subscribe")
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() {
		down := exec.Command(filepath.Join(binDir, "eddy-ctl"), "local", "down", "--dir", dir)
		if b, err := down.CombinedOutput(); err != nil {
			t.Errorf("local down: %v\n%s", err, b)
		}
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "cannot be reached") || !strings.Contains(string(out), "keeps serving") {
		t.Fatalf("run did not say the network is unreachable:\n%s", out)
	}
	m := regexp.MustCompile(`answers? at (http://127\.0\.0\.1:\d+)|serving what it has at (http://127\.0\.0\.1:\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no node address in:\n%s", out)
	}
	addr := m[1] + m[2]
	// Still retrying, still serving: a query answers (nothing indexed yet:
	// an empty list, not an error).
	var page struct {
		Backlinks map[string][]string `json:"backlinks"`
	}
	getJSON(t, addr+"/xrpc/blue.cerulea.backlinks.listBacklinks?target=did:plc:mlbpil2fwz43vfn6uuysxtqa", &page)
	if len(page.Backlinks) != 0 {
		t.Fatalf("links from nowhere: %v", page.Backlinks)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		log, err := os.ReadFile(filepath.Join(dir, "n1.log"))
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(log), "cannot reach jetstream")
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node tried %d times in 30 s; want retries:\n%s", n, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
