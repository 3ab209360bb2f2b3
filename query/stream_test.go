package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// A didSet holds what a map of its accounts would, whatever the order and
// the repeats, across the compactions it makes as it grows.
func TestDIDSet(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	for _, n := range []int{0, 1, didSetMin - 1, didSetMin, 3 * didSetMin, 50_000} {
		var d didSet
		want := map[uint64]bool{}
		for range n {
			x := r.Uint64N(uint64(n/3 + 1)) // repeats
			if r.IntN(4) == 0 {
				x = r.Uint64()
			}
			d.add(x)
			want[x] = true
		}
		if d.len() != len(want) {
			t.Fatalf("%d adds: %d accounts, want %d", n, d.len(), len(want))
		}
		got := d.sorted()
		if !slices.IsSorted(got) || len(got) != len(want) {
			t.Fatalf("%d adds: %d accounts not sorted and distinct", n, len(got))
		}
		for _, x := range got {
			if !want[x] {
				t.Fatalf("%d adds: %d was never added", n, x)
			}
		}
		if n > 3*didSetMin && cap(d.dids) > 4*len(want)+2*didSetMin {
			t.Fatalf("%d adds: a slice of %d for %d accounts", n, cap(d.dids), len(want))
		}
	}
	// A popular target's links from few accounts: the slice stays near
	// the accounts' number, not the links'.
	var d didSet
	for i := range 200_000 {
		d.add(uint64(i*7919) % 1000)
	}
	if d.len() != 1000 || cap(d.dids) > 4*1000+2*didSetMin {
		t.Fatalf("200,000 adds of 1,000 accounts: %d accounts in a slice of %d", d.len(), cap(d.dids))
	}
}

// allOf refuses past its bound (errTooMany), not after reading the
// subject whole, and answers every link within it.
func TestAllOfBound(t *testing.T) {
	f := newFixture(t)
	for i := range 30 {
		f.write(like(i))
	}
	f.flush()
	v, release := f.views.Acquire()
	defer release()
	tg, err := link.ParseTarget(post)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := f.qs.parseSubject(context.Background(), "subject", tg.Norm)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, max := range []int{1, 29} {
		if _, err := f.qs.allOf(ctx, v, &sub, lsm.Filter{}, max); !errors.Is(err, errTooMany) {
			t.Fatalf("allOf of 30 links, at most %d: %v, want errTooMany", max, err)
		}
	}
	for _, max := range []int{30, 1000} {
		all, err := f.qs.allOf(ctx, v, &sub, lsm.Filter{}, max)
		if err != nil || len(all) != 30 {
			t.Fatalf("allOf of 30 links, at most %d: %d links, %v", max, len(all), err)
		}
	}
}

// A read of a large target that waited past its query's time for its turn
// (lsm.ErrBusy) is answered 503 Busy with Retry-After, not 500, and
// counted; one that got no execution slot back after its wait, 429.
func TestBusyAnswer(t *testing.T) {
	f := newFixture(t)
	m := NewMetrics()
	f.qs.Busy = m.Busy
	h := f.qs.wrap(func(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
		return nil, fmt.Errorf("count: %w: %w", lsm.ErrBusy, context.DeadlineExceeded)
	})
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/xrpc/blue.microcosm.links.getBacklinksCount?subject=did:plc:x&source=a.b.c:d", nil))
	var e map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusServiceUnavailable || e["error"] != "Busy" || e["message"] == "" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("%d %q %v: want 503 Busy with Retry-After", rec.Code, rec.Body.String(), err)
	}
	if n := testutil.ToFloat64(m.Busy); n != 1 {
		t.Fatalf("eddy_query_busy_total %v, want 1", n)
	}
	// A read that had its share but got no slot back is 429, not Busy.
	h = f.qs.wrap(func(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
		return nil, fmt.Errorf("count: after waiting for its share: %w", errSlotWait)
	})
	rec = httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/xrpc/blue.microcosm.links.getBacklinksCount?subject=did:plc:x&source=a.b.c:d", nil))
	e = nil
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusTooManyRequests || e["error"] != "RateLimitExceeded" || testutil.ToFloat64(m.Busy) != 1 {
		t.Fatalf("%d %q %v: want 429 RateLimitExceeded, Busy not counted", rec.Code, rec.Body.String(), err)
	}
}

// A query whose read of a large target waits for its share of the bound
// gives back its execution slot and its node-wide slot meanwhile: on a
// node of one execution slot, a small query answers while it waits, and
// it answers once the share is free.
func TestLargeReadWaitsWithoutSlot(t *testing.T) {
	f := newFixture(t)
	for i := range 100_000 {
		f.write(like(i))
	}
	f.flush()
	f.qs.Clients = NewClientLimiter(ClientLimits{InFlight: 8, Slots: 1, SlotsPerClient: 1, PaceGap: -1, Conns: -1})
	f.qs.Reader.SetLargeReadMemory(1 << 20)
	v, release := f.views.Acquire()
	defer release()
	tg, err := link.ParseTarget(post)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := f.codec.TargetKeys(&tg)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the share: a read of the large target whose callback waits.
	entered, leave, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		once := false
		_, err := f.qs.Reader.Each(context.Background(), v, keys[0], lsm.Filter{}, func([]link.Backlink) error {
			if !once {
				once = true
				close(entered)
				<-leave
			}
			return nil
		})
		held <- err
	}()
	<-entered
	if _, h, _ := f.qs.Reader.LargeReadStats(); h == 0 {
		t.Fatal("the large target's read took no share: the test needs a larger target")
	}
	count := make(chan int, 1)
	go func() {
		var out totalOut
		code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinksCount", url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}, &out)
		if out.Total != 100_000 {
			code = -int(out.Total)
		}
		count <- code
	}()
	for deadline := time.Now().Add(10 * time.Second); ; { // the count waits for its share
		if _, _, w := f.qs.Reader.LargeReadStats(); w == 1 {
			break
		}
		select {
		case code := <-count:
			t.Fatalf("the large count answered %d before waiting for its share", code)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the large count never waited for its share")
		}
		time.Sleep(time.Millisecond)
	}
	if n := len(f.qs.sem); n != 0 {
		t.Fatalf("the large count holds %d node-wide slot(s) while it waits for its share", n)
	}
	l0, _ := like(0)
	start := time.Now()
	var small totalOut
	code, _ := f.get("/xrpc/blue.microcosm.links.getBacklinksCount", url.Values{"subject": {l0}, "source": {"app.bsky.feed.like:subject.uri"}}, &small)
	if code != 200 || time.Since(start) > 2*time.Second {
		t.Fatalf("a small query beside a waiting large read, one slot: %d after %v", code, time.Since(start))
	}
	close(leave)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if code := <-count; code != 200 {
		t.Fatalf("the large count, once the share was free: %d", code)
	}
}

// A query's wait hooks leave its execution slot and its node-wide slot
// when the first of its reads waits and take both back when the last is
// done waiting: reads of one query at once never hold two of either, and
// the query's end frees what it holds. Without client limits, the
// node-wide slot alone.
func TestWaitHooksOneSlot(t *testing.T) {
	l := NewClientLimiter(ClientLimits{InFlight: 8, Slots: 4, SlotsPerClient: 4, PaceGap: -1, Conns: -1})
	free := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.free
	}
	adm, refused := l.acquire(httptest.NewRequest("GET", "/xrpc/x", nil), url.Values{})
	if refused != nil {
		t.Fatal(refused.ae)
	}
	ctx := context.Background()
	sem := make(chan struct{}, 2)
	ns := &nodeSlot{sem: sem}
	if !ns.tryTake() || len(sem) != 1 {
		t.Fatalf("node slot: %d held", len(sem))
	}
	if err := adm.run(ctx); err != nil || free() != 3 {
		t.Fatalf("run: %v, %d slots free", err, free())
	}
	h := waitHooks(ns, adm)
	h.Leave()
	h.Leave() // a second read of the query waits too
	if free() != 4 || len(sem) != 0 {
		t.Fatalf("two reads waiting: %d slots free, want 4; %d node slots held, want 0", free(), len(sem))
	}
	if err := h.Back(ctx); err != nil || free() != 4 || len(sem) != 0 {
		t.Fatalf("one read back of two: %v, %d slots free, want 4; %d node slots held, want 0", err, free(), len(sem))
	}
	if err := h.Back(ctx); err != nil || free() != 3 || len(sem) != 1 {
		t.Fatalf("both back: %v, %d slots free, want 3; %d node slots held, want 1", err, free(), len(sem))
	}
	ns.leave()
	adm.release()
	if free() != 4 || len(sem) != 0 {
		t.Fatalf("after the query: %d slots free, want 4; %d node slots held", free(), len(sem))
	}

	// No client limits; the node's slots all taken by others while the
	// read waited: its query waits for one, then fails past SlotWaitMax
	// or with its context.
	ns = &nodeSlot{sem: sem}
	ns.tryTake()
	h = waitHooks(ns, nil)
	h.Leave()
	if len(sem) != 0 {
		t.Fatalf("a read waiting, no client limits: %d node slots held", len(sem))
	}
	sem <- struct{}{}
	sem <- struct{}{}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := h.Back(cctx); !errors.Is(err, context.DeadlineExceeded) || ns.held {
		t.Fatalf("back with every node slot taken: %v (held %v)", err, ns.held)
	}
}
