package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds the browser the page test drives; in CI (or with
// EDDY_REQUIRE_MINIO=1, set by make test) a missing browser is a failure,
// else the test is skipped with the reason.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("EDDY_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" || os.Getenv("EDDY_REQUIRE_MINIO") != "" {
		t.Fatal("chromium is not installed (make testdeps installs it)")
	}
	t.Skip("chromium is not installed; make testdeps installs it")
	return ""
}

// A browser opening a node's address gets the index page (its HTML, not
// the JSON a client gets), showing the node's figures and every endpoint,
// and its example link answers JSON.
func TestIndexPageInBrowser(t *testing.T) {
	browser := chromium(t)
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	lc := up(t, "--nodes", "1", "--flush-interval", "200ms", "--source", "replay+file://"+src)
	waitCursor(t, lc, "replay:"+src, func(c string) bool { return strings.HasPrefix(c, "eof:") })
	base := "http://" + lc.Nodes[0].HTTP

	// What a client sees at the same address: JSON.
	r, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Stats struct {
			DIDs           int    `json:"dids"`
			LinkingRecords uint64 `json:"linking_records"`
		} `json:"stats"`
	}
	err = json.NewDecoder(r.Body).Decode(&stats)
	r.Body.Close()
	if err != nil || stats.Stats.LinkingRecords == 0 || stats.Stats.DIDs == 0 {
		t.Fatalf("GET / as JSON: %v %+v", err, stats)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
		t.Fatal(err)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return s
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	records, dids, endpoints := text("#records"), text("#dids"), text("dl")
	// The browser shows a JSON answer as text.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("dd a")), chromedp.WaitVisible(chromedp.CSS("pre"))); err != nil {
		t.Fatal(err)
	}
	example := text("pre")
	if !strings.Contains(title, "Eddy") {
		t.Errorf("title %q", title)
	}
	if records != strconv.FormatUint(stats.Stats.LinkingRecords, 10) || dids != strconv.Itoa(stats.Stats.DIDs) {
		t.Errorf("page shows %s records and %s accounts; the JSON says %d and %d", records, dids, stats.Stats.LinkingRecords, stats.Stats.DIDs)
	}
	for _, e := range []string{"getBacklinks", "getBacklinksCount", "getBacklinkDids", "getManyToManyCounts", "getManyToMany", "listBacklinks",
		"/links/count/distinct-dids", "/links/distinct-dids", "/links/all/count"} {
		if !strings.Contains(endpoints, e) {
			t.Errorf("the page does not list %s", e)
		}
	}
	var ans struct {
		Total   *int `json:"total"`
		Records []any
	}
	if err := json.Unmarshal([]byte(example), &ans); err != nil || ans.Total == nil {
		t.Errorf("the example link answered %.300q (%v), want getBacklinks JSON", example, err)
	}
	t.Logf("page: %q, %s records, %s accounts; example answered %d records", title, records, dids, len(ans.Records))
}
