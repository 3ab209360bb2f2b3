package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The bench itself is tested in package bench; these test the shim: that
// eddy-ctl bench finds eddy-bench, passes the arguments through, and keeps
// the output and exit codes of the bench it used to contain.

func TestBenchShimNotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "lsm", "--links", "3000"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errb.String())
	}
	if !strings.HasPrefix(errb.String(), "eddy-ctl bench: eddy-bench not found: run make build") {
		t.Fatalf("stderr:\n%s", errb.String())
	}
}

// buildBench builds cmd/bench as eddy-bench and this package as eddy-ctl
// into a directory that becomes the test's PATH, and returns the
// directory.
func buildBench(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds eddy-bench")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build eddy-bench with")
	}
	dir := t.TempDir()
	for name, pkg := range map[string]string{
		"eddy-bench": "github.com/eddy-backlinks/eddy/cmd/bench",
		"eddy-ctl":   "github.com/eddy-backlinks/eddy/cmd/ctl",
	} {
		if out, err := exec.Command(gobin, "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	t.Setenv("PATH", dir)
	return dir
}

func TestBenchShim(t *testing.T) {
	dir := buildBench(t)

	// Bad arguments: exit 2, eddy-bench's message as eddy-ctl's own, once.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "eddy-ctl bench: usage: want `bench lsm [flags]`\n"},
		{[]string{"bench", "pebble"}, "eddy-ctl bench: usage: want `bench lsm [flags]`\n"},
		{[]string{"bench", "lsm", "--links", "10"}, "eddy-ctl bench: usage: --links must be at least 1000\n"},
		{[]string{"bench", "lsm", "--profile-phase", "everything"}, "eddy-ctl bench: usage: --profile-phase must be all, write, compact, query, cold, count or pebble\n"},
		{[]string{"bench", "lsm", "extra"}, "eddy-ctl bench: usage: unexpected arguments [\"extra\"]\n"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if errb.String() != c.want || out.Len() != 0 {
			t.Errorf("%v: stderr %q, stdout %q; want stderr %q", c.args, errb.String(), out.String(), c.want)
		}
	}

	// -h: the usage on stdout under eddy-ctl's name, exit 0.
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "-h"}, &out, &errb); code != 0 {
		t.Fatalf("bench -h: exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "Usage: eddy-ctl bench lsm [flags]\n") || !strings.Contains(out.String(), "-links int") {
		t.Errorf("bench -h printed:\n%s", out.String())
	}

	// A small run: the JSON on stdout, the progress log on stderr.
	out.Reset()
	errb.Reset()
	args := []string{"bench", "lsm", "--links", "3000", "--queries", "100", "--no-pebble", "--tmp", t.TempDir(), "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, out.String(), errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res["model_check"] != "ok" || res["links_written"] != float64(3000) {
		t.Errorf("model_check %v, links_written %v", res["model_check"], res["links_written"])
	}
	if !strings.Contains(errb.String(), "bench ") || !strings.Contains(errb.String(), "done in") {
		t.Errorf("stderr:\n%s", errb.String())
	}

	// The binaries themselves: eddy-bench next to the eddy-ctl executable
	// is found without PATH.
	cmd := exec.Command(filepath.Join(dir, "eddy-ctl"), "bench", "lsm", "--links", "10")
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || string(b) != "eddy-ctl bench: usage: --links must be at least 1000\n" {
		t.Fatalf("%v: %s", err, b)
	}
}
