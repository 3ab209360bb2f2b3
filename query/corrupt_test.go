package query

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// A corrupt table is never answered: the query fails with a 500 that says
// so, the corruption is counted by tree and logged with the table.
func TestCorruptTableCountedAndLogged(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 50; i++ {
		f.write(like(i))
	}
	f.flush()
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	f.qs.Corrupt = m.Corrupt
	f.qs.Log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error})
	datas, err := filepath.Glob(filepath.Join(f.storeDir, "tables", "links", "*.data"))
	if err != nil || len(datas) != 1 {
		t.Fatalf("links tables %v, %v", datas, err)
	}
	b, err := os.ReadFile(datas[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(datas[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinks", map[string][]string{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}, &out)
	if code != 500 || out["error"] != "InternalServerError" || !strings.Contains(out["message"], "corrupt") {
		t.Fatalf("a query over a corrupt table: %d %v", code, out)
	}
	table := strings.TrimSuffix(filepath.Base(datas[0]), ".data")
	if !strings.Contains(logs.String(), "corrupt table") || !strings.Contains(logs.String(), table) {
		t.Fatalf("the log does not name table %s:\n%s", table, logs.String())
	}
	got := metricstest.Values(t, reg)
	if n := got["eddy_corrupt_total{tree=links}"]; n != 1 {
		t.Fatalf("eddy_corrupt_total{tree=links} = %v (all %v)", n, got)
	}
}
