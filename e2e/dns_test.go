package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// rrName is the round-robin name of the test; .test is reserved (RFC 2606),
// so no real resolver or /etc/hosts answers it.
const rrName = "eddy-rr.test."

var rrHosts = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}

// rrDNS is a real DNS server on loopback (UDP and TCP, one port) that
// answers rrName with one A record per node, rotating their order on each
// answer as round-robin DNS servers do; AAAA gets an empty answer, any
// other name NXDOMAIN.
type rrDNS struct {
	addr    string
	queries atomic.Int64 // A questions for rrName answered
	turn    atomic.Int64
	servers []*dns.Server
}

func startDNS(t *testing.T) *rrDNS {
	t.Helper()
	d := &rrDNS{}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		if len(req.Question) != 1 || !strings.EqualFold(req.Question[0].Name, rrName) {
			m.Rcode = dns.RcodeNameError
			w.WriteMsg(m)
			return
		}
		if req.Question[0].Qtype == dns.TypeA {
			d.queries.Add(1)
			k := int(d.turn.Add(1))
			for i := range rrHosts {
				ip := rrHosts[(k+i)%len(rrHosts)]
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: rrName, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
					A:   net.ParseIP(ip).To4(),
				})
			}
		}
		w.WriteMsg(m)
	})
	// UDP and TCP on one port: the kernel picks a free UDP port, whose TCP
	// twin another process may hold; then pick again.
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		d.addr = pc.LocalAddr().String()
		if ln, err = net.Listen("tcp", d.addr); err == nil {
			break
		}
		pc.Close()
		if try == 50 {
			t.Fatalf("DNS over TCP on %s (try %d): %v", d.addr, try, err)
		}
	}
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		d.servers = append(d.servers, s)
	}
	t.Cleanup(func() {
		for _, s := range d.servers {
			s.Shutdown()
		}
	})
	return d
}

// The nodes listen on 127.0.0.1, .2 and .3 at one port behind one name
// that a real DNS server answers with three A records; eddy-ctl query,
// given only that name and the DNS server, has no failed or wrong answer
// while each node in turn is SIGKILLed, queried around, and restarted.
// (Over 120 lines: one scenario (DNS server, cluster, failover) read top to bottom.)
func TestRoundRobinDNS(t *testing.T) {
	srv := startDNS(t)
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	lc := up(t, "--flush-interval", "200ms", "--source", "replay+file://"+src, "--http-hosts", strings.Join(rrHosts, ","))
	port := ""
	for i, n := range lc.Nodes {
		h, p, err := net.SplitHostPort(n.HTTP)
		if err != nil || h != rrHosts[i] || (port != "" && p != port) {
			t.Fatalf("node %s serves HTTP on %s: want %s at one port", n.ID, n.HTTP, rrHosts[i])
		}
		port = p
	}
	lc.waitFor(t, "every node serves the whole replay", 30*time.Second, func() error { return lc.allServing() })

	// The answer every node gives, asked directly.
	target := "at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/3mpsjbtci2c2o"
	var want struct {
		Backlinks map[string][]string `json:"backlinks"`
	}
	for _, n := range lc.Nodes {
		var have struct {
			Backlinks map[string][]string `json:"backlinks"`
		}
		getJSON(t, "http://"+n.HTTP+"/xrpc/blue.cerulea.backlinks.listBacklinks?target="+url.QueryEscape(target), &have)
		if n.ID == lc.Nodes[0].ID {
			want = have
		} else if !reflect.DeepEqual(have, want) {
			t.Fatalf("%s answers %v, %s answers %v", n.ID, have.Backlinks, lc.Nodes[0].ID, want.Backlinks)
		}
	}
	if len(want.Backlinks["$.subject"]) != 1 {
		t.Fatalf("target has %v", want.Backlinks)
	}

	name := strings.TrimSuffix(rrName, ".")
	addr := "http://" + net.JoinHostPort(name, port)
	var (
		mu         sync.Mutex
		down       string // HTTP host of the node that is down, "" if none
		done       int
		retried    int // answered by a second or third address
		sample     string
		failed     []string
		answeredBy = map[string]int{}
		whileDown  = map[string]map[string]int{} // victim host -> answering host -> queries
	)
	query := func() {
		mu.Lock()
		downAtStart := down
		mu.Unlock()
		cmd := exec.Command(filepath.Join(binDir, "eddy-ctl"), "query", target, "--json", "--addr", addr, "--dns", srv.addr)
		out, err := cmd.Output()
		var page struct {
			Node       string              `json:"node"`
			Generation uint64              `json:"generation"`
			Attempts   int                 `json:"attempts"`
			Backlinks  map[string][]string `json:"backlinks"`
		}
		if err == nil {
			err = json.Unmarshal(out, &page)
		}
		if err == nil && !reflect.DeepEqual(page.Backlinks, want.Backlinks) {
			err = fmt.Errorf("%s answered %v at generation %d", page.Node, page.Backlinks, page.Generation)
		}
		host := ""
		if u, perr := url.Parse(page.Node); perr == nil {
			host = u.Hostname()
		}
		mu.Lock()
		defer mu.Unlock()
		done++
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				err = fmt.Errorf("%v: %s", err, ee.Stderr)
			}
			failed = append(failed, err.Error())
			return
		}
		answeredBy[host]++
		if sample == "" {
			sample = strings.TrimSpace(string(out))
		}
		if page.Attempts > 1 {
			retried++
		}
		if downAtStart != "" && downAtStart == down {
			if whileDown[downAtStart] == nil {
				whileDown[downAtStart] = map[string]int{}
			}
			whileDown[downAtStart][host]++
		}
	}
	stop := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					query()
				}
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return done }
	waitQueries := func(n int) {
		target := count() + n
		deadline := time.Now().Add(2 * time.Minute)
		for count() < target && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	perPhase := 80
	waitQueries(perPhase / 2)
	for i := range lc.Nodes {
		victim := lc.Nodes[i]
		host, _, _ := net.SplitHostPort(victim.HTTP)
		mu.Lock()
		down = host
		mu.Unlock()
		if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitQueries(perPhase)
		mu.Lock()
		down = ""
		mu.Unlock()
		lc.Nodes[i].PID = restart(t, victim)
		lc.waitFor(t, "the restarted node serves the cluster's generation", 60*time.Second, func() error { return lc.allServing() })
		waitQueries(perPhase / 2)
	}
	halt()

	t.Logf("%d queries through %s (DNS server %s asked %d times): %d failed, %d answered after a failed attempt; answered by %v; while one was down: %v",
		done, addr, srv.addr, srv.queries.Load(), len(failed), retried, answeredBy, whileDown)
	t.Logf("eddy-ctl query %s --addr %s --dns %s --json\n%s", target, addr, srv.addr, sample)
	fmt.Printf("e2e: %d queries through one round-robin DNS name, each of 3 nodes SIGKILLed in turn: %d failed\n", done, len(failed))
	if len(failed) != 0 {
		t.Fatalf("%d of %d queries failed, first: %s", len(failed), done, failed[0])
	}
	if done < perPhase/2+len(lc.Nodes)*(perPhase+perPhase/2) {
		t.Fatalf("only %d queries ran", done)
	}
	if srv.queries.Load() < int64(done) {
		t.Fatalf("the DNS server was asked %d times for %d queries: the client did not resolve through it", srv.queries.Load(), done)
	}
	for _, h := range rrHosts {
		if answeredBy[h] == 0 {
			t.Errorf("node at %s never answered: the name did not expand to it", h)
		}
		if whileDown[h][h] != 0 {
			t.Errorf("node at %s answered %d queries while SIGKILLed", h, whileDown[h][h])
		}
		if len(whileDown[h]) == 0 {
			t.Errorf("no query ran while %s was down", h)
		}
	}
}

// allServing is nil when every node is up, agrees on the leader and
// serves the leader's generation with the replay finished.
func (lc *localCluster) allServing() error {
	l, lst, err := lc.leaderStatus()
	if err != nil {
		return err
	}
	if lst.Generation == 0 {
		return fmt.Errorf("leader %s at generation 0", l.ID)
	}
	eof := false
	for _, c := range lst.Cursors {
		eof = eof || strings.HasPrefix(c, "eof:")
	}
	if !eof {
		return fmt.Errorf("replay not finished: %v", lst.Cursors)
	}
	for _, n := range lc.Nodes {
		st, err := lc.status(n)
		if err != nil {
			return err
		}
		if st.ViewGeneration != lst.Generation {
			return fmt.Errorf("%s serves %d, leader at %d", n.ID, st.ViewGeneration, lst.Generation)
		}
	}
	return nil
}
