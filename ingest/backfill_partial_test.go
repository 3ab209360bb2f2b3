package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/lsm"
)

// A repository whose CAR lacks blocks its tree names (a partial
// repository, testdata's repo_slice.car) is not written: its revocation
// would kill the links of the records it cannot show. The fetch counts
// as failed, to be retried; the index is untouched.
func TestBackfillRefusesPartialCAR(t *testing.T) {
	partial, err := os.ReadFile("../testdata/indigo/testing/testdata/repo_slice.car")
	if err != nil {
		t.Fatal(err)
	}
	info, err := event.DecodeCARWith(partial, event.CAROptions{NoCID: true}, func(*event.Op) error { return nil })
	if err != nil || len(info.Missing) == 0 || !strings.HasPrefix(info.DID, "did:plc:") {
		t.Fatalf("repo_slice.car: %+v, %v: want a did:plc repository with blocks missing", info, err)
	}
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.ipld.car")
		w.Write(partial)
	}))
	defer pds.Close()
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"id":%q,"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":%q}]}`, info.DID, pds.URL)
	}))
	defer plc.Close()
	ctx := context.Background()
	w, node, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: plc.URL}
	err = b.Resync(ctx, w, info.DID)
	if !errors.Is(err, errResyncFailed) || !strings.Contains(err.Error(), "lacks") {
		t.Fatalf("resync of a partial repository: %v", err)
	}
	if err := b.repo(ctx, w, info.DID, false); err != nil {
		t.Fatalf("backfill of a partial repository: %v", err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m := node.FSM.Manifest()
	if n := len(m.RunsOf(lsm.TreeLinks)) + len(m.RunsOf(lsm.TreeRevocations)); n != 0 {
		t.Fatalf("%d runs written for a partial repository", n)
	}
	if st := b.Stats().Snapshot(); st["failed"] != 2 || st["done"] != 0 {
		t.Fatalf("stats %v: want 2 failed", st)
	}
}
