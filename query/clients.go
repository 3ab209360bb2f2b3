package query

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ClientLimits bound what one client may ask of one node, so that a
// client that floods a node (a crawler in a loop, a broken retry) slows
// itself down and nobody else: each client has a token bucket of queries
// and a bound on its queries in flight. A client is its address: an IPv4
// address, or an IPv6 /64 (what one host usually gets); behind a reverse
// proxy listed in TrustedProxies, the address the proxy names in
// X-Forwarded-For.
type ClientLimits struct {
	// Rate is the queries a second a client may make, sustained (the
	// bucket refills at this rate; a query takes one token per 100 links
	// of its limit, at least one); 0: no rate bound.
	Rate float64
	// Burst is the bucket's size: the queries a client idle for a while
	// may make at once (at least 1 when Rate > 0).
	Burst int
	// InFlight bounds one client's queries being answered at once; 0: no
	// bound (the node's ConcurrentQueriesMax still holds).
	InFlight int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client. A request from any other address is its own client,
	// whatever it forwards (anyone can write the header).
	TrustedProxies []netip.Prefix
	// RefusalDelay is how long a refused query waits before its 429 is
	// written: a client that ignores Retry-After and asks again at once
	// from a few connections then asks a few times a second, not as fast
	// as the node can refuse (refusing costs CPU too). 0: no delay.
	RefusalDelay time.Duration
	// Slots bounds the queries executing at once (default
	// DefaultSlotsPerCPU per CPU); the others wait their client's turn
	// (admission.run). A query waiting for the bucket holds its slot: with
	// a far bucket and cold queries, more slots.
	Slots int
	// SlotsPerClient bounds the slots one client's queries hold at once
	// (default a quarter of Slots, at least one): a query that gets a
	// slot then shares the CPUs with at most that many of a flooder's,
	// not with every slot's.
	SlotsPerClient int
	// PaceGap is the least time between one of a client's queries leaving
	// its execution slot, or starting, and the next of its queries
	// starting, while other clients use the node (0: DefaultPaceGap;
	// negative: none).
	//
	// Go's scheduler reads the network (its netpoller) only when no
	// goroutine is runnable, or every 10 ms from its monitor thread. The
	// requests of a client that sends many at once (a flooder's
	// connections, read in one poll) are all runnable at once, and on a
	// busy node each runs its query to the end without yielding: they run
	// back to back, no two holding a slot at the same moment, while the
	// other clients' requests wait unread in the kernel. A short sleep
	// between them lets the node go idle and read its sockets, and the
	// others' requests take their turns. A client alone on the node is
	// not paced. A client whose queries come one at a time rarely meets
	// the gap; one that sends many at once gets them started at most one
	// a gap (5,000 a second at the default, past any client's rate but
	// for the smallest queries), and a query granted a slot may hold it
	// idle for up to a gap.
	PaceGap time.Duration
	// Conns bounds the connections one client keeps open (Listener;
	// default DefaultClientConns; negative: no bound).
	Conns int
	// Clients bounds the clients remembered (default ClientsMax); past it
	// idle ones are forgotten, and while none is idle new clients share
	// one bucket (counted).
	Clients int
}

// Default client limits of a node (eddy-node's --client-rate,
// --client-burst, --client-in-flight). A warm query costs this node tens
// of microseconds, so 500 a second is a small share of it, and more than
// an app backed by one server asks for.
const (
	DefaultClientRate     = 500
	DefaultClientBurst    = 1000
	DefaultClientInFlight = 16
	// DefaultSlotsPerCPU is ClientLimits.Slots' default, per CPU: enough
	// for cold queries waiting on a near bucket to keep the CPUs busy, few
	// enough that a flood's queries do not crowd the others' off them.
	DefaultSlotsPerCPU = 8
	// DefaultRefusalDelay is ClientLimits.RefusalDelay on a node.
	DefaultRefusalDelay = 250 * time.Millisecond
	// DefaultPaceGap is ClientLimits.PaceGap's default.
	DefaultPaceGap = 200 * time.Microsecond
	// PaceShared is how recently another client must have been admitted
	// for a client's queries to be paced (ClientLimits.PaceGap).
	PaceShared = 100 * time.Millisecond
	// ClientsMax is the default bound of clients remembered: ~100 bytes
	// each.
	ClientsMax = 1 << 16
)

// ParseTrustedProxies parses a comma-separated list of addresses and
// CIDR prefixes ("127.0.0.1,10.0.0.0/8,fd00::/8").
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %v", f, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an address or a CIDR prefix", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ClientLimiter applies ClientLimits to the requests of a query server
// (Server.Clients).
type ClientLimiter struct {
	lim ClientLimits
	now func() time.Time

	// Limited counts the queries refused, by reason: "rate", "in_flight",
	// or "connections" (a connection past Conns, refused unread)
	// (eddy_query_client_limited_total{reason}).
	Limited *prometheus.CounterVec
	// Shared counts the queries of new clients that met a full client
	// table with no idle client to forget, and shared one bucket
	// (eddy_query_clients_shared_total).
	Shared prometheus.Counter
	// Paced counts the queries that waited for their client's pace
	// (ClientLimits.PaceGap) (eddy_query_paced_total).
	Paced prometheus.Counter
	// Untrusted counts the requests that carried X-Forwarded-For from a
	// peer not in TrustedProxies: each counted as its peer (a reverse
	// proxy missing from the list makes all its clients one)
	// (eddy_query_forwarded_untrusted_total).
	Untrusted prometheus.Counter

	mu struct {
		sync.Mutex
		clients   map[netip.Addr]*clientState
		shared    clientState // new clients while the table is full
		lastSweep time.Time
		free      int            // execution slots free
		ring      []*clientState // clients waiting for a slot, in turn
		// recent are the last two distinct clients admitted, and when:
		// whether a client shares the node now (pace).
		recent [2]struct {
			st *clientState
			at time.Time
		}
	}
}

type clientState struct {
	tokens   float64
	last     time.Time // of the last refill
	inFlight int
	running  int             // its queries holding an execution slot
	waiting  []chan struct{} // its queries waiting for a slot, in order
	paced    time.Time       // when one of its queries last left a slot or passed its pace
	paceSeq  uint64          // counts those moments (from 1), for pace
}

// NewClientLimiter returns a limiter of lim (nil when lim bounds nothing).
func NewClientLimiter(lim ClientLimits) *ClientLimiter {
	if lim.Rate <= 0 && lim.InFlight <= 0 {
		return nil
	}
	if lim.Rate > 0 && lim.Burst < 1 {
		lim.Burst = 1
	}
	if lim.Clients <= 0 {
		lim.Clients = ClientsMax
	}
	if lim.Slots <= 0 {
		lim.Slots = DefaultSlotsPerCPU * runtime.GOMAXPROCS(0)
	}
	if lim.SlotsPerClient <= 0 {
		lim.SlotsPerClient = max(1, lim.Slots/4)
	}
	if lim.PaceGap == 0 {
		lim.PaceGap = DefaultPaceGap
	}
	if lim.Conns == 0 {
		lim.Conns = DefaultClientConns
	}
	l := &ClientLimiter{lim: lim, now: time.Now,
		Limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_query_client_limited_total",
			Help: "Queries answered 429 RateLimitExceeded because their client went past its limit on this node, by reason (rate: its queries a second; in_flight: its queries at once; connections: its connections open, the request not read).",
		}, []string{"reason"}),
		Shared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eddy_query_clients_shared_total",
			Help: "Queries of new clients that found the node's client table full with no idle client to forget, and were limited together in one shared bucket.",
		}),
		Paced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eddy_query_paced_total",
			Help: "Queries that waited a moment (--client-pace-gap) after another of their client's, so that a client sending many queries at once does not run them back to back ahead of the other clients' requests.",
		}),
		Untrusted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eddy_query_forwarded_untrusted_total",
			Help: "Queries that carried X-Forwarded-For from a peer not in --trusted-proxies, each limited as that peer: a reverse proxy missing from the list makes all its clients one.",
		}),
	}
	l.mu.clients = make(map[netip.Addr]*clientState)
	l.mu.free = lim.Slots
	return l
}

// Collectors are the limiter's metrics, and the clients it remembers.
func (l *ClientLimiter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.Limited, l.Shared, l.Paced, l.Untrusted,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_query_clients", Help: "Clients the query API's per-client limits remember."}, func() float64 {
			l.mu.Lock()
			defer l.mu.Unlock()
			return float64(len(l.mu.clients))
		})}
}

// limitError is a refusal: the answer and its Retry-After.
type limitError struct {
	ae    *apiError
	retry time.Duration
}

// acquire admits a query of r's client (q: r's parameters), or says why
// not. The admission's release must be called once the query is answered.
func (l *ClientLimiter) acquire(r *http.Request, q url.Values) (*admission, *limitError) {
	key := l.client(r)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateLocked(key, now)
	if l.lim.InFlight > 0 && st.inFlight >= l.lim.InFlight {
		l.Limited.WithLabelValues("in_flight").Inc()
		return nil, &limitError{&apiError{http.StatusTooManyRequests, "RateLimitExceeded",
			"this client has " + strconv.Itoa(st.inFlight) + " queries in flight on this node, its most; retry when one is answered"}, time.Second}
	}
	if l.lim.Rate > 0 {
		if el := now.Sub(st.last).Seconds(); el > 0 {
			st.tokens = math.Min(float64(l.lim.Burst), st.tokens+el*l.lim.Rate)
		}
		st.last = now
		cost := min(queryCost(q), float64(l.lim.Burst))
		if st.tokens < cost {
			l.Limited.WithLabelValues("rate").Inc()
			wait := time.Duration((cost - st.tokens) / l.lim.Rate * float64(time.Second))
			return nil, &limitError{&apiError{http.StatusTooManyRequests, "RateLimitExceeded",
				"this client asked more than " + strconv.FormatFloat(l.lim.Rate, 'f', -1, 64) + " queries a second of this node (a query costs one per 100 links of its limit); retry later"}, wait}
		}
		st.tokens -= cost
	}
	st.inFlight++
	if l.mu.recent[0].st != st {
		l.mu.recent[1] = l.mu.recent[0]
	}
	l.mu.recent[0].st, l.mu.recent[0].at = st, now
	return &admission{l: l, st: st}, nil
}

// refusalWait is how long a refused query waits for its 429, the limits'
// RefusalDelay d jittered to between half and one and a half times d: a
// flooder's connections refused together would otherwise be answered
// together, ask again together and be refused together, a wave every d
// that the other clients' requests queue behind.
func refusalWait(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// queryCost is what a query takes from its client's bucket: one per 100
// links its limit asks for, at least one (a page of 1,000 links costs the
// node about ten pages of 100: rendering and garbage grow with it).
func queryCost(q url.Values) float64 {
	lim, err := strconv.Atoi(q.Get("limit"))
	if err != nil || lim <= 100 {
		return 1
	}
	return float64((min(lim, LimitMax) + 99) / 100)
}

// admission is one admitted query: in flight for its client, and, once
// run returns nil, holding one of the node's execution slots.
type admission struct {
	l       *ClientLimiter
	st      *clientState
	running bool
}

// run waits for an execution slot. The slots go round the clients that
// wait for one, a query each in turn (each client's in order), so a client
// with many queries waiting takes a slot no more often than one with a
// single query: under a flood, the other clients wait for a few queries,
// not behind the flooder's backlog; and no client holds more than
// SlotsPerClient slots, so the CPUs are never all a flooder's. Waiting is
// bounded by ctx and SlotWaitMax.
func (a *admission) run(ctx context.Context) error {
	l := a.l
	if err := a.pace(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	if l.mu.free > 0 && len(l.mu.ring) == 0 && a.st.running < l.lim.SlotsPerClient {
		l.mu.free--
		a.st.running++
		l.mu.Unlock()
		a.running = true
		return nil
	}
	ch := make(chan struct{})
	a.st.waiting = append(a.st.waiting, ch)
	if len(a.st.waiting) == 1 {
		l.mu.ring = append(l.mu.ring, a.st)
	}
	l.grantLocked()
	l.mu.Unlock()
	t := time.NewTimer(SlotWaitMax)
	defer t.Stop()
	var err error
	select {
	case <-ch:
		a.running = true
		// Granted by a query that left its slot, perhaps one of this
		// client's a moment ago.
		if err := a.pace(ctx); err != nil {
			return err
		}
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errSlotWait
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(a.st.waiting, ch); i >= 0 {
		a.st.waiting = slices.Delete(a.st.waiting, i, i+1)
		if len(a.st.waiting) == 0 {
			l.mu.ring = slices.DeleteFunc(l.mu.ring, func(c *clientState) bool { return c == a.st })
		}
		return err
	}
	// Granted meanwhile: the slot is ours; give it back.
	a.running = true
	return err
}

// grantLocked gives the free slots to the clients waiting, in the ring's
// order, skipping those holding SlotsPerClient already (they keep their
// place).
func (l *ClientLimiter) grantLocked() {
	for l.mu.free > 0 {
		i := slices.IndexFunc(l.mu.ring, func(c *clientState) bool { return c.running < l.lim.SlotsPerClient })
		if i < 0 {
			return
		}
		next := l.mu.ring[i]
		ch := next.waiting[0]
		next.waiting = next.waiting[1:]
		l.mu.ring = slices.Delete(l.mu.ring, i, i+1)
		if len(next.waiting) > 0 {
			l.mu.ring = append(l.mu.ring, next)
		}
		l.mu.free--
		next.running++
		close(ch)
	}
}

// pace waits, while another client was admitted within the last
// PaceShared, until the limits' PaceGap after the last time one of this
// client's queries left its slot or started (passed its pace), so that its queries waiting together start a
// gap apart, each after a moment in which the node can read its sockets.
// The wait ends early when no query of the client left or started while
// this query slept a gap (whatever the clock says), or past
// PaceWaitMax in all; ctx bounds it too.
func (a *admission) pace(ctx context.Context) error {
	l := a.l
	if l.lim.PaceGap < 0 {
		return nil
	}
	var waited time.Duration
	seen := uint64(0) // the client's paceSeq this query last slept on (0: none)
	for {
		l.mu.Lock()
		now := l.now()
		wait := l.lim.PaceGap - now.Sub(a.st.paced)
		shared := false
		for _, r := range l.mu.recent {
			if r.st != nil && r.st != a.st && now.Sub(r.at) < PaceShared {
				shared = true
			}
		}
		if wait <= 0 || !shared || a.st.paceSeq == seen || waited >= max(PaceWaitMax, 8*l.lim.PaceGap) {
			a.st.paced = now
			a.st.paceSeq++
			l.mu.Unlock()
			return nil
		}
		if seen == 0 {
			l.Paced.Inc()
		}
		seen = a.st.paceSeq
		l.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		waited += wait
	}
}

// PaceWaitMax bounds a query's wait for its client's pace, in all (or
// eight gaps, if longer).
const PaceWaitMax = 50 * time.Millisecond

// SlotWaitMax bounds a query's wait for an execution slot; past it the
// query is answered 429 (the node is saturated).
const SlotWaitMax = 5 * time.Second

var errSlotWait = errors.New("no execution slot within SlotWaitMax")

// leaveSlot gives the query's execution slot to the next client waiting
// (a no-op on a nil admission, or one without a slot).
func (a *admission) leaveSlot() {
	if a == nil {
		return
	}
	a.l.mu.Lock()
	defer a.l.mu.Unlock()
	a.leaveSlotLocked()
}

// release ends the query: it leaves its slot, and is no longer in flight
// for its client.
func (a *admission) release() {
	a.l.mu.Lock()
	defer a.l.mu.Unlock()
	a.leaveSlotLocked()
	a.st.inFlight--
}

func (a *admission) leaveSlotLocked() {
	if a.running {
		a.running = false
		a.st.running--
		a.st.paced = a.l.now()
		a.st.paceSeq++
		a.l.mu.free++
		a.l.grantLocked()
	}
}

// stateLocked is key's state, made (with a full bucket) if new.
func (l *ClientLimiter) stateLocked(key netip.Addr, now time.Time) *clientState {
	if st, ok := l.mu.clients[key]; ok {
		return st
	}
	if len(l.mu.clients) >= l.lim.Clients {
		// Forget the idle clients (nothing in flight, a full bucket: a new
		// state would be the same), at most once a second: a full table of
		// busy clients is not swept on every request.
		if now.Sub(l.mu.lastSweep) >= time.Second {
			l.mu.lastSweep = now
			for k, st := range l.mu.clients {
				if st.inFlight == 0 && (l.lim.Rate <= 0 || st.tokens+now.Sub(st.last).Seconds()*l.lim.Rate >= float64(l.lim.Burst)) {
					delete(l.mu.clients, k)
				}
			}
		}
		if len(l.mu.clients) >= l.lim.Clients {
			l.Shared.Inc()
			if l.mu.shared.last.IsZero() {
				l.mu.shared = clientState{tokens: float64(l.lim.Burst), last: now, paceSeq: 1}
			}
			return &l.mu.shared
		}
	}
	st := &clientState{tokens: float64(l.lim.Burst), last: now, paceSeq: 1}
	l.mu.clients[key] = st
	return st
}

// client is the client a request counts against: its peer's address, or,
// when the peer is a trusted proxy, the nearest address in
// X-Forwarded-For that is not one (the proxies append, so the rightmost
// untrusted address is the one a trusted proxy saw). IPv6 addresses count
// by their /64.
func (l *ClientLimiter) client(r *http.Request) netip.Addr {
	peer := parseHostAddr(r.RemoteAddr)
	if !peer.IsValid() || !l.trusted(peer) {
		if r.Header.Get("X-Forwarded-For") != "" {
			l.Untrusted.Inc()
		}
	} else {
		hops := r.Header.Values("X-Forwarded-For")
	walk:
		for i := len(hops) - 1; i >= 0; i-- {
			fs := strings.Split(hops[i], ",")
			for j := len(fs) - 1; j >= 0; j-- {
				a := parseHostAddr(strings.TrimSpace(fs[j]))
				if !a.IsValid() {
					break walk // a malformed hop: trust nothing before it
				}
				peer = a
				if !l.trusted(a) {
					break walk
				}
			}
		}
	}
	return clientKey(peer)
}

func (l *ClientLimiter) trusted(a netip.Addr) bool {
	for _, p := range l.lim.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHostAddr parses "host:port" or a bare address ("" when neither).
func parseHostAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
