package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// bench lsm on a small workload: one JSON object with every figure, and
// the bench's own model check (counts and first pages of 51 targets
// against the workload's bookkeeping, and Pebble's keys) passed.
func TestBenchLSM(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "lsm", "--links", "20000", "--store", "file", "--queries", "500", "--tmp", t.TempDir(), "--json"}
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
		{"bench"},
		{"bench", "pebble"},
		{"bench", "lsm", "--links", "10"},
		{"bench", "lsm", "--profile-phase", "everything"},
		{"bench", "lsm", "extra"},
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
	args := []string{"bench", "lsm", "--links", "5000", "--store", "s3", "--queries", "100", "--no-pebble", "--tmp", t.TempDir(), "--json"}
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
	args := []string{"bench", "lsm", "--links", "3000", "--store", "file://" + dir, "--queries", "100", "--no-pebble", "--tmp", t.TempDir(), "--json"}
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
