package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// A repository that takes long (a large CAR, a slow PDS) holds up neither
// the pages after it (up to backfillPagesOpen of them are in flight) nor
// the fetches in flight; the cursor published never passes its page until
// it is written, and the pass ends with every repository written.
// Before, each page waited for its slowest repository: nothing after it
// was fetched meanwhile.
func TestBackfillSlowRepositoryHoldsOnlyItsPage(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 21, Accounts: 40})
	world.Step(300)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()

	// The relay's listing, three repositories a page.
	const perPage = 3
	var lists atomic.Int32
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lists.Add(1)
		q := r.URL.Query()
		q.Set("limit", "3")
		proxyTo(w, sim.RelayURL()+r.URL.Path+"?"+q.Encode())
	}))
	defer relay.Close()
	var order []string // the repositories in listing order
	fetchable := map[string]bool{}
	var out listReposOut
	resp, err := http.Get(sim.RelayURL() + "/xrpc/com.atproto.sync.listRepos?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Repos {
		order = append(order, r.DID)
		fetchable[r.DID] = r.Active == nil || *r.Active || !event.AccountGone(r.Status)
	}
	if len(order) < (2+backfillPagesOpen)*perPage {
		t.Fatalf("%d repositories listed", len(order))
	}
	// The slow one: a repository of the second page; its DID document is
	// held until released.
	slow := ""
	for _, did := range order[perPage : 2*perPage] {
		if fetchable[did] && slow == "" {
			slow = did
		}
	}
	if slow == "" {
		t.Fatal("no repository of page 2 is fetched")
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	var fetched sync.Map
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		did := strings.TrimPrefix(r.URL.Path, "/")
		if did == slow {
			<-release
		}
		fetched.Store(did, true)
		proxyTo(w, sim.PLCURL()+r.URL.Path)
	}))
	defer plc.Close()
	defer let() // before the servers close, on a failure too

	wr, _, _, _ := testWriterOf(t, 1<<20)
	b := &Backfill{Relay: relay.URL, PLC: plc.URL, DIDWeb: plc.URL, NoCompaction: true}
	done := make(chan error, 1)
	go func() { done <- b.pass(context.Background(), wr, "", false) }()

	// Every repository of the two pages after the slow one's is fetched
	// while it is held.
	var later []string
	for _, did := range order[2*perPage : 4*perPage] {
		if fetchable[did] {
			later = append(later, did)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := 0
		for _, did := range later {
			if _, ok := fetched.Load(did); ok {
				n++
			}
		}
		if n == len(later) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with one repository of page 2 held, %d of the %d repositories of pages 3 and 4 were fetched", n, len(later))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for a listing past the window, if it were made
	wr.mu.Lock()
	cursor := wr.mu.cursors[b.Name()]
	wr.mu.Unlock()
	if got, max := lists.Load(), int32(1+backfillPagesOpen); got > max {
		t.Errorf("%d pages listed while page 2 was unfinished; at most %d may be in flight", got, max)
	}
	if want := strconv.Itoa(perPage - 1); cursor != want { // the first page's cursor (simnet's: its last index)
		t.Errorf("cursor %q handed to the writer while page 2 is unfinished, want page 1's %q", cursor, want)
	}
	let()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the pass did not end once the slow repository was released")
	}
	counts, _ := b.Progress()
	if counts["done"]+counts["gone"] != len(order)-counts["inactive"] || counts["failed"] != 0 || counts["pending"] != 0 {
		t.Fatalf("counts %v for %d repositories listed", counts, len(order))
	}
}

// proxyTo answers w with a GET of u.
func proxyTo(w http.ResponseWriter, u string) {
	resp, err := http.Get(u)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// BenchmarkBackfillSlowRepositories: a backfill of a simulated network of
// 600 repositories, 50 a listRepos page, where one repository in fifty
// takes a second more than the others (its DID document is held back: a
// large CAR, a slow PDS), one page at a time (pages=1, the backfill before
// it kept pages in flight) and with backfillPagesOpen pages in flight.
// s/backfill is the wall time of the pass.
//
//	go test ./ingest -run '^$' -bench 'BackfillSlowRepositories' -benchtime 1x -count 3
func BenchmarkBackfillSlowRepositories(b *testing.B) {
	world := simnet.NewWorld(simnet.Config{Seed: 5, Accounts: 600})
	world.Step(3000)
	sim, err := simnet.Serve(world)
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		q.Set("limit", "50")
		proxyTo(w, sim.RelayURL()+r.URL.Path+"?"+q.Encode())
	}))
	defer relay.Close()
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := fnv.New32a(); true {
			h.Write([]byte(r.URL.Path))
			if h.Sum32()%50 == 0 {
				time.Sleep(time.Second)
			}
		}
		proxyTo(w, sim.PLCURL()+r.URL.Path)
	}))
	defer plc.Close()
	for _, open := range []int{1, backfillPagesOpen} {
		b.Run(fmt.Sprintf("pages=%d", open), func(b *testing.B) {
			var wall time.Duration
			for range b.N {
				wr, _, _, _ := testWriterOf(b, 64<<20)
				bf := &Backfill{Relay: relay.URL, PLC: plc.URL, DIDWeb: plc.URL, NoCompaction: true, pagesOpen: open}
				start := time.Now()
				if err := bf.pass(context.Background(), wr, "", false); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(start)
				if counts, _ := bf.Progress(); counts["failed"] != 0 || counts["done"] == 0 {
					b.Fatalf("counts %v", counts)
				}
			}
			b.ReportMetric(wall.Seconds()/float64(b.N), "s/backfill")
		})
	}
}

// A page whose repository failed the pass (an error that stops it, not a
// repository counted failed) is never closed, so its cursor is never
// published: it was closed once its count fell to zero, failure or not,
// between the pass's check for a failure and its checkpoint.
func TestPageWindowFailureClosesNothing(t *testing.T) {
	pw := newPageWindow()
	p := pw.add("c1")
	pw.start(p)
	pw.seal(p)
	if err := pw.wait(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	pw.done(p, errors.New("names read failed"))
	if seq, c, ok := pw.closed(); ok {
		t.Fatalf("page %d (cursor %q) closed after its repository failed the pass", seq, c)
	}
	if err := pw.wait(context.Background(), 2); err == nil {
		t.Fatal("wait after a failure: nil")
	}
	q := pw.add("c2")
	pw.start(q)
	pw.seal(q)
	pw.done(q, nil)
	if _, _, ok := pw.closed(); ok {
		t.Fatal("a page closed after an earlier one failed the pass")
	}
}
