package ingest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/hashicorp/go-hclog"
)

// Repositories whose PDS fails stay listed as failed, with their error,
// in the published checkpoint; a new leadership term retries them and,
// the PDS healed, writes them: the index then equals the model.
// (Over 120 lines: one scenario: failures, retries and the checkpoint across restarts.)
func TestBackfillFailedReposRetried(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 9, Accounts: 60})
	world.Step(600)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()

	// Three active did:plc accounts whose DID documents, while broken is
	// set, name a PDS that answers 500.
	var victims []string
	for _, a := range world.Accounts() {
		if strings.HasPrefix(a.DID, "did:plc:") && a.Status == simnet.StatusActive && len(world.Records(a.DID)) > 0 && len(victims) < 3 {
			victims = append(victims, a.DID)
		}
	}
	if len(victims) != 3 {
		t.Fatalf("found %d victims", len(victims))
	}
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusInternalServerError)
	}))
	defer dead.Close()
	var broken atomic.Bool
	broken.Store(true)
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(sim.PLCURL() + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		did := strings.TrimPrefix(r.URL.Path, "/")
		if broken.Load() && slices.Contains(victims, did) {
			var doc map[string]any
			if json.Unmarshal(body, &doc) == nil {
				for _, s := range doc["service"].([]any) {
					s.(map[string]any)["serviceEndpoint"] = dead.URL
				}
				body, _ = json.Marshal(doc)
			}
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	}))
	defer plc.Close()

	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := lsm.NewCatalog(t.TempDir(), store)
	bf := &Backfill{Relay: sim.RelayURL(), PLC: plc.URL, DIDWeb: plc.URL}
	term := func(until func() bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := &Runner{Config: Config{Node: node, Store: store, Catalog: cat, FlushInterval: 100 * time.Millisecond,
			Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})}, Sources: []Source{bf}}
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		deadline := time.Now().Add(60 * time.Second)
		for !until() {
			if time.Now().After(deadline) {
				t.Fatalf("term did not finish: cursor %q, state %q", node.FSM.Cursor(bf.Name()), node.FSM.Cursor(bf.Name()+StateCursorSuffix))
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		<-done
	}
	published := func() BackfillCheckpoint {
		t.Helper()
		key := node.FSM.Cursor(bf.Name() + StateCursorSuffix)
		if key == "" {
			return BackfillCheckpoint{}
		}
		cp, err := readCheckpoint(context.Background(), store, key)
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}

	// Term 1: the listing ends with the three repositories failed.
	term(func() bool { cp := published(); return Done(cp.Cursor) })
	cp := published()
	var failed []string
	for _, r := range cp.Failed {
		failed = append(failed, r.DID)
		if r.State != RepoFailed || !strings.Contains(r.Error, "500") || r.Attempts < 2 {
			t.Errorf("failed repository %+v: want state failed, the PDS's 500, two attempts (listing, retry pass)", r)
		}
	}
	slices.Sort(failed)
	slices.Sort(victims)
	if !slices.Equal(failed, victims) {
		t.Fatalf("checkpoint lists failed %v, want %v", failed, victims)
	}
	if cp.Done+cp.Gone+len(cp.Failed) < len(world.Accounts())-5 || cp.Listed != len(world.Accounts()) {
		t.Fatalf("checkpoint counters: listed %d, done %d, gone %d, failed %d of %d accounts", cp.Listed, cp.Done, cp.Gone, len(cp.Failed), len(world.Accounts()))
	}
	t.Logf("term 1: listed %d, done %d, gone %d, failed %v", cp.Listed, cp.Done, cp.Gone, failed)
	if counts, _ := bf.Progress(); counts["pending"] != 0 {
		t.Fatalf("nothing in flight after the listing, yet progress says %v", counts)
	}
	// The checkpoint closing the listing keeps each repository's outcome
	// of its last page: the three failed, the others done with their revs.
	var failedInPage, doneWithRev int
	for _, r := range cp.Page {
		switch {
		case r.State == RepoFailed && slices.Contains(victims, r.DID):
			failedInPage++
		case r.State == RepoDone && r.Rev != "":
			doneWithRev++
		}
	}
	if failedInPage != 3 || doneWithRev < 50 {
		t.Fatalf("the closing page: %d victims failed, %d done with a rev: %+v", failedInPage, doneWithRev, cp.Page)
	}

	// Term 2, PDS healed: the new term retries them from the published
	// state; the older checkpoints are collected.
	broken.Store(false)
	first := node.FSM.Cursor(bf.Name() + StateCursorSuffix)
	term(func() bool {
		k := node.FSM.Cursor(bf.Name() + StateCursorSuffix)
		return k != first && len(published().Failed) == 0
	})
	cp = published()
	t.Logf("term 2: listed %d, done %d, gone %d, failed %d", cp.Listed, cp.Done, cp.Gone, len(cp.Failed))
	var written []string
	for _, r := range cp.Page {
		if r.State == RepoDone && r.Rev != "" {
			written = append(written, r.DID)
		}
	}
	if !slices.Equal(written, victims) {
		t.Fatalf("term 2's retry page wrote %v (with their revs), want %v: %+v", written, victims, cp.Page)
	}
	compareModel(t, node, store, world)
	var left []string
	store.List(context.Background(), checkpointPrefix(bf.Name()), func(k string, _ int64) error { left = append(left, k); return nil })
	if len(left) > 2 || !slices.Contains(left, node.FSM.Cursor(bf.Name()+StateCursorSuffix)) {
		t.Fatalf("checkpoints left %v; published %s", left, node.FSM.Cursor(bf.Name()+StateCursorSuffix))
	}
}
