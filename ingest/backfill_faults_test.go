package ingest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

const faultDID = "did:plc:abcdefghijklmnopqrstuvwx"

// faultPLC is a PLC directory whose every DID document names endpoint as
// its PDS.
func faultPLC(t *testing.T, endpoint string) string {
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		did := strings.TrimPrefix(r.URL.Path, "/")
		fmt.Fprintf(w, `{"id":%q,"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":%q}]}`, did, endpoint)
	}))
	t.Cleanup(plc.Close)
	return plc.URL
}

// A PDS that answers 429 with Retry-After is asked again when it says, not
// sooner, and not waited for after the last try; what is kept of its answer
// is the XRPC error, or the printable start of the body, at most
// errorBodyMax bytes (it goes into every checkpoint and the status).
func TestBackfillHonoursRetryAfterAndKeepsShortErrors(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	page := "<html>\x1b[31m" + strings.Repeat("<p>origin unreachable</p>", 10_000)
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		n := len(at)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":"RateLimitExceeded","message":"slow down"}`)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, page)
	}))
	defer pds.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: faultPLC(t, pds.URL)}
	b.state.Store(newBackfillState(b.Name()))
	start := time.Now()
	if err := b.repo(context.Background(), w, faultDID, false); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if len(at) != backfillTries || at[1].Sub(at[0]) < 2*time.Second {
		t.Fatalf("%d tries, the second %v after the first; want %d, at least 2s apart (Retry-After)", len(at), at[1].Sub(at[0]), backfillTries)
	}
	if last := at[len(at)-1]; took-last.Sub(start) > time.Second {
		t.Fatalf("%v spent after the last try", took-last.Sub(start))
	}
	cp := b.state.Load().snapshot("x", allPages)
	if len(cp.Failed) != 1 || len(cp.Failed[0].Error) > errorBodyMax+64 || strings.ContainsRune(cp.Failed[0].Error, 0x1b) || !strings.Contains(cp.Failed[0].Error, "HTTP 502: <html>") {
		t.Fatalf("failed %d, error of %d bytes: %.120q", len(cp.Failed), len(cp.Failed[0].Error), cp.Failed[0].Error)
	}
	if e := errorText([]byte(`{"error":"RateLimitExceeded","message":"slow down"}`)); e != "RateLimitExceeded: slow down" {
		t.Fatalf("XRPC error kept as %q", e)
	}
}

// A resync whose CAR does not decode fails (its marker stays, to be tried
// again); it was reported done, its marker cleared for good.
func TestResyncOfABadCARFails(t *testing.T) {
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("this is not a CAR"))
	}))
	defer pds.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: faultPLC(t, pds.URL)}
	if err := b.Resync(context.Background(), w, faultDID); err == nil {
		t.Fatal("a resync whose CAR does not decode reported success")
	}
}

// listRepos: an account the relay lists as gone (deactivated) is not
// fetched, and counted inactive; one it lists inactive for its own reasons
// (throttled) is still there, and fetched.
func TestBackfillListsRelayInactive(t *testing.T) {
	var fetched sync.Map
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Store(r.URL.Query().Get("did"), true)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer pds.Close()
	const throttled, deactivated = "did:plc:tttttttttttttttttttttttt", "did:plc:dddddddddddddddddddddddd"
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"repos":[{"did":%q,"active":false,"status":"throttled"},{"did":%q,"active":false,"status":"deactivated"}]}`, throttled, deactivated)
	}))
	defer relay.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{Relay: relay.URL, PLC: faultPLC(t, pds.URL), NoCompaction: true}
	if err := b.pass(context.Background(), w, "", false); err != nil {
		t.Fatal(err)
	}
	counts, _ := b.Progress()
	_, t1 := fetched.Load(throttled)
	_, d1 := fetched.Load(deactivated)
	if !t1 || d1 || counts["inactive"] != 1 || counts["failed"] != 1 {
		t.Fatalf("throttled fetched %v, deactivated fetched %v, counts %v", t1, d1, counts)
	}
}

// The retry pass (after the listing, and first on every new leader) fetches
// the failed repositories as many at once as a page's.
func TestRetryFailedConcurrent(t *testing.T) {
	var cur, most atomic.Int32
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(200 * time.Millisecond)
		cur.Add(-1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer pds.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: faultPLC(t, pds.URL), Concurrency: 16, PerHost: 16}
	st := newBackfillState(b.Name())
	for _, d := range []string{"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", "did:plc:cccccccccccccccccccccccc"} {
		st.failed[d] = &RepoState{DID: d, State: RepoFailed}
	}
	b.state.Store(st)
	if err := b.retryFailed(context.Background(), w, EOFCursor("x")); err != nil {
		t.Fatal(err)
	}
	if most.Load() < 2 {
		t.Fatalf("at most %d repositories fetched at once", most.Load())
	}
}

// A resync that fails is tried again in the same term, after a wait that
// doubles; it waited for the next leader.
func TestFailedResyncTriedAgain(t *testing.T) {
	defer func(d time.Duration) { resyncRetryBase = d }(resyncRetryBase)
	resyncRetryBase = 100 * time.Millisecond
	var hits atomic.Int32
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer pds.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: faultPLC(t, pds.URL), ResyncOnly: true}
	w.resyncer.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (&Runner{}).resyncLoop(ctx, w, b)
	w.mu.Lock()
	w.requestResync("test", faultDID, time.Time{})
	w.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for hits.Load() <= backfillTries {
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches in 20s: the failed resync was not tried again", hits.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resyncRetryBase = time.Minute
	if a, b := resyncRetry(1), resyncRetry(10); a != time.Minute || b != time.Hour {
		t.Fatalf("resyncRetry: %v after one failure, %v after ten; want a minute, and the hour it is bounded by", a, b)
	}
}

// A DID document (anyone can publish one) cannot point the leader at a
// path of its choosing, nor, unless the backfill runs on a private network
// (its relay or PLC directory on a private address, or private=true), at a
// private address: a PDS or did:web host must be a public one.
func TestBackfillFetchesPublicHostsOnly(t *testing.T) {
	var asked atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, "SECRET")
	}))
	defer internal.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	no, yes := false, true
	for _, c := range []struct {
		name     string
		endpoint string
		private  *bool
		want     string // in the repository's error
	}{
		{"a path", internal.URL + "/admin/secrets?x=", nil, "not a base URL"},
		{"a user", "http://user@" + strings.TrimPrefix(internal.URL, "http://"), nil, "not a base URL"},
		{"a private address", internal.URL, &no, "not a public address"},
	} {
		b := &Backfill{PLC: faultPLC(t, c.endpoint), Private: c.private}
		b.state.Store(newBackfillState(b.Name()))
		if err := b.repo(context.Background(), w, faultDID, false); err != nil {
			t.Fatal(err)
		}
		_, failed := b.Progress()
		if len(failed) != 1 || !strings.Contains(failed[0].Error, c.want) || strings.Contains(failed[0].Error, "SECRET") {
			t.Fatalf("%s: failed %+v; want one failure saying %q", c.name, failed, c.want)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the internal server was asked %d times", n)
	}
	// By default a backfill whose PLC directory is on a private address
	// (here loopback) is on a private network: its PDSes may be too.
	b := &Backfill{PLC: faultPLC(t, internal.URL), Private: &yes}
	b.state.Store(newBackfillState(b.Name()))
	if err := b.repo(context.Background(), w, faultDID, false); err != nil || asked.Load() == 0 {
		t.Fatalf("private=true: %v, asked %d times", err, asked.Load())
	}
	if !(&Backfill{PLC: "http://127.0.0.1:2582"}).privateAllowed() || (&Backfill{Relay: "https://bsky.network", PLC: "https://plc.directory"}).privateAllowed() {
		t.Fatal("the default: private addresses allowed only for a backfill configured on one")
	}
	// That default is logged, since it opens the private network to the
	// hosts DID documents name; an explicit choice is not.
	for _, c := range []struct {
		private *bool
		warn    bool
	}{{nil, true}, {&yes, false}} {
		var buf bytes.Buffer
		b := &Backfill{PLC: "http://127.0.0.1:2582", Private: c.private, Log: hclog.New(&hclog.LoggerOptions{Output: &buf})}
		b.setup()
		if got := strings.Contains(buf.String(), "&private=false"); got != c.warn {
			t.Fatalf("private %v: warned %v, want %v:\n%s", c.private, got, c.warn, buf.String())
		}
	}
	for a, public := range map[string]bool{
		"8.8.8.8": true, "2001:4860:4860::8888": true, "127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false,
		"192.168.1.1": false, "169.254.169.254": false, "100.64.0.1": false, "0.0.0.0": false, "::1": false,
		"fd00::1": false, "fe80::1": false, "::ffff:127.0.0.1": false, "0.1.2.3": false,
		"198.18.0.1": false, "240.0.0.1": false, "64:ff9b::a00:1": false, "2002:a00:1::1": false,
		"::7f00:1": false, "192.0.0.8": false, "2001::1": false, "fec0::1": false, "100::1": false,
	} {
		if got := publicAddr(netip.MustParseAddr(a)); got != public {
			t.Errorf("publicAddr(%s) = %v", a, got)
		}
	}
}

// A repository whose fetch failed holds no memory share while it waits
// for its next try and its host's slot: the slot's holder may be waiting
// in grow for that share (found by a review: with one slot a host and a
// bound of 1 MiB, both waited until their context ended).
func TestRetryHoldsNoMemoryShare(t *testing.T) {
	const rDID, sDID = "did:plc:rrrrrrrrrrrrrrrrrrrrrrrr", "did:plc:ssssssssssssssssssssssss"
	rFailed := make(chan struct{})
	var rTries atomic.Int32
	pds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("did") == rDID && rTries.Add(1) == 1 {
			w.WriteHeader(http.StatusOK)
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			defer close(rFailed)
			panic(http.ErrAbortHandler) // the connection drops mid-body
		}
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(http.StatusOK)
		w.Write(make([]byte, 100000))
	}))
	defer pds.Close()
	w, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{PLC: faultPLC(t, pds.URL), PerHost: 1, Memory: 1 << 20}
	b.state.Store(newBackfillState(b.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rDone := make(chan error, 1)
	go func() { rDone <- b.repo(ctx, w, rDID, false) }()
	<-rFailed
	sDone := make(chan error, 1)
	go func() { sDone <- b.repo(ctx, w, sDID, false) }()
	for _, c := range []chan error{rDone, sDone} {
		select {
		case err := <-c:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stuck: the failed repository tried %d times", rTries.Load())
		}
	}
	if rTries.Load() < 2 {
		t.Fatalf("the failed repository tried %d times", rTries.Load())
	}
}
