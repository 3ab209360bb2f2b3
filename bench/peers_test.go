package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/internal/toxiproxytest"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// The whole comparison of bench peers, small: every system writes the
// same 40k-link stream, every sample target's count matches the
// workload's in each (peerChild fails otherwise), every class's pages
// add up to its targets' links, and the report names every system. The
// PostgreSQL server is started here (initdb), and MinIO and toxiproxy for
// eddy-s3; without them the test fails under make test (EDDY_REQUIRE_PG=1,
// EDDY_REQUIRE_MINIO=1) and is skipped elsewhere.
func TestPeersSmall(t *testing.T) {
	if _, err := findPGBin(""); err != nil {
		if os.Getenv("EDDY_REQUIRE_PG") != "" {
			t.Fatalf("PostgreSQL is required (EDDY_REQUIRE_PG): %v", err)
		}
		t.Skipf("no PostgreSQL: %v", err)
	}
	if _, err := toxiproxytest.Find(); err != nil {
		if os.Getenv("EDDY_REQUIRE_PG") != "" {
			t.Fatalf("toxiproxy is required with PostgreSQL (EDDY_REQUIRE_PG): %v", err)
		}
		t.Skipf("no toxiproxy: %v", err)
	}
	if _, err := miniotest.FindBinary(); err != nil {
		if os.Getenv("EDDY_REQUIRE_MINIO") != "" || os.Getenv("CI") != "" {
			t.Fatalf("MinIO is required: %v", err)
		}
		t.Skipf("no MinIO: %v", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	pg, err := startPG(ctx, filepath.Join(dir, "pg"), "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.stop()
	rep := &PeersReport{Links: 40_000, Seed: 3, MegaLinks: 4_000}
	for _, sys := range peerSystems {
		c := &peersConfig{links: rep.Links, mega: rep.MegaLinks, reps: 20, seed: rep.Seed, dir: filepath.Join(dir, sys), system: sys, dsn: pg.dsn}
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := peerChild(ctx, c, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", sys, err)
		}
		if r.CheckedTargets == 0 || r.Bytes <= 0 || r.LinksPerCPUS <= 0 || len(r.Classes) != len(peerClasses) {
			t.Fatalf("%s: %+v", sys, r)
		}
		for _, cl := range r.Classes {
			if cl.Targets == 0 || cl.FirstPageP50us <= 0 || cl.AllPagesP50ms <= 0 {
				t.Fatalf("%s %s: %+v", sys, cl.Class, cl)
			}
		}
		if strings.HasPrefix(sys, "pg-") && r.ServerRSSBytes <= 0 {
			t.Errorf("%s: no server memory measured", sys)
		}
		if sys == "eddy-s3" {
			// Far away, a cold query takes at least one round trip and,
			// by the design, at most two.
			if len(r.Cold) != len(farRTTs) {
				t.Fatalf("eddy-s3: %d cold measures, want %d", len(r.Cold), len(farRTTs))
			}
			for _, c := range r.Cold {
				if c.RoundTripsMax < 1 || c.RoundTripsMax > 2 || c.P50us < c.RTTms*1e3 {
					t.Errorf("eddy-s3 cold at %.0f ms: %+v", c.RTTms, c)
				}
			}
		}
		rep.Results = append(rep.Results, *r)
	}
	by := map[string]PeerResult{}
	for _, r := range rep.Results {
		by[r.System] = r
	}
	// Eddy's one claim that holds at any size: fewer bytes a link than
	// every peer.
	for _, sys := range peerSystems {
		if strings.HasPrefix(sys, "eddy") {
			continue
		}
		if e, p := by["eddy"].BytesPerLink, by[sys].BytesPerLink; e >= p {
			t.Errorf("eddy %.2f B/link, %s %.2f", e, sys, p)
		}
	}
	table := peersTable(rep)
	if !strings.Contains(table, "Eddy against its peers") {
		t.Errorf("the report does not open with the verdict:\n%s", table)
	}
	for _, sys := range peerSystems {
		if !strings.Contains(table, "| "+sys+" |") {
			t.Errorf("the report has no row for %s:\n%s", sys, table)
		}
	}
	files, err := drawPeersCharts(t.TempDir(), rep)
	if err != nil || len(files) != 2+len(peerClasses) {
		t.Fatalf("charts: %v, %v", files, err)
	}
	t.Log(table)
}
