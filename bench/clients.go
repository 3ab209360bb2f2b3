package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/query"
)

// ClientsResult is what `eddy-bench clients` measures: the latency other
// clients see while one client floods a node, with the per-client limits
// on (the node's defaults) and off.
type ClientsResult struct {
	Targets        int     `json:"targets"`
	Limit          int     `json:"limit"`
	LinksPerTarget int     `json:"links_per_target"`
	Pinned         bool    `json:"pinned"` // server on CPU 0, load on CPU 1 (taskset)
	CapacityQPS    float64 `json:"capacity_qps"`
	// The latency of the capacity's queries: a load the node sustains at
	// its capacity (a closed loop of 32 connections, limits off).
	CapacityP50us float64 `json:"capacity_p50_us"`
	CapacityP99us float64 `json:"capacity_p99_us"`
	NormalClients int     `json:"normal_clients"`
	NormalQPS     float64 `json:"normal_offered_qps"`
	FloodConns    int     `json:"flood_conns"`
	// FloodX: the flooder's open loop asks this many times the measured
	// capacity (0: a closed loop, as fast as it is answered).
	FloodX float64 `json:"flood_x,omitempty"`
	// IngestRate: links the server indexes a second while serving.
	IngestRate     float64         `json:"ingest_rate"`
	ClientRate     float64         `json:"client_rate"`
	ClientBurst    int             `json:"client_burst"`
	ClientInFlight int             `json:"client_in_flight"`
	ClientSlots    int             `json:"client_slots,omitempty"` // --client-slots (0: the default, a quarter of the slots)
	ClientPaceGap  string          `json:"client_pace_gap"`        // --client-pace-gap (0s: none)
	ClientConns    int             `json:"client_conns"`           // --client-conns (0: no bound)
	ServerProcs    int             `json:"server_procs,omitempty"` // --server-procs (0: Go's choice)
	Seconds        float64         `json:"seconds_per_phase"`
	Phases         []ClientsPhase  `json:"phases"`
	Medians        []ClientsMedian `json:"medians"`
}

// ClientsMedian is a phase's normal latency, the median over the rounds.
type ClientsMedian struct {
	Name           string  `json:"name"`
	NormalP50us    float64 `json:"normal_p50_us"`
	NormalP99us    float64 `json:"normal_p99_us"`
	NormalP99usMax float64 `json:"normal_p99_us_max"`
}

// ClientsPhase is one phase's figures.
type ClientsPhase struct {
	Name          string  `json:"name"`
	Round         int     `json:"round"`
	Limits        bool    `json:"limits"`
	Flood         bool    `json:"flood"`
	NormalSent    int     `json:"normal_sent"`
	NormalOK      int     `json:"normal_ok"`
	NormalLimited int     `json:"normal_limited"`
	NormalFailed  int     `json:"normal_failed"`
	NormalP50us   float64 `json:"normal_p50_us"`
	NormalP99us   float64 `json:"normal_p99_us"`
	// The normal queries scheduled after the phase's first second (the
	// flooder's start, its full bucket's burst and its connections
	// opening fall in that second): p99, and the share of the phase's
	// slowest 1% scheduled in the first second.
	NormalP99AfterFirstSecondUs float64 `json:"normal_p99_after_first_second_us"`
	SlowestInFirstSecond        float64 `json:"slowest_in_first_second"`
	ServerP50us                 float64 `json:"server_p50_us"` // the normal queries in the server: arrival to answer written
	ServerP99us                 float64 `json:"server_p99_us"`
	// The server's Go scheduler latency p99 (runnable to running), an
	// upper bound of its histogram bucket.
	ServerSchedP99us float64 `json:"server_sched_p99_us"`
	// How late a 1 ms timer fired in the normal clients' process (p99,
	// max): their own CPU starvation, part of what they measure.
	ClientLateP99us float64 `json:"client_timer_late_p99_us"`
	ClientLateMaxus float64 `json:"client_timer_late_max_us"`
	FloodQPS        float64 `json:"flood_qps"`    // asked
	FloodOKQPS      float64 `json:"flood_ok_qps"` // answered 200
	FloodLimited    int     `json:"flood_limited"`
	// The open loop's (--flood-x): queries a second written to its
	// connections, and connections dialled (again after the node closed
	// one) a second.
	FloodSentQPS   float64 `json:"flood_sent_qps,omitempty"`
	FloodDialsPerS float64 `json:"flood_dials_per_s,omitempty"`
	FloodDialErrs  int     `json:"flood_dial_errors,omitempty"`
	ServerRSS      int64   `json:"server_rss_bytes"`
}

// clientsMain is `eddy-bench clients`: a query server (the node's, over
// HTTP on loopback, an index of --targets posts of --likes likes each)
// runs in a child process pinned to CPU 0 and the clients in this one,
// pinned to CPU 1 (when there are two and taskset exists), so that the
// load does not steal the server's CPU. It measures the server's capacity
// (closed loop, limits off), then runs phases of --seconds each: normal
// clients (each below the per-client rate) offering half that capacity,
// open loop, latency from each query's scheduled time; then the same
// with one client flooding from --flood-conns connections in a closed
// loop; with the node's default per-client limits and without.
func clientsMain(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name+" clients", flag.ContinueOnError)
	fs.SetOutput(stderr)
	targets := fs.Int("targets", 500, "posts in the index")
	likes := fs.Int("likes", 1000, "likes of each post")
	limit := fs.Int("limit", 1000, "each query's limit: a page of that many links (the API's most), so that the server, not the clients, is what a query costs")
	seconds := fs.Float64("seconds", 10, "seconds of each phase")
	floodConns := fs.Int("flood-conns", 64, "connections of the flooding client")
	ingestRate := fs.Float64("ingest-rate", 1000, "links the server indexes a second while it serves, a flush every 2 s (the network's rate is a few hundred to a few thousand; 0: none)")
	floodX := fs.Float64("flood-x", 0, "the flooder asks this many times the measured capacity in an open loop, pipelined on its connections and dialling again those the node closes (0: a closed loop, as fast as it is answered)")
	rounds := fs.Int("rounds", 3, "rounds of the four phases (each on fresh servers); the medians are reported")
	clientSlots := fs.Int("client-slots", 0, "the limits' execution slots per client (0: the node's default, a quarter of the slots)")
	serverProcs := fs.Int("server-procs", 0, "GOMAXPROCS of the server (0: Go's choice, the CPUs it may run on: one when pinned); more Ps than CPUs let a goroutine run while another P sits in a long system call")
	paceGap := fs.Duration("client-pace-gap", query.DefaultPaceGap, "the limits' pace gap (eddy-node's --client-pace-gap; 0: none)")
	clientConns := fs.Int("client-conns", query.DefaultClientConns, "the limits' connections per client (eddy-node's --client-conns; 0: no bound)")
	traceDir := fs.String("trace", "", "a directory: the server writes a Go execution trace of 3 s of each phase there (phase-round.trace), to see what holds its CPU")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *targets < 1 || *likes < 1 || *seconds <= 0 || *floodConns < 1 || *floodX < 0 || *ingestRate < 0 || *rounds < 1 || *limit < 1 || *limit > query.LimitMax || *serverProcs < 0 {
		return fmt.Errorf("%w: clients needs positive --targets, --likes, --seconds, --flood-conns, and --limit of 1..%d", ErrUsage, query.LimitMax)
	}
	clientsLimit = strconv.Itoa(*limit)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_, tasksetErr := exec.LookPath("taskset")
	pinned := os.Getenv("EDDY_BENCH_PINNED") != ""
	pin := pinned || (tasksetErr == nil && runtime.NumCPU() >= 2)
	if pin && !pinned {
		// Pin this process (the clients) to CPU 1 and run again.
		cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", "1", self, "clients"}, args...)...)
		cmd.Env = append(os.Environ(), "EDDY_BENCH_PINNED=1")
		cmd.Stdout, cmd.Stderr = stdout, stderr
		return cmd.Run()
	}
	res := &ClientsResult{Targets: *targets, Limit: *limit, LinksPerTarget: *likes, Pinned: pin, FloodConns: *floodConns, FloodX: *floodX, IngestRate: *ingestRate, Seconds: *seconds,
		ClientRate: query.DefaultClientRate, ClientBurst: query.DefaultClientBurst, ClientInFlight: query.DefaultClientInFlight, ClientSlots: *clientSlots, ClientPaceGap: paceGap.String(), ClientConns: *clientConns, ServerProcs: *serverProcs}
	uris := make([]string, *targets)
	for i := range uris {
		uris[i] = clientsPost(i)
	}
	start := func(limits bool) (*clientsServer, error) {
		a := []string{"clients-serve", "--targets", strconv.Itoa(*targets), "--likes", strconv.Itoa(*likes), "--limits=" + strconv.FormatBool(limits), "--client-slots", strconv.Itoa(*clientSlots), "--client-pace-gap", paceGap.String(), "--client-conns", strconv.Itoa(*clientConns), "--ingest-rate", strconv.FormatFloat(*ingestRate, 'f', -1, 64)}
		cmd := exec.CommandContext(ctx, self, a...)
		if pin {
			cmd = exec.CommandContext(ctx, "taskset", append([]string{"-c", "0", self}, a...)...)
		}
		if *serverProcs > 0 {
			cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(*serverProcs))
		}
		srv, err := startClientsServer(cmd, stderr)
		if err != nil {
			return nil, err
		}
		return srv, nil
	}

	// Each configuration on a fresh server (warmed); the capacity is
	// measured on the first, with its limits off.
	res.NormalClients = 0
	// Each configuration on a fresh server (warmed), limits on first.
	for round := range *rounds {
		for _, limits := range []bool{false, true} {
			srv, err := start(limits)
			if err != nil {
				return err
			}
			if res.NormalClients == 0 {
				// Warm (a closed loop for 3 s), then measure.
				if qps, _, _ := clientsCapacity(ctx, srv.url, uris, 3*time.Second); qps == 0 {
					srv.stop()
					return errors.New("clients: the server answered no query")
				}
				res.CapacityQPS, res.CapacityP50us, res.CapacityP99us = clientsCapacity(ctx, srv.url, uris, 5*time.Second)
				fmt.Fprintf(stderr, "clients: capacity %.0f queries/s (closed loop, 32 connections, limits off; p50 %.0fµs, p99 %.0fµs)\n", res.CapacityQPS, res.CapacityP50us, res.CapacityP99us)
				res.NormalQPS = res.CapacityQPS * clientsNormalShare
				// Each normal client stays at half the per-client rate (a
				// query costs a token per 100 links of its limit).
				cost := float64(max(1, (*limit+99)/100))
				res.NormalClients = max(4, int(res.NormalQPS*cost/(query.DefaultClientRate/2))+1)
			}
			// Warm every server with the steady load for 3 s (fills the
			// frame cache, grows the heap to its working size; within the
			// limits by construction), so that no phase measures a cold
			// start.
			clientsPhase(ctx, self, pin, srv.url, uris, res.NormalClients, res.NormalQPS, false, *floodConns, 0, 3*time.Second)
			srv.latency() // the warm-up's queries are not a phase's
			for _, flood := range []bool{false, true} {
				name := map[bool]string{false: "steady", true: "flood"}[flood] + ", limits " + map[bool]string{false: "off", true: "on"}[limits]
				if *traceDir != "" {
					out := filepath.Join(*traceDir, fmt.Sprintf("%s-%d.trace", strings.NewReplacer(", ", "-", " ", "-").Replace(name), round))
					go srv.trace(out, time.Duration(*seconds*float64(time.Second))/2, 3*time.Second)
				}
				p := clientsPhase(ctx, self, pin, srv.url, uris, res.NormalClients, res.NormalQPS, flood, *floodConns, *floodX*res.CapacityQPS, time.Duration(*seconds*float64(time.Second)))
				p.Name, p.Limits, p.Flood, p.Round = name, limits, flood, round
				p.ServerP50us, p.ServerP99us, p.ServerSchedP99us = srv.latency()
				p.ServerRSS = srv.rss()
				fmt.Fprintf(stderr, "clients: %s: normal p50 %.0fµs p99 %.0fµs (after the first second %.0fµs; %.0f%% of the slowest 1%% in it) (in the server %.0fµs, %.0fµs, scheduler p99 %.0fµs; client timers late p99 %.0fµs; %d sent, %d ok, %d limited, %d failed); flood %.0f/s asked, %.0f/s sent, %.0f/s answered, %.0f dials/s; server RSS %.0f MB\n",
					name, p.NormalP50us, p.NormalP99us, p.NormalP99AfterFirstSecondUs, 100*p.SlowestInFirstSecond, p.ServerP50us, p.ServerP99us, p.ServerSchedP99us, p.ClientLateP99us, p.NormalSent, p.NormalOK, p.NormalLimited, p.NormalFailed, p.FloodQPS, p.FloodSentQPS, p.FloodOKQPS, p.FloodDialsPerS, float64(p.ServerRSS)/1e6)
				res.Phases = append(res.Phases, p)
			}
			srv.stop()
		}
	}
	// The VM's noise (another tenant's burst) lands in one phase or
	// another: each phase's median over the rounds.
	for _, name := range []string{"steady, limits off", "flood, limits off", "steady, limits on", "flood, limits on"} {
		var p50, p99 []float64
		for _, p := range res.Phases {
			if p.Name == name {
				p50, p99 = append(p50, p.NormalP50us), append(p99, p.NormalP99us)
			}
		}
		slices.Sort(p50)
		slices.Sort(p99)
		m := ClientsMedian{Name: name, NormalP50us: p50[len(p50)/2], NormalP99us: p99[len(p99)/2], NormalP99usMax: p99[len(p99)-1]}
		res.Medians = append(res.Medians, m)
		fmt.Fprintf(stderr, "clients: %s, median of %d rounds: normal p50 %.0fµs p99 %.0fµs (worst p99 %.0fµs)\n", name, len(p99), m.NormalP50us, m.NormalP99us, m.NormalP99usMax)
	}
	return json.NewEncoder(stdout).Encode(res)
}

func clientsPost(i int) string {
	return fmt.Sprintf("at://did:plc:poster%017d/app.bsky.feed.post/3mptbyplj5d2a", i)
}

// loopbackClient is an HTTP client whose connections come from addr (any
// address of 127.0.0.0/8 is this host's), keeping up to conns idle.
func loopbackClient(addr string, conns int) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 30 * time.Second}
}

// clientsFloodAddr is the flooding client's address.
const clientsFloodAddr = "127.0.0.250"

// clientsLimit is the limit every query of `eddy-bench clients` asks.
var clientsLimit = "1000"

func clientsQuery(base string, uris []string, r *mrand.Rand) string {
	return base + "/xrpc/blue.cerulea.backlinks.listBacklinks?" + url.Values{"target": {uris[r.IntN(len(uris))]}, "limit": {clientsLimit}}.Encode()
}

// get asks u and says how it was answered: 200, 429, or anything else.
func clientsGet(c *http.Client, u string) int {
	r, err := c.Get(u)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r.StatusCode
}

// clientsNormalShare is the normal clients' offered load, a share of the
// measured capacity.
const clientsNormalShare = 0.3

// clientsCapacity is the queries a second the server answers to 32
// connections asking in a closed loop for d, and their latency's p50 and
// p99 (µs).
func clientsCapacity(ctx context.Context, base string, uris []string, d time.Duration) (qps, p50, p99 float64) {
	c := loopbackClient("127.0.0.2", 32)
	var mu sync.Mutex
	var lat []time.Duration
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(uint64(w), 1))
			var mine []time.Duration
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				if clientsGet(c, clientsQuery(base, uris, r)) == 200 {
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	return float64(len(lat)) / d.Seconds(), percentile(lat, 0.5), percentile(lat, 0.99)
}

// clientsPhase runs n normal clients offering qps in all, open loop, for
// d, and with flood one more client asking from conns connections: in a
// closed loop, or floodRate queries a second in an open loop when
// floodRate > 0.
func clientsPhase(ctx context.Context, self string, pin bool, base string, uris []string, n int, qps float64, flood bool, conns int, floodRate float64, d time.Duration) (p ClientsPhase) {
	var mu sync.Mutex
	type timed struct{ at, took time.Duration } // scheduled at (from the phase's start), latency
	var all []timed
	// The normal clients start a second before the phase (their queries
	// then are not counted), so that a flood meets a node already serving
	// them, as it would; the flooder's process starts then too and waits
	// for the phase: a flooder is another machine, and its Go runtime
	// starting on the clients' CPU is not the server's doing.
	const lead = time.Second
	start := time.Now().Add(lead)
	deadline := start.Add(d)
	var wg sync.WaitGroup
	var floodOut strings.Builder
	var floodCmd *exec.Cmd
	if flood {
		// The flooder is its own process (on the clients' CPU when
		// pinned), so that the kernel, not one Go scheduler, shares the CPU
		// between it and the normal clients, as between two machines' worth
		// of clients it would not be shared at all.
		args := []string{"clients-flood", "--url", base, "--conns", strconv.Itoa(conns), "--targets", strconv.Itoa(len(uris)), "--limit", clientsLimit, "--seconds", strconv.FormatFloat(d.Seconds(), 'f', -1, 64), "--at", strconv.FormatInt(start.UnixNano(), 10), "--rate", strconv.FormatFloat(floodRate, 'f', 0, 64)}
		floodCmd = exec.CommandContext(ctx, self, args...)
		if pin {
			floodCmd = exec.CommandContext(ctx, "taskset", append([]string{"-c", "1", self}, args...)...)
		}
		floodCmd.Stdout, floodCmd.Stderr = &floodOut, os.Stderr
		if err := floodCmd.Start(); err != nil {
			floodCmd = nil
			p.FloodQPS = -1
		}
	}
	// How late this process's timers fire: the load generator's own
	// CPU starvation, which lands in the latencies it measures.
	var late []time.Duration
	wg.Go(func() {
		for time.Now().Before(deadline) {
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			late = append(late, time.Since(t0)-time.Millisecond)
		}
	})
	defer func() {
		slices.Sort(late)
		p.ClientLateP99us = percentile(late, 0.99)
		p.ClientLateMaxus = percentile(late, 1)
	}()
	every := time.Duration(float64(n) / qps * float64(time.Second))
	for i := range n {
		c := loopbackClient(fmt.Sprintf("127.0.%d.%d", 1+i/200, 10+i%200), 64)
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(uint64(i), 3))
			var inner sync.WaitGroup
			// Open loop: each query at its scheduled time (spread over the
			// clients), its latency counted from then.
			at := start.Add(-lead + time.Duration(i)*every/time.Duration(n))
			for at.Before(deadline) && ctx.Err() == nil {
				time.Sleep(time.Until(at))
				u := clientsQuery(base, uris, r)
				sched := at
				inner.Go(func() {
					code := clientsGet(c, u)
					took := time.Since(sched)
					if sched.Before(start) {
						return // the lead-in
					}
					mu.Lock()
					defer mu.Unlock()
					p.NormalSent++
					switch code {
					case 200:
						p.NormalOK++
						all = append(all, timed{sched.Sub(start), took})
					case 429:
						p.NormalLimited++
					default:
						p.NormalFailed++
					}
				})
				at = at.Add(every)
			}
			inner.Wait()
		})
	}
	wg.Wait()
	var lat, latLater []time.Duration
	for _, t := range all {
		lat = append(lat, t.took)
		if t.at >= time.Second {
			latLater = append(latLater, t.took)
		}
	}
	slices.Sort(lat)
	p.NormalP50us, p.NormalP99us = percentile(lat, 0.5), percentile(lat, 0.99)
	slices.Sort(latLater)
	p.NormalP99AfterFirstSecondUs = percentile(latLater, 0.99)
	slices.SortFunc(all, func(a, b timed) int { return int(b.took - a.took) })
	if n := len(all) / 100; n > 0 {
		first := 0
		for _, t := range all[:n] {
			if t.at < time.Second {
				first++
			}
		}
		p.SlowestInFirstSecond = float64(first) / float64(n)
	}
	if floodCmd != nil {
		var f floodResult
		if err := floodCmd.Wait(); err == nil && json.Unmarshal([]byte(floodOut.String()), &f) == nil {
			p.FloodQPS, p.FloodOKQPS, p.FloodLimited = float64(f.Asked)/f.Seconds, float64(f.OK)/f.Seconds, f.Limited
			p.FloodSentQPS, p.FloodDialsPerS, p.FloodDialErrs = float64(f.Sent)/f.Seconds, float64(f.Dials)/f.Seconds, f.DialErrors
		} else {
			p.FloodQPS = -1 // the flooder failed: the phase says so
		}
	}
	return p
}
