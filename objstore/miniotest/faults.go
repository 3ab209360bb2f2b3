package miniotest

import (
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Fault kinds a FaultProxy injects.
const (
	FaultSlowDown = "slowdown" // 503 SlowDown, an S3 error body
	FaultInternal = "internal" // 500 InternalError
	FaultReset    = "reset"    // the connection reset before any answer
	FaultTruncate = "truncate" // a GET's answer cut off after half its body
	FaultDelay    = "delay"    // the answer held back 100 ms to 2 s
)

// FaultKinds lists the faults, in the order a FaultProxy draws them.
var FaultKinds = []string{FaultSlowDown, FaultInternal, FaultReset, FaultTruncate, FaultDelay}

// FaultProxy is an HTTP proxy in front of an S3 server (a real MinIO)
// that injects faults at the HTTP level, which a TCP proxy cannot: server
// errors with S3 error bodies, connections reset, bodies cut short, and
// answers delayed. Each request of a kind (get, get_range, put, head,
// list, delete) meets a fault with that kind's rate (SetRate), the fault
// drawn uniformly from FaultKinds (a truncation of a request with no body
// to cut is a reset), from a
// seeded generator: a schedule is reproducible by its seed up to the
// order requests arrive in.
type FaultProxy struct {
	ln    net.Listener
	srv   *http.Server
	proxy *httputil.ReverseProxy

	mu     sync.Mutex
	rng    *rand.Rand
	rates  map[string]float64
	faults []string // drawn from; FaultKinds unless SetFaults

	// Injected counts the faults injected, by fault kind and request kind
	// ("slowdown get_range").
	injected sync.Map // string -> *atomic.Int64
	byKind   sync.Map // request kind -> *atomic.Int64
	requests atomic.Int64
}

// NewFaultProxy starts a proxy to the S3 server at endpoint (host:port),
// on a loopback port, injecting nothing until SetRate.
func NewFaultProxy(endpoint string, seed uint64) (*FaultProxy, error) {
	target, err := url.Parse("http://" + endpoint)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{ln: ln, rng: rand.New(rand.NewPCG(seed, 0xfa017)), rates: map[string]float64{}, faults: FaultKinds}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the client signed the Host it asked
		},
		ErrorLog: log.New(io.Discard, "", 0), // a cut body is the point, not news
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// Endpoint is the proxy's host:port, for the client to use instead of the
// server's.
func (p *FaultProxy) Endpoint() string { return p.ln.Addr().String() }

// Close stops the proxy.
func (p *FaultProxy) Close() error { return p.srv.Close() }

// SetRate sets the fault rate (0..1) of a request kind, or of every kind
// when kind is "".
func (p *FaultProxy) SetRate(kind string, rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kind == "" {
		for _, k := range []string{"get", "get_range", "put", "head", "list", "delete", "other"} {
			p.rates[k] = rate
		}
		return
	}
	p.rates[kind] = rate
}

// SetFaults restricts the faults drawn to these (all of FaultKinds when
// none are given).
func (p *FaultProxy) SetFaults(faults ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(faults) == 0 {
		faults = FaultKinds
	}
	p.faults = faults
}

// Requests returns the requests seen of a kind.
func (p *FaultProxy) Requests(kind string) int64 {
	v, ok := p.byKind.Load(kind)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// Injected returns the faults injected so far, by "fault kind" and in all,
// and the requests seen.
func (p *FaultProxy) Injected() (by map[string]int64, total, requests int64) {
	by = map[string]int64{}
	p.injected.Range(func(k, v any) bool {
		n := v.(*atomic.Int64).Load()
		by[k.(string)] = n
		total += n
		return true
	})
	return by, total, p.requests.Load()
}

func (p *FaultProxy) count(fault, kind string) {
	v, _ := p.injected.LoadOrStore(fault+" "+kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// requestKind names an S3 request by what it does.
func requestKind(r *http.Request) string {
	switch r.Method {
	case http.MethodGet:
		if r.Header.Get("Range") != "" {
			return "get_range"
		}
		if q := r.URL.Query(); q.Has("list-type") || q.Has("prefix") || q.Has("location") {
			return "list"
		}
		return "get"
	case http.MethodPut:
		return "put"
	case http.MethodHead:
		return "head"
	case http.MethodDelete:
		return "delete"
	}
	return "other"
}

// draw decides a request's fault ("" for none) and, for a delay, how long.
func (p *FaultProxy) draw(kind string) (string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rng.Float64() >= p.rates[kind] {
		return "", 0
	}
	f := p.faults[p.rng.IntN(len(p.faults))]
	if f == FaultTruncate && kind != "get" && kind != "get_range" {
		f = FaultReset // nothing to cut short
	}
	return f, 100*time.Millisecond + time.Duration(p.rng.Int64N(int64(1900*time.Millisecond)))
}

// ServeHTTP proxies r, with its fault if it draws one.
func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	kind := requestKind(r)
	v, _ := p.byKind.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	fault, delay := p.draw(kind)
	if fault != "" {
		p.count(fault, kind)
	}
	switch fault {
	case FaultSlowDown, FaultInternal:
		// Read the request first, as a server that fails late does.
		io.Copy(io.Discard, r.Body)
		code, status, msg := "SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate."
		if fault == FaultInternal {
			code, status, msg = "InternalError", http.StatusInternalServerError, "We encountered an internal error. Please try again."
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>fault</RequestId></Error>`, code, msg, r.URL.Path)
		return
	case FaultReset:
		reset(w)
		return
	case FaultDelay:
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	case FaultTruncate:
		p.proxy.ServeHTTP(&truncating{ResponseWriter: w}, r)
		return
	}
	p.proxy.ServeHTTP(w, r)
}

// reset closes the client's connection at once, with a TCP reset.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	c, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// truncating passes an answer's status and headers (its full
// Content-Length) and the first half of its body, then resets the
// connection.
type truncating struct {
	http.ResponseWriter
	want, sent int64
	cut        bool
}

func (t *truncating) WriteHeader(code int) {
	t.want, _ = strconv.ParseInt(t.Header().Get("Content-Length"), 10, 64)
	t.ResponseWriter.WriteHeader(code)
}

func (t *truncating) Write(b []byte) (int, error) {
	if t.cut {
		return 0, io.ErrClosedPipe
	}
	half := t.want / 2
	if t.sent+int64(len(b)) <= half {
		t.sent += int64(len(b))
		return t.ResponseWriter.Write(b)
	}
	n, _ := t.ResponseWriter.Write(b[:half-t.sent])
	t.sent += int64(n)
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	t.cut = true
	reset(t.ResponseWriter)
	return n, io.ErrClosedPipe
}
