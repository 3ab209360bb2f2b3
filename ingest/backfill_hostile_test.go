package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Remote servers that answer badly: the backfill neither loses a
// repository that can be fetched nor stops for one that cannot.

// carWorld is a small simulated network whose active accounts' CARs a
// test PDS serves (all did:plc).
func carWorld(t *testing.T) (*simnet.World, []string) {
	world := simnet.NewWorld(simnet.Config{Seed: 7, Accounts: 4, WebPercent: -1})
	world.Step(200)
	var dids []string
	for _, a := range world.Accounts() {
		if a.Active() {
			dids = append(dids, a.DID)
		}
	}
	if len(dids) < 2 {
		t.Fatalf("%d active accounts", len(dids))
	}
	return world, dids
}

// serveCAR answers getRepo from world.
func serveCAR(w http.ResponseWriter, r *http.Request, world *simnet.World) {
	car, err := world.RepoCAR(r.URL.Query().Get("did"))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":%q}`, err.Error())
		return
	}
	w.Write(car)
}

// A 404 without an XRPC error (a proxy's page, a PDS being deployed) is a
// failure, tried again, not a repository gone: before, the repository was
// revoked and never asked again. An XRPC RepoNotFound is gone.
func TestBackfillBare404IsNotGone(t *testing.T) {
	world, dids := carWorld(t)
	var asked atomic.Int32
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch did := r.URL.Query().Get("did"); {
		case did == dids[1]:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"RepoNotFound","message":"Could not find repo"}`)
		case asked.Add(1) == 1:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, "<html><body>404 Not Found<hr>nginx</body></html>")
		default:
			serveCAR(w, r, world)
		}
	}))
	defer pds.Close()
	w, node, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: faultPLC(t, pds.URL)}
	b.state.Store(newBackfillState(b.Name()))
	ctx := context.Background()
	for _, did := range dids[:2] {
		if err := b.repo(ctx, w, did, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.retryFailed(ctx, w, EOFCursor("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	counts, failed := b.Progress()
	if counts["done"] != 1 || counts["gone"] != 1 || len(failed) != 0 || asked.Load() < 2 || len(node.FSM.Manifest().RunsOf(lsm.TreeLinks)) == 0 {
		t.Fatalf("counts %v, failed %v, the bare 404's repository asked %d times, %d runs of links", counts, failed, asked.Load(), len(node.FSM.Manifest().RunsOf(lsm.TreeLinks)))
	}
}

// An empty page that carries a cursor does not end the listing (before,
// the repositories after it were never fetched and the listing was
// marked done); a cursor that comes back fails the pass instead of
// listing the same pages for ever.
func TestBackfillListingEdges(t *testing.T) {
	world, dids := carWorld(t)
	var mu sync.Mutex
	fetched := map[string]bool{}
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetched[r.URL.Query().Get("did")] = true
		mu.Unlock()
		serveCAR(w, r, world)
	}))
	defer pds.Close()
	loop := false
	var lists atomic.Int32
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lists.Add(1)
		c := r.URL.Query().Get("cursor")
		switch {
		case loop:
			next := map[string]string{"": "A", "A": "B", "B": "A"}[c]
			fmt.Fprintf(w, `{"cursor":%q,"repos":[{"did":%q}]}`, next, dids[0])
		case c == "":
			fmt.Fprintf(w, `{"cursor":"c1","repos":[{"did":%q}]}`, dids[0])
		case c == "c1":
			fmt.Fprint(w, `{"cursor":"c2","repos":[]}`)
		default:
			fmt.Fprintf(w, `{"repos":[{"did":%q}]}`, dids[1])
		}
	}))
	defer relay.Close()
	w, node, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{Relay: relay.URL, PLC: faultPLC(t, pds.URL), NoCompaction: true}
	ctx := context.Background()
	if err := b.pass(ctx, w, "", false); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !fetched[dids[0]] || !fetched[dids[1]] || !Done(node.FSM.Cursor(b.Name())) || lists.Load() != 3 {
		t.Fatalf("fetched %v, cursor %q, %d pages asked", fetched, node.FSM.Cursor(b.Name()), lists.Load())
	}

	loop = true
	lists.Store(0)
	b = &Backfill{Relay: relay.URL, PLC: faultPLC(t, pds.URL), NoCompaction: true}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := b.pass(cctx, w, "", false)
	if err == nil || !strings.Contains(err.Error(), "loops") || lists.Load() != 3 {
		t.Fatalf("a looping listing: %v after %d pages", err, lists.Load())
	}
}

// A PDS that stops sending (it announces a large body and sends a trickle)
// is given up after a window, not the request's five minutes; a fetch
// that waits for its share of the memory meanwhile is not.
func TestBackfillTooSlowPDS(t *testing.T) {
	defer func(w time.Duration) { progressWindow = w }(progressWindow)
	progressWindow = 200 * time.Millisecond
	world, dids := carWorld(t)
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("did") != dids[0] {
			serveCAR(w, r, world)
			return
		}
		w.Header().Set("Content-Length", "400000")
		for i := 0; i < 100 && r.Context().Err() == nil; i++ {
			w.Write([]byte{0})
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
	}))
	defer pds.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: faultPLC(t, pds.URL), Memory: 1 << 20}
	b.state.Store(newBackfillState(b.Name()))
	ctx := context.Background()
	start := time.Now()
	if err := b.repo(ctx, w, dids[0], false); err != nil {
		t.Fatal(err)
	}
	_, failed := b.Progress()
	if len(failed) != 1 || !strings.Contains(failed[0].Error, "too slowly") || time.Since(start) > 6*time.Second {
		t.Fatalf("after %v: failed %v", time.Since(start), failed)
	}

	// The whole memory held elsewhere for six windows: the fetch waits,
	// and is not given up on. (Its repository is smaller than progressMin,
	// so it must end within the first whole window after the wait; the
	// window is longer here for a loaded machine.)
	progressWindow = 500 * time.Millisecond
	b.setup()
	hold := &memShare{m: b.memory}
	if err := hold.grow(ctx, int(b.Memory)); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(6 * progressWindow); hold.release() }()
	car, err := b.fetchRepo(ctx, dids[1], nil, &memShare{m: b.memory})
	if err != nil || len(car) == 0 || errors.Is(err, errTooSlow) {
		t.Fatalf("a fetch that waited for memory: %d bytes, %v", len(car), err)
	}
}

// A did:web's document is asked of its host name alone: only localhost
// and 127.0.0.1 (test setups) take a port and plain HTTP; no DID chooses a
// path, a query or a port on another host.
func TestDIDWebURL(t *testing.T) {
	for did, want := range map[string]string{
		"did:web:example.com":                       "https://example.com/.well-known/did.json",
		"did:web:localhost%3A8080":                  "http://localhost:8080/.well-known/did.json",
		"did:web:127.0.0.1%3A2583":                  "http://127.0.0.1:2583/.well-known/did.json",
		"did:web:localhost":                         "http://localhost/.well-known/did.json",
		"did:web:localhost.evil.example%3A6379":     "",
		"did:web:localhost.evil.example%3A6379%2Fx": "",
		"did:web:127.0.0.1.nip.io%3A8080%2Fx":       "",
		"did:web:evil.example%3A8080":               "",
		"did:web:example.com%2Fpath":                "",
		"did:web:example.com%3Fq%3D1":               "",
		"did:web:localhost%3A80%2Fadmin":            "",
		"did:web:localhost%3Ahttp":                  "",
		"did:web:user%40example.com":                "",
		"did:web:":                                  "",
	} {
		got, err := didWebURL(did)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%s: %q, %v; want %q", did, got, err, want)
		}
	}
}

// A PDS is asked for its CAR uncompressed (a small gzip body can decode
// to the whole CAR bound); the relay's listing may come compressed.
func TestBackfillAsksPDSesUncompressed(t *testing.T) {
	world, dids := carWorld(t)
	var pdsEnc, relayEnc atomic.Value
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pdsEnc.Store(r.Header.Get("Accept-Encoding"))
		serveCAR(w, r, world)
	}))
	defer pds.Close()
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		relayEnc.Store(r.Header.Get("Accept-Encoding"))
		fmt.Fprintf(w, `{"repos":[{"did":%q}]}`, dids[0])
	}))
	defer relay.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{Relay: relay.URL, PLC: faultPLC(t, pds.URL), NoCompaction: true}
	if err := b.pass(context.Background(), w, "", false); err != nil {
		t.Fatal(err)
	}
	if counts, _ := b.Progress(); counts["done"] != 1 || pdsEnc.Load() != "" || relayEnc.Load() != "gzip" {
		t.Fatalf("counts %v; the PDS was asked with Accept-Encoding %q, the relay with %q", counts, pdsEnc.Load(), relayEnc.Load())
	}
}

// A DID document that does not come within didDocTimeout fails the try
// (a did:web host that stalls held a fetch for the request's five
// minutes); a relay that answers 429 with Retry-After is asked again when
// it says.
func TestBackfillSlowDocumentAndRelayRetryAfter(t *testing.T) {
	defer func(d time.Duration) { didDocTimeout = d }(didDocTimeout)
	didDocTimeout = 200 * time.Millisecond
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer plc.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: plc.URL}
	b.state.Store(newBackfillState(b.Name()))
	start := time.Now()
	if err := b.repo(context.Background(), w, faultDID, false); err != nil {
		t.Fatal(err)
	}
	if _, failed := b.Progress(); len(failed) != 1 || time.Since(start) > 6*time.Second {
		t.Fatalf("after %v: failed %v", time.Since(start), failed)
	}

	var mu sync.Mutex
	var at []time.Time
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		n := len(at)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":"RateLimitExceeded"}`)
			return
		}
		fmt.Fprint(w, `{"repos":[]}`)
	}))
	defer relay.Close()
	b = &Backfill{Relay: relay.URL}
	_, err := b.listRepos(context.Background(), "")
	mu.Lock()
	defer mu.Unlock()
	if err != nil || len(at) != 2 || at[1].Sub(at[0]) < 2*time.Second {
		t.Fatalf("listRepos: %v after %d asks, %v apart", err, len(at), at[len(at)-1].Sub(at[0]))
	}
}
