package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// run runs the command line as eddy-ctl bench did before the move (and
// cmd/bench does now) and returns the exit code: 0, 2 for bad arguments, 1
// for another error.
func run(args []string, stdout, stderr io.Writer) int {
	err := Main(context.Background(), "eddy-ctl bench", args, stdout, stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	default:
		stderr.Write([]byte(err.Error() + "\n"))
		return 1
	}
}

// bench lsm on a small workload: one JSON object with every figure, and
// the bench's own model check (counts and first pages of 51 targets
// against the workload's bookkeeping, and Pebble's keys) passed.
func TestBenchLSM(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"lsm", "--links", "20000", "--store", "file", "--queries", "500", "--tmp", t.TempDir(), "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines of output, want one JSON object:\n%s", len(lines), out.String())
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"links", "bytes_per_link", "meta_bytes_per_link", "write_links_per_sec_per_core",
		"query_p50_us", "query_p99_us", "gets_per_query_max", "count_1m_ms", "count_target_links",
		"pebble_bytes_per_link", "pebble_query_p50_us", "store", "seed", "elapsed_s", "flushes",
		"compactions", "tables", "go", "model_check",
	} {
		if _, ok := res[f]; !ok {
			t.Errorf("field %q missing", f)
		}
	}
	num := func(f string) float64 {
		v, _ := res[f].(float64)
		return v
	}
	if num("links") <= 0 || num("links") > 20000 {
		t.Errorf("links = %v", res["links"])
	}
	if res["model_check"] != "ok" {
		t.Errorf("model_check = %v", res["model_check"])
	}
	if res["store"] != "file" || num("seed") != 1 {
		t.Errorf("store %v seed %v", res["store"], res["seed"])
	}
	if num("count_target_links") != 10000 {
		t.Errorf("count_target_links = %v, want 10000 (N/2)", res["count_target_links"])
	}
	for _, f := range []string{"bytes_per_link", "meta_bytes_per_link", "write_links_per_sec_per_core", "query_p50_us", "gets_per_query_max", "count_1m_ms", "pebble_bytes_per_link", "pebble_query_p50_us", "flushes", "tables"} {
		if num(f) <= 0 {
			t.Errorf("%s = %v, want > 0", f, res[f])
		}
	}
	if !strings.HasPrefix(res["go"].(string), "go") {
		t.Errorf("go = %v", res["go"])
	}
}

func TestBenchUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{},
		{"pebble"},
		{"lsm", "--links", "10"},
		{"lsm", "--profile-phase", "everything"},
		{"lsm", "extra"},
	} {
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// --store s3 starts a MinIO server for the run (skipped without a binary,
// unless CI or EDDY_REQUIRE_MINIO=1 requires one).
func TestBenchLSMS3(t *testing.T) {
	if _, err := miniotest.FindBinary(); err != nil {
		if os.Getenv("CI") != "" || os.Getenv(miniotest.EnvRequire) == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v; run `make minio`", err)
	}
	var out, errb bytes.Buffer
	args := []string{"lsm", "--links", "5000", "--store", "s3", "--queries", "100", "--no-pebble", "--tmp", t.TempDir(), "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, out.String(), errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res["model_check"] != "ok" || !strings.HasPrefix(res["store"].(string), "s3") {
		t.Fatalf("model_check %v, store %v", res["model_check"], res["store"])
	}
}

// A store URL: the run uses a fresh prefix and deletes its objects after.
func TestBenchLSMStoreURL(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"lsm", "--links", "3000", "--store", "file://" + dir, "--queries", "100", "--no-pebble", "--tmp", t.TempDir(), "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, out.String(), errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res["model_check"] != "ok" {
		t.Fatalf("model_check %v", res["model_check"])
	}
	var left []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Fatalf("objects left in the store: %v", left)
	}
}

// The usage text and the usage errors name the command as it was called.
func TestBenchNames(t *testing.T) {
	for _, c := range []struct{ name, usage, want string }{
		{"eddy-ctl bench", "Usage: eddy-ctl bench lsm [flags]\n", "usage: want `bench lsm [flags]`"},
		{"eddy-bench", "Usage: eddy-bench lsm [flags]\n", "usage: want `eddy-bench lsm [flags]`"},
	} {
		var out, errb bytes.Buffer
		if err := Main(context.Background(), c.name, []string{"-h"}, &out, &errb); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s -h: %v", c.name, err)
		}
		if !strings.HasPrefix(out.String(), c.usage) || !strings.Contains(out.String(), "-no-pebble") {
			t.Errorf("%s -h printed:\n%s", c.name, out.String())
		}
		err := Main(context.Background(), c.name, nil, &out, &errb)
		if !errors.Is(err, ErrUsage) || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
