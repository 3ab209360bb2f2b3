package query

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is a limiter's clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (l *ClientLimiter) inFlight(a string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.mu.clients[netip.MustParseAddr(a)]; st != nil {
		return st.inFlight
	}
	return 0
}

// clientFrom is an HTTP client whose connections come from addr (any
// address of 127.0.0.0/8 is this host's).
func clientFrom(addr string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: time.Minute}
}

func getFrom(t *testing.T, c *http.Client, u string) (int, string, string) {
	t.Helper()
	r, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	var e map[string]string
	json.Unmarshal(body, &e)
	if r.StatusCode == http.StatusTooManyRequests && (e["error"] != "RateLimitExceeded" || e["message"] == "") {
		t.Fatalf("429 without its XRPC body: %s", body)
	}
	return r.StatusCode, r.Header.Get("Retry-After"), e["message"]
}

// Over real HTTP, from two client addresses: one client past its rate or
// its queries in flight is answered 429 RateLimitExceeded with a
// Retry-After, and the other is served all along; each refusal is counted
// by reason.
func TestClientLimits(t *testing.T) {
	f := newFixture(t)
	f.qs.MinGenerationWait = time.Minute
	f.write(like(1))
	gen := f.flush()
	clock := newFakeClock()
	l := NewClientLimiter(ClientLimits{Rate: 5, Burst: 3, InFlight: 2})
	l.now = clock.now
	f.qs.Clients = l
	q := f.srv.URL + "/xrpc/blue.cerulea.backlinks.listBacklinks?" + url.Values{"target": {post}}.Encode()
	a, b := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")

	// The rate: a burst of 3, then one every 200 ms.
	for i := range 3 {
		if code, _, msg := getFrom(t, a, q); code != 200 {
			t.Fatalf("a's query %d of its burst: %d %s", i, code, msg)
		}
	}
	code, retry, msg := getFrom(t, a, q)
	if code != http.StatusTooManyRequests || retry != "1" {
		t.Fatalf("a's query past its burst: %d (Retry-After %q) %s", code, retry, msg)
	}
	for i := range 3 {
		if code, _, msg := getFrom(t, b, q); code != 200 {
			t.Fatalf("b's query %d while a is limited: %d %s", i, code, msg)
		}
	}
	clock.add(200 * time.Millisecond)
	if code, _, msg := getFrom(t, a, q); code != 200 {
		t.Fatalf("a's query 200 ms later: %d %s", code, msg)
	}
	if code, _, _ := getFrom(t, a, q); code != http.StatusTooManyRequests {
		t.Fatalf("a's second query 200 ms later: %d", code)
	}
	clock.add(time.Hour) // the bucket holds no more than its burst
	for i := range 4 {
		code, _, _ := getFrom(t, a, q)
		if want := map[bool]int{true: 200, false: 429}[i < 3]; code != want {
			t.Fatalf("a's query %d after an hour idle: %d, want %d", i, code, want)
		}
	}
	if got := testutil.ToFloat64(l.Limited.WithLabelValues("rate")); got != 3 {
		t.Errorf("limited for the rate: %v, want 3", got)
	}

	// Queries in flight: a's two holders wait for a generation not made
	// yet; a's third is refused at once, b is served.
	clock.add(time.Hour)
	held := f.srv.URL + "/xrpc/blue.cerulea.backlinks.listBacklinks?" + url.Values{"target": {post}, "minGeneration": {strconv.FormatUint(gen+1, 10)}}.Encode()
	codes := make(chan int, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { codes <- statusOf(a, held) })
	}
	deadline := time.Now().Add(45 * time.Second)
	for l.inFlight("127.0.0.2") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("a's holders not in flight after 45 s (%d)", l.inFlight("127.0.0.2"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, retry, msg = getFrom(t, a, q)
	if code != http.StatusTooManyRequests || retry != "1" {
		t.Fatalf("a's third query in flight: %d (Retry-After %q) %s", code, retry, msg)
	}
	if code, _, msg := getFrom(t, b, q); code != 200 {
		t.Fatalf("b while a has two in flight: %d %s", code, msg)
	}
	f.write(like(2))
	f.flush()
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a holder: %d", c)
		}
	}
	if code, _, msg := getFrom(t, a, q); code != 200 {
		t.Fatalf("a once its holders are answered: %d %s", code, msg)
	}
	if got := testutil.ToFloat64(l.Limited.WithLabelValues("in_flight")); got != 1 {
		t.Errorf("limited for queries in flight: %v, want 1", got)
	}
}

// Queries waiting for a generation hold their clients' queries in flight
// but no node-wide slot: four clients with all of theirs (16 each, as
// many as the node's ConcurrentQueriesMax) waiting for a generation not
// made yet lock nobody else out; a fifth client is answered meanwhile,
// each waiting client's next query is refused for its own bound, and the
// waiting queries are answered once the generation comes.
func TestWaitingForAGenerationHoldsNoNodeSlot(t *testing.T) {
	f := newFixture(t)
	f.qs.MinGenerationWait = time.Minute
	f.write(like(1))
	gen := f.flush()
	l := NewClientLimiter(ClientLimits{InFlight: DefaultClientInFlight, PaceGap: -1, Conns: -1})
	f.qs.Clients = l
	q := f.srv.URL + "/xrpc/blue.microcosm.links.getBacklinksCount?" + url.Values{"subject": {post}, "source": {"app.bsky.feed.like:subject.uri"}}.Encode()
	held := q + "&minGeneration=" + strconv.FormatUint(gen+1, 10)
	waiters := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	if len(waiters)*DefaultClientInFlight < ConcurrentQueriesMax {
		t.Fatal("the waiting clients do not fill the node's slots")
	}
	codes := make(chan int, len(waiters)*DefaultClientInFlight)
	var wg sync.WaitGroup
	for _, a := range waiters {
		c := clientFrom(a)
		for range DefaultClientInFlight {
			wg.Go(func() { codes <- statusOf(c, held) })
		}
	}
	deadline := time.Now().Add(45 * time.Second)
	for _, a := range waiters {
		for l.inFlight(a) < DefaultClientInFlight {
			if time.Now().After(deadline) {
				t.Fatalf("%s's queries not in flight after 45 s (%d)", a, l.inFlight(a))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	other := clientFrom("127.0.0.6")
	for i := range 3 {
		if code, _, msg := getFrom(t, other, q); code != 200 {
			t.Fatalf("another client's query %d while %d wait for a generation: %d %s", i, len(waiters)*DefaultClientInFlight, code, msg)
		}
	}
	if code, _, msg := getFrom(t, clientFrom(waiters[0]), q); code != http.StatusTooManyRequests || !strings.Contains(msg, "in flight") {
		t.Fatalf("a waiting client's next query: %d %s, want 429 for its queries in flight", code, msg)
	}
	if n := len(f.qs.sem); n != 0 {
		t.Fatalf("%d node-wide slots held by queries waiting for a generation", n)
	}
	f.write(like(2))
	f.flush()
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a query waiting for the generation: %d", c)
		}
	}
}

// Which client a request counts against: a peer that is not a trusted
// proxy is itself, whatever X-Forwarded-For says; behind trusted proxies,
// the rightmost untrusted address they name; IPv6 by its /64.
func TestClientAddress(t *testing.T) {
	proxies, err := ParseTrustedProxies("127.0.0.1, 10.0.0.0/8,fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	l := NewClientLimiter(ClientLimits{Rate: 1, TrustedProxies: proxies})
	for _, c := range []struct {
		remote string
		xff    []string
		want   string
	}{
		{"203.0.113.5:1234", []string{"198.51.100.7"}, "203.0.113.5"},
		{"127.0.0.1:80", nil, "127.0.0.1"},
		{"127.0.0.1:80", []string{"198.51.100.7"}, "198.51.100.7"},
		{"127.0.0.1:80", []string{"6.6.6.6, 198.51.100.7, 10.1.2.3"}, "198.51.100.7"},
		{"127.0.0.1:80", []string{"6.6.6.6", "198.51.100.7,10.1.2.3"}, "198.51.100.7"},
		{"127.0.0.1:80", []string{"198.51.100.7, not-an-address"}, "127.0.0.1"},
		{"127.0.0.1:80", []string{"10.0.0.9"}, "10.0.0.9"},
		{"127.0.0.1:80", []string{"[2001:db8::1]:5555"}, "2001:db8::"},
		{"127.0.0.2:80", []string{"198.51.100.7"}, "127.0.0.2"},
		{"[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::"},
		{"[2001:db8:1:2:ffff::1]:443", nil, "2001:db8:1:2::"},
		{"[::ffff:198.51.100.1]:80", nil, "198.51.100.1"},
		{"[fd00::1]:80", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
	} {
		r := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
		for _, h := range c.xff {
			r.Header.Add("X-Forwarded-For", h)
		}
		if got := l.client(r); got.String() != c.want {
			t.Errorf("%s forwarding %q: client %s, want %s", c.remote, c.xff, got, c.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "localhost", "1.2.3"} {
		if _, err := ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q): no error", bad)
		}
	}
}

// The clients remembered stay bounded: idle ones are forgotten when the
// table is full; while every one is busy, new clients share one bucket
// (counted) rather than grow the table.
func TestClientTableBounded(t *testing.T) {
	clock := newFakeClock()
	l := NewClientLimiter(ClientLimits{Rate: 10, Burst: 2, InFlight: 1, Clients: 64})
	l.now = clock.now
	req := func(i int) *http.Request {
		return &http.Request{RemoteAddr: fmt.Sprintf("198.51.%d.%d:1", i/256, i%256), Header: http.Header{}}
	}
	for i := range 5000 {
		adm, refused := l.acquire(req(i), nil)
		if refused != nil {
			t.Fatalf("client %d refused: %v", i, refused.ae)
		}
		adm.release()
		clock.add(300 * time.Millisecond) // idle again (full bucket) after 100 ms
		if n := len(l.mu.clients); n > 64 {
			t.Fatalf("%d clients remembered after %d (bound 64)", n, i+1)
		}
	}
	if got := testutil.ToFloat64(l.Shared); got != 0 {
		t.Fatalf("%v queries shared a bucket though idle clients could be forgotten", got)
	}
	// 64 busy clients (one query in flight each, the most): the 65th
	// shares the one bucket, and does not grow the table.
	clock.add(time.Hour)
	var busy []*admission
	for i := range 64 {
		adm, refused := l.acquire(req(10000+i), nil)
		if refused != nil {
			t.Fatalf("busy client %d refused: %v", i, refused.ae)
		}
		busy = append(busy, adm)
	}
	shared, refused := l.acquire(req(20000), nil)
	if refused != nil {
		t.Fatalf("a new client with the table full of busy ones: %v", refused.ae)
	}
	if _, again := l.acquire(req(20001), nil); again == nil {
		t.Fatalf("a second new client while the first holds the shared bucket's one query in flight: admitted")
	}
	if n := len(l.mu.clients); n != 64 {
		t.Fatalf("%d clients remembered, want 64", n)
	}
	if got := testutil.ToFloat64(l.Shared); got != 2 {
		t.Fatalf("shared bucket used %v times, want 2", got)
	}
	shared.release()
	for _, a := range busy {
		a.release()
	}
}

// twoClients returns requests of two clients (198.51.100.1 and .2) and a
// function admitting one, failing the test if it is refused.
func twoClients(t *testing.T, l *ClientLimiter) (a, b *http.Request, admit func(*http.Request) *admission) {
	a = &http.Request{RemoteAddr: "198.51.100.1:1", Header: http.Header{}}
	b = &http.Request{RemoteAddr: "198.51.100.2:1", Header: http.Header{}}
	return a, b, func(r *http.Request) *admission {
		t.Helper()
		adm, refused := l.acquire(r, nil)
		if refused != nil {
			t.Fatal(refused.ae)
		}
		return adm
	}
}

// The execution slots go round the waiting clients, one query each in
// turn: a client with a backlog does not keep another's query waiting
// behind all of it.
func TestClientSlotsFair(t *testing.T) {
	l := NewClientLimiter(ClientLimits{InFlight: 8, Slots: 1})
	a, b, admit := twoClients(t, l)
	holder := admit(a)
	if err := holder.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	waiting := func(addr string) int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.mu.clients[netip.MustParseAddr(addr)].waiting)
	}
	granted := make(chan string, 8)
	var admissions sync.Map
	enqueue := func(r *http.Request, name string, addr string, want int) {
		adm := admit(r)
		admissions.Store(name, adm)
		go func() {
			if err := adm.run(context.Background()); err != nil {
				granted <- "error " + err.Error()
				return
			}
			granted <- name
		}()
		for waiting(addr) < want {
			time.Sleep(time.Millisecond)
		}
	}
	enqueue(a, "a1", "198.51.100.1", 1)
	enqueue(a, "a2", "198.51.100.1", 2)
	enqueue(a, "a3", "198.51.100.1", 3)
	enqueue(b, "b1", "198.51.100.2", 1)
	holder.release()
	var order []string
	for range 4 {
		name := <-granted
		order = append(order, name)
		adm, _ := admissions.Load(name)
		adm.(*admission).release()
	}
	if got := fmt.Sprint(order); got != "[a1 b1 a2 a3]" {
		t.Fatalf("slots granted in the order %s, want [a1 b1 a2 a3]", got)
	}
	// A query that gives up waiting leaves the queue, and the slot is free.
	holder = admit(a)
	if err := holder.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	quitter := admit(b)
	done := make(chan error)
	go func() { done <- quitter.run(ctx) }()
	for waiting("198.51.100.2") < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a canceled wait for a slot returned nil")
	}
	quitter.release()
	holder.release()
	if l.mu.free != 1 || len(l.mu.ring) != 0 {
		t.Fatalf("after every query: %d slots free, %d clients waiting; want 1 and 0", l.mu.free, len(l.mu.ring))
	}
}

// One client holds at most SlotsPerClient execution slots: its next query
// waits even with slots free, another client's runs at once, and the
// waiting one runs as soon as one of its own ends.
func TestClientSlotsPerClient(t *testing.T) {
	l := NewClientLimiter(ClientLimits{InFlight: 8, Slots: 4, SlotsPerClient: 2})
	a, b, admit := twoClients(t, l)
	var held []*admission
	for range 2 {
		adm := admit(a)
		if err := adm.run(context.Background()); err != nil {
			t.Fatal(err)
		}
		held = append(held, adm)
	}
	third := admit(a)
	ran := make(chan error, 1)
	go func() { ran <- third.run(context.Background()) }()
	select {
	case err := <-ran:
		t.Fatalf("a third query of one client ran (%v) with SlotsPerClient 2", err)
	case <-time.After(50 * time.Millisecond):
	}
	other := admit(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := other.run(ctx); err != nil {
		t.Fatalf("another client's query did not get a free slot: %v", err)
	}
	held[0].release()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("the waiting query did not run once one of its client's ended")
	}
	l.mu.Lock()
	free, running := l.mu.free, l.mu.clients[netip.MustParseAddr("198.51.100.1")].running
	l.mu.Unlock()
	if free != 1 || running != 2 {
		t.Fatalf("free %d, a running %d; want 1 and 2", free, running)
	}
	if d := NewClientLimiter(ClientLimits{Rate: 1, Slots: 16}); d.lim.SlotsPerClient != 4 {
		t.Fatalf("default SlotsPerClient of 16 slots: %d, want 4", d.lim.SlotsPerClient)
	}
}

// While another client uses the node, a client's next query starts no
// sooner than PaceGap after one of its own left its slot (so that queries
// sent together do not run back to back ahead of the others' requests);
// alone on the node, or with the pace off, it is never made to wait.
func TestClientPace(t *testing.T) {
	const gap = time.Second
	clock := newFakeClock() // stands still: the gap is waited in real time
	l := NewClientLimiter(ClientLimits{InFlight: 8, Slots: 8, PaceGap: gap})
	l.now = clock.now
	a, b, admit := twoClients(t, l)
	start := func(adm *admission) chan error {
		done := make(chan error, 1)
		go func() { done <- adm.run(context.Background()) }()
		return done
	}
	ran := func(done chan error, within time.Duration) bool {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return true
		case <-time.After(within):
			return false
		}
	}
	runNow := func(adm *admission) {
		t.Helper()
		if !ran(start(adm), gap/2) {
			t.Fatal("a query that should not wait for its pace did not run")
		}
		adm.release()
	}
	// Alone: back to back, never paced.
	for range 3 {
		runNow(admit(a))
	}
	if got := testutil.ToFloat64(l.Paced); got != 0 {
		t.Fatalf("a client alone on the node was paced %v times", got)
	}
	// Another client was admitted a moment ago: a's next query waits a
	// gap after its last one left.
	runNow(admit(b))
	next := admit(a)
	done := start(next)
	if ran(done, gap/5) {
		t.Fatal("a query started within the pace gap of its client's last one")
	}
	if !ran(done, 10*gap) {
		t.Fatal("the paced query did not run once the gap had passed")
	}
	next.release()
	if got := testutil.ToFloat64(l.Paced); got != 1 {
		t.Fatalf("paced %v queries, want 1", got)
	}
	// The other client idle for PaceShared: a alone again.
	clock.add(PaceShared)
	runNow(admit(a))
	runNow(admit(a))

	// withOther is a limiter of lim where b was just served and a's first
	// query holds a slot; it returns the limiter, that query, and a's
	// admission of its next ones.
	withOther := func(lim ClientLimits) (*ClientLimiter, *admission, func() *admission) {
		t.Helper()
		l := NewClientLimiter(lim)
		l.now = clock.now
		a, b, admit := twoClients(t, l)
		runNow(admit(b))
		first := admit(a)
		if !ran(start(first), gap/2) {
			t.Fatal("a's first query waited")
		}
		return l, first, func() *admission { return admit(a) }
	}

	// A query granted a slot by its own client's query leaving it is
	// paced too, while the other client is there.
	l2, holder, admitA := withOther(ClientLimits{InFlight: 8, Slots: 1, PaceGap: gap})
	waiter := admitA()
	done = start(waiter)
	for {
		l2.mu.Lock()
		n := len(l2.mu.ring)
		l2.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	holder.release()
	if ran(done, gap/5) {
		t.Fatal("granted a slot by its own client's query, a query ran within the pace gap")
	}
	if !ran(done, 10*gap) {
		t.Fatal("the granted query did not run once the gap had passed")
	}
	waiter.release()

	// Two of a's queries waiting together start a gap apart: one after
	// a gap, the other a gap after that one started.
	clock.add(PaceShared)
	_, _, admitA = withOther(ClientLimits{InFlight: 8, Slots: 8, SlotsPerClient: 4, PaceGap: gap})
	s1, s2 := start(admitA()), start(admitA())
	time.Sleep(gap + gap/2)
	done1, done2 := len(s1), len(s2)
	if done1+done2 != 1 {
		t.Fatalf("a gap and a half after a's last start, %d of two siblings started, want 1", done1+done2)
	}
	if !ran(s1, 10*gap) || !ran(s2, 10*gap) {
		t.Fatal("the second sibling never started")
	}

	// Off: never paced.
	l3 := NewClientLimiter(ClientLimits{InFlight: 8, Slots: 8, PaceGap: -1})
	l3.now = clock.now
	a, b, admit = twoClients(t, l3)
	runNow(admit(b))
	runNow(admit(a))
	runNow(admit(a))
	if got := testutil.ToFloat64(l3.Paced); got != 0 {
		t.Fatalf("with the pace off, %v queries were paced", got)
	}
}

// A refused query waits between half and one and a half times the
// refusal delay, spread over that range: refusals that came together are
// not answered together.
func TestRefusalWaitJittered(t *testing.T) {
	const d = 100 * time.Millisecond
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for range 1000 {
		w := refusalWait(d)
		if w < d/2 || w >= 3*d/2 {
			t.Fatalf("refusal wait %v outside [%v, %v)", w, d/2, 3*d/2)
		}
		lo, hi = min(lo, w), max(hi, w)
	}
	if hi-lo < d/2 {
		t.Fatalf("1,000 refusal waits spread over %v only", hi-lo)
	}
}

// Over HTTP, queries refused together are answered apart: each waits
// its own jittered share of the refusal delay (refusalWait).
func TestRefusalsAnsweredApart(t *testing.T) {
	f := newFixture(t)
	f.write(like(1))
	f.flush()
	const d = 400 * time.Millisecond
	f.qs.Clients = NewClientLimiter(ClientLimits{Rate: 0.001, Burst: 1, InFlight: 8, RefusalDelay: d})
	q := f.srv.URL + "/xrpc/blue.cerulea.backlinks.listBacklinks?" + url.Values{"target": {post}}.Encode()
	c := clientFrom("127.0.0.2")
	if code, _, msg := getFrom(t, c, q); code != 200 {
		t.Fatalf("the first query: %d %s", code, msg)
	}
	took := make(chan time.Duration, 8)
	for range 8 {
		go func() {
			t0 := time.Now()
			r, err := c.Get(q)
			if err == nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
			took <- time.Since(t0)
		}()
	}
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for range 8 {
		w := <-took
		if w < d/2 {
			t.Fatalf("a refusal answered after %v, before half the delay (%v)", w, d/2)
		}
		lo, hi = min(lo, w), max(hi, w)
	}
	if hi-lo < d/8 {
		t.Fatalf("eight refusals sent together were answered within %v of each other", hi-lo)
	}
}

// statusOf GETs u with c and returns the answer's status, its body read
// (-1: no answer).
func statusOf(c *http.Client, u string) int {
	r, err := c.Get(u)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r.StatusCode
}
