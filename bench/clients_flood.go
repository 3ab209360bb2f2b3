package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

type floodResult struct {
	Asked, OK, Limited int
	Seconds            float64
	// The open loop's (--rate): queries written to a connection (the
	// others found theirs full, being dialled again, or ending), answers
	// neither 200 nor 429, and connections dialled (those that failed
	// among them).
	Sent, Other, Dials, DialErrors int `json:",omitempty"`
}

// clientsFloodMain is the flooding client of `eddy-bench clients`: --conns
// connections from one address asking in a closed loop for --seconds; it
// prints how many queries it asked and how they were answered.
func clientsFloodMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("clients-flood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "", "")
	conns := fs.Int("conns", 64, "")
	seconds := fs.Float64("seconds", 10, "")
	targets := fs.Int("targets", 2000, "")
	limit := fs.String("limit", "1000", "")
	at := fs.Int64("at", 0, "when to start, in Unix nanoseconds (0: at once)")
	rate := fs.Float64("rate", 0, "queries a second in an open loop, pipelined (0: a closed loop)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	clientsLimit = *limit
	var uris []string
	for i := range *targets {
		uris = append(uris, clientsPost(i))
	}
	if *at != 0 {
		time.Sleep(time.Until(time.Unix(0, *at)))
	}
	start := time.Now()
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	if *rate > 0 {
		u, err := url.Parse(*base)
		if err != nil {
			return err
		}
		f := &openFlood{base: u, uris: uris, local: &net.TCPAddr{IP: net.ParseIP(clientsFloodAddr)}}
		f.run(ctx, *conns, *rate, deadline)
		return json.NewEncoder(stdout).Encode(floodResult{Asked: int(f.asked.Load()), OK: int(f.ok.Load()), Limited: int(f.limited.Load()), Seconds: time.Since(start).Seconds(),
			Sent: int(f.sent.Load()), Other: int(f.other.Load()), Dials: int(f.dials.Load()), DialErrors: int(f.dialErrs.Load())})
	}
	c := loopbackClient(clientsFloodAddr, *conns)
	var asked, ok, limited atomic.Int64
	var wg sync.WaitGroup
	for w := range *conns {
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(uint64(w), 2))
			for time.Now().Before(deadline) && ctx.Err() == nil {
				asked.Add(1)
				switch clientsGet(c, clientsQuery(*base, uris, r)) {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return json.NewEncoder(stdout).Encode(floodResult{Asked: int(asked.Load()), OK: int(ok.Load()), Limited: int(limited.Load()), Seconds: time.Since(start).Seconds()})
}

// openFlood is the flooding client of `eddy-bench clients --flood-x X`: an
// open loop that asks rate queries a second whatever the node answers, as
// a client that ignores 429s and Retry-After would. It cannot be slowed by
// the node's answers the way a closed loop is (a closed loop waiting for
// its refusals asks ~0.1x a node's capacity from 64 connections), so the
// node must shed the load it is offered, not the load it lets in.
//
// The queries are HTTP/1.1 requests written back to back on conns
// connections from one address without waiting for answers (pipelined:
// the cheapest way for one machine to offer tens of thousands of queries a
// second, and what a server reading a connection's next request only after
// answering the last one must bound). A connection the node closes (its
// bound on a client's connections, or after an answer) is dialled again,
// so a flooder past the node's --client-conns keeps opening connections
// too. Each connection holds at most openFloodPendingMax bytes not yet
// taken by the kernel; a query scheduled past that, or while its
// connection is dialled again, is counted as asked, not sent, and so are
// those pending on a connection when it ends.
type openFlood struct {
	base  *url.URL
	uris  []string
	local net.Addr

	asked, sent, ok, limited, other, dials, dialErrs atomic.Int64
}

// openFloodPendingMax bounds the requests a flooder's connection holds
// that the kernel has not taken (a full socket): ~1,000 requests.
const openFloodPendingMax = 256 << 10

type floodConn struct {
	mu       sync.Mutex
	pending  []byte
	pendingN int // requests in pending
	wake     chan struct{}
	dead     bool
}

// request is a query of clientsQuery's as the bytes of an HTTP/1.1
// request.
func (f *openFlood) request(r *mrand.Rand) []byte {
	return []byte("GET " + clientsQuery("", f.uris, r) + " HTTP/1.1\r\nHost: " + f.base.Host + "\r\n\r\n")
}

// run asks rate queries a second over conns connections until deadline.
func (f *openFlood) run(ctx context.Context, conns int, rate float64, deadline time.Time) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	slots := make([]*floodConn, conns)
	var wg sync.WaitGroup
	for i := range slots {
		c := &floodConn{wake: make(chan struct{}, 1)}
		slots[i] = c
		wg.Go(func() { f.serveConn(ctx, c) })
	}
	r := mrand.New(mrand.NewPCG(7, 2))
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	next := 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		due := int64(rate*time.Since(start).Seconds()) - f.asked.Load()
		for ; due > 0; due-- {
			f.asked.Add(1)
			c := slots[next]
			next = (next + 1) % len(slots)
			req := f.request(r)
			c.mu.Lock()
			if !c.dead && len(c.pending)+len(req) <= openFloodPendingMax {
				c.pending = append(c.pending, req...)
				c.pendingN++
			}
			c.mu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
	}
	wg.Wait()
}

// serveConn keeps one connection open (dialling again when the node closes
// it), writes its pending requests and reads the answers.
func (f *openFlood) serveConn(ctx context.Context, c *floodConn) {
	d := &net.Dialer{LocalAddr: f.local}
	// Not past the deadline either: a connection's own deadline (the
	// same instant) may end it before ctx's timer has fired.
	dl, _ := ctx.Deadline()
	for ctx.Err() == nil && time.Now().Before(dl) {
		f.dials.Add(1)
		conn, err := d.DialContext(ctx, "tcp", f.base.Host)
		if err != nil {
			f.dialErrs.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		// Nothing outlives the phase: a write into a full socket or a read
		// of an answer still on its way ends at its end.
		conn.SetDeadline(dl)
		c.mu.Lock()
		c.dead = false
		c.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			br := bufio.NewReaderSize(conn, 64<<10)
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					f.ok.Add(1)
				case http.StatusTooManyRequests:
					f.limited.Add(1)
				default:
					f.other.Add(1)
				}
				if resp.Close {
					return
				}
			}
		}()
	write:
		for {
			select {
			case <-ctx.Done():
				break write
			case <-done:
				break write
			case <-c.wake:
			}
			c.mu.Lock()
			b, n := c.pending, c.pendingN
			c.pending, c.pendingN = nil, 0
			c.mu.Unlock()
			if len(b) == 0 {
				continue
			}
			if _, err := conn.Write(b); err != nil {
				break write // a request only partly written is not sent
			}
			f.sent.Add(int64(n))
		}
		// The connection is done: what was pending on it is lost, as a
		// flooder's requests on a closed connection are.
		c.mu.Lock()
		c.dead = true
		c.pending, c.pendingN = nil, 0
		c.mu.Unlock()
		conn.Close()
		<-done
	}
}
