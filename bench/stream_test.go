package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench lsm --shape backfill|live: the streamed workload, its sample
// checked page by page, the scale figures present; then bench scale draws
// the charts from the JSON results.
func TestBenchStreamShapes(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, shape := range []string{"backfill", "live"} {
		var out, errb bytes.Buffer
		args := []string{"lsm", "--shape", shape, "--links", "60000", "--queries", "200", "--tmp", t.TempDir(), "--json"}
		heap := filepath.Join(dir, "heap-"+shape+".prof")
		if shape == "backfill" {
			args = append(args, "--heapprofile", heap, "--profile-phase", "write")
		}
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s\n%s", shape, code, out.String(), errb.String())
		}
		var res map[string]any
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res["model_check"] != "ok" || res["shape"] != shape {
			t.Fatalf("%s: model_check %v shape %v", shape, res["model_check"], res["shape"])
		}
		for _, f := range []string{"bytes_per_link", "meta_bytes_per_link", "bucket_bytes_per_link", "peak_rss_bytes", "write_links_per_sec_per_core",
			"write_amplification", "tables", "runs", "manifest_bytes", "query_p50_us", "cold_query_p50_us", "gets_per_query_mean", "count_target_live", "sample_targets", "generator_cpu_s",
			"peak_heap_live_bytes"} {
			if v, _ := res[f].(float64); v <= 0 {
				t.Errorf("%s: %s = %v, want > 0", shape, f, res[f])
			}
		}
		// The collector's CPU in the write phase (the runtime's estimate;
		// the writes allocate enough for a collection even at 60k links),
		// within the phase's wall time on its one core.
		gc, _ := res["write_gc_cpu_s"].(float64)
		if wall, _ := res["write_wall_s"].(float64); gc <= 0 || gc > wall {
			t.Errorf("%s: write_gc_cpu_s %v, write_wall_s %v", shape, res["write_gc_cpu_s"], res["write_wall_s"])
		}
		if _, ok := res["pebble_bytes_per_link"]; ok {
			t.Errorf("%s: Pebble ran", shape)
		}
		// The heap profile (a gzipped protocol buffer; TestMemWatchHeapProfile
		// checks when it is written).
		if shape == "backfill" {
			if b, err := os.ReadFile(heap); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
				t.Errorf("%s: heap profile: %v, %d bytes", shape, err, len(b))
			}
		}
		f := filepath.Join(dir, "bench-"+shape+".json")
		if err := os.WriteFile(f, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var out, errb bytes.Buffer
	charts := filepath.Join(dir, "charts")
	if code := run(append([]string{"scale", "--out", charts}, files...), &out, &errb); code != 0 {
		t.Fatalf("scale: exit %d: %s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "| write links/s/core (with compaction) |") {
		t.Fatalf("scale table:\n%s", out.String())
	}
	for _, c := range []string{"bytes_per_link", "rss", "write", "warm_query", "cold_gets", "count"} {
		if fi, err := os.Stat(filepath.Join(charts, c+".png")); err != nil || fi.Size() == 0 {
			t.Errorf("chart %s: %v", c, err)
		}
	}
}

func TestBenchStreamUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{"lsm", "--shape", "tail"},
		{"lsm", "--shape", "backfill", "--breakdown"},
		{"scale"},
	} {
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// bench serve reopens a kept run's index as a node would and answers the
// sample's queries from it, reporting latency and memory.
func TestBenchServe(t *testing.T) {
	tmp := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"lsm", "--shape", "backfill", "--links", "60000", "--queries", "100", "--tmp", tmp, "--keep", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("lsm: exit %d: %s", code, errb.String())
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, "eddy-bench-*"))
	if len(dirs) != 1 {
		t.Fatalf("kept directories %v", dirs)
	}
	out.Reset()
	if code := run([]string{"serve", "--dir", dirs[0], "--links", "60000", "--queries", "300"}, &out, &errb); code != 0 {
		t.Fatalf("serve: exit %d: %s", code, errb.String())
	}
	var res ServeResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Queries != 300 || res.QueryTargets == 0 || res.QueryP50us <= 0 || res.RSSBytes <= 0 || res.Runs == 0 || res.MetaCacheMetas == 0 || res.StoreTableBytes == 0 {
		t.Fatalf("serve: %+v", res)
	}
	// --compact-full merges each tree into one run first (the flush's
	// lone run of links, in the fast form, is rewritten in columns).
	out.Reset()
	if code := run([]string{"serve", "--dir", dirs[0], "--links", "60000", "--queries", "300", "--compact-full"}, &out, &errb); code != 0 {
		t.Fatalf("serve --compact-full: exit %d: %s", code, errb.String())
	}
	var merged ServeResult
	if err := json.Unmarshal(out.Bytes(), &merged); err != nil {
		t.Fatal(err)
	}
	if merged.Runs != 1+merged.RevocationRuns || merged.RevocationRuns > 1 || merged.FullCompactS <= 0 || merged.QueryTargets != res.QueryTargets ||
		merged.StoreTableBytes == 0 || merged.StoreTableBytes >= res.StoreTableBytes {
		t.Fatalf("serve --compact-full: %+v, before it %d runs of %d bytes", merged, res.Runs, res.StoreTableBytes)
	}
	if code := run([]string{"serve", "--links", "60000"}, &out, &errb); code != 2 {
		t.Fatalf("serve without --dir: exit %d, want 2", code)
	}
}

// --compact-full: the write amplification is the write phase's PUTs over
// the tables it left, the same as a run without the full compaction,
// not over the merged index (smaller, which counted the same writes as
// more); the full compaction's PUTs are counted apart.
func TestBenchCompactFullWriteAmplification(t *testing.T) {
	results := map[bool]map[string]any{}
	for _, full := range []bool{false, true} {
		// Shards of 32 KiB of input: merges write several, so the merges
		// of flushes (one table each) and the full compaction (whose
		// inputs include the newest flushes) split their inputs.
		args := []string{"lsm", "--shape", "backfill", "--links", "60000", "--queries", "50", "--memtable-bytes", "131072", "--shard-target-bytes", "32768", "--tmp", t.TempDir(), "--json"}
		if full {
			args = append(args, "--compact-full")
		}
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var res map[string]any
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res["model_check"] != "ok" {
			t.Fatalf("%v: model_check %v", args, res["model_check"])
		}
		results[full] = res
	}
	f := func(full bool, k string) float64 { v, _ := results[full][k].(float64); return v }
	as, merged := f(false, "write_amplification"), f(true, "write_amplification")
	t.Logf("write amplification %.3f without the full compaction, %.3f with it; tables %.0f as written, %.0f merged",
		as, merged, f(true, "table_bytes_before_full_compaction"), f(true, "data_bytes")+f(true, "meta_bytes"))
	if before := f(true, "table_bytes_before_full_compaction"); before <= f(true, "data_bytes")+f(true, "meta_bytes") {
		t.Fatalf("tables as written %.0f bytes, merged %.0f: the full compaction did not shrink the index, the test shows nothing", before, f(true, "data_bytes")+f(true, "meta_bytes"))
	}
	if want := f(true, "store_put_bytes") / f(true, "table_bytes_before_full_compaction"); merged != want {
		t.Errorf("write amplification %.4f with --compact-full, want the write phase's PUTs over the tables as written, %.4f", merged, want)
	}
	if math.Abs(merged-as) > 0.01*as {
		t.Errorf("write amplification %.3f with --compact-full, %.3f without: the same writes", merged, as)
	}
	if f(true, "full_compact_put_bytes") <= 0 {
		t.Errorf("full_compact_put_bytes = %v", results[true]["full_compact_put_bytes"])
	}
	// The full compaction spills the inputs it splits (a few MB here);
	// the write phase's merges spill theirs.
	if f(true, "full_compact_spill_peak_bytes") <= 0 || f(false, "spill_peak_bytes") <= 0 {
		t.Errorf("spill peaks: full compaction %v, write phase %v", results[true]["full_compact_spill_peak_bytes"], results[false]["spill_peak_bytes"])
	}
}
