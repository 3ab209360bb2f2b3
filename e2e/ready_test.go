package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// cutProxy forwards TCP to a target until cut: then it closes every
// connection and refuses new ones (closes them at once) until healed.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			continue
		}
		go func() {
			out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
			if err != nil || !p.track(out) {
				in.Close()
				if out != nil {
					out.Close()
				}
				return
			}
			go func() { io.Copy(out, in); out.Close(); in.Close() }()
			io.Copy(in, out)
			in.Close()
			out.Close()
		}()
	}
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// readyz returns a node's /readyz status and body.
func readyz(addr string) (int, string, error) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// readyGen parses "ready: generation N".
func readyGen(t *testing.T, body string) uint64 {
	t.Helper()
	g, err := strconv.ParseUint(strings.TrimPrefix(body, "ready: generation "), 10, 64)
	if err != nil {
		t.Fatalf("readyz body %q", body)
	}
	return g
}

// /readyz on real processes: a follower whose Raft traffic from the leader
// is cut (a real partition, through a TCP proxy on its advertised Raft
// address) while the leader goes on publishing turns unready within the
// bound, while the others stay ready; when the partition heals it turns
// ready again only once it serves the generation the leader had. Then the
// same follower is SIGSTOPped past the bound and resumed: no answer after
// the resume says ready with a generation older than the leader's.
// (Over 120 lines: one scenario: a follower cut off, stale, refused, healed.)
func TestReadyStaleFollower(t *testing.T) {
	const bound = 2 * time.Second
	t.Setenv("EDDY_READY_LAG_MAX", bound.String()) // read by every node, through the environment
	world := simnet.NewWorld(simnet.Config{Seed: 31, Accounts: 60, Start: time.Now()})
	world.Step(500)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	stream := "jetstream+" + sim.JetstreamURL()
	lc := up(t, "--nodes", "2", "--flush-interval", "200ms", "--source", stream)

	// A third node whose peers dial it through the proxy.
	var meta struct {
		Store    string `json:"store"`
		CertsDir string `json:"certs_dir"`
	}
	b, err := os.ReadFile(filepath.Join(lc.dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MakeNodeCert(meta.CertsDir, "n3", []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	var ports [3]string
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().String()
		l.Close()
	}
	proxy := newCutProxy(t, ports[0])
	n3 := localNode{ID: "n3", HTTP: ports[2], Admin: ports[1], Bin: filepath.Join(binDir, "eddy-node"), Log: filepath.Join(lc.dir, "n3.log")}
	n3.Args = []string{"--id", "n3", "--data-dir", filepath.Join(lc.dir, "n3"), "--raft-addr", ports[0], "--raft-advertise", proxy.addr(),
		"--admin-addr", n3.Admin, "--http-addr", n3.HTTP, "--certs-dir", meta.CertsDir, "--admin-token-file", lc.TokenFile,
		"--store", meta.Store, "--flush-interval", "200ms", "--source", stream, "--join", lc.Nodes[0].Admin}
	logf, err := os.Create(n3.Log)
	if err != nil {
		t.Fatal(err)
	}
	logf.Close()
	n3.PID = restart(t, n3)
	lc.Nodes = append(lc.Nodes, n3)

	// The world goes on in the background until told to pause.
	var stepping sync.Mutex // held while paused
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			stepping.Lock()
			world.Step(20)
			stepping.Unlock()
		}
	}()
	defer func() { close(done); wg.Wait() }()

	lc.waitFor(t, "three voters, every node ready", 60*time.Second, func() error {
		for _, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if len(st.Servers) != 3 {
				return fmt.Errorf("%s sees %d servers", n.ID, len(st.Servers))
			}
			if code, body, err := readyz(n.HTTP); err != nil || code != 200 {
				return fmt.Errorf("%s: %d %s %v", n.ID, code, body, err)
			}
		}
		return nil
	})
	lead, err := lc.leader(nil)
	if err != nil {
		t.Fatal(err)
	}
	if lead.ID == "n3" {
		ctl(t, "transfer-leadership", "--addr", n3.Admin, "--token-file", lc.TokenFile)
		lc.waitFor(t, "a leader other than n3", 20*time.Second, func() error {
			l, err := lc.leader(nil)
			if err == nil && l.ID == "n3" {
				return fmt.Errorf("n3 still leads")
			}
			lead = l
			return err
		})
	}
	leaderGen := func() uint64 {
		st, err := lc.status(lead)
		if err != nil {
			t.Fatal(err)
		}
		return st.Generation
	}

	// 1. Partition: the leader can no longer reach n3.
	cutAt := time.Now()
	genAtCut := leaderGen()
	proxy.setCut(true)
	var unready string
	lc.waitFor(t, "n3 unready while cut off", bound+15*time.Second, func() error {
		code, body, err := readyz(n3.HTTP)
		if err != nil {
			return err
		}
		if code != 503 {
			return fmt.Errorf("n3: %d %s", code, body)
		}
		unready = body
		return nil
	})
	took := time.Since(cutAt)
	t.Logf("n3 unready %v after the cut: %s", took.Round(time.Millisecond), unready)
	fmt.Printf("e2e: /readyz of a partitioned follower turned 503 %v after the cut (bound %v)\n", took.Round(time.Millisecond), bound)
	// (A follower that hears nothing from the leader for the Raft heartbeat
	// timeout, shorter than the bound, also forgets it: "no leader known".)
	// The leader goes on publishing past what n3 has; the others stay ready.
	lc.waitFor(t, "the leader publishes while n3 is cut off", 20*time.Second, func() error {
		if g := leaderGen(); g <= genAtCut+2 {
			return fmt.Errorf("leader at generation %d (cut at %d)", g, genAtCut)
		}
		return nil
	})
	for _, n := range lc.Nodes[:2] {
		if code, body, err := readyz(n.HTTP); err != nil || code != 200 {
			t.Fatalf("%s while n3 is cut off: %d %s %v", n.ID, code, body, err)
		}
	}
	// n3's metrics say the same: not ready, and no contact for longer and
	// longer.
	lc.waitFor(t, "n3's last contact past the bound", 20*time.Second, func() error {
		m, err := scrapeMetrics(n3.HTTP)
		if err != nil {
			return err
		}
		if r, _ := family(m, "eddy_ready"); r != 0 {
			t.Fatalf("n3 eddy_ready = %v while cut off", r)
		}
		if lcs, _ := family(m, "eddy_raft_last_contact_seconds"); lcs <= bound.Seconds() {
			return fmt.Errorf("n3 last contact %vs", lcs)
		}
		return nil
	})

	// 2. Heal, with the world paused and the leader's generation settled:
	// n3's first ready answer serves at least that generation.
	stepping.Lock()
	target := settle(t, leaderGen)
	st3, err := lc.status(n3)
	if err != nil {
		t.Fatal(err)
	}
	if st3.ViewGeneration >= target {
		t.Fatalf("n3 serves generation %d, not behind the leader's %d", st3.ViewGeneration, target)
	}
	proxy.setCut(false)
	healAt := time.Now()
	first, notReady := pollUntilReady(t, n3.HTTP, 30*time.Second)
	stepping.Unlock()
	t.Logf("healed: n3 ready after %v (%d answers 503 first), at generation %d; the leader had %d", time.Since(healAt).Round(time.Millisecond), notReady, first, target)
	fmt.Printf("e2e: /readyz of the healed follower back to 200 after %v, serving generation %d (leader %d, n3 had %d)\n", time.Since(healAt).Round(time.Millisecond), first, target, st3.ViewGeneration)
	if first < target {
		t.Fatalf("n3 ready at generation %d, behind the leader's %d", first, target)
	}

	// 3. SIGSTOP n3 past the bound while the leader publishes, then resume.
	if err := syscall.Kill(n3.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := leaderGen()
	time.Sleep(bound + time.Second)
	stepping.Lock()
	target = settle(t, leaderGen)
	if target <= stopped {
		stepping.Unlock()
		syscall.Kill(n3.PID, syscall.SIGCONT)
		t.Fatalf("the leader published nothing while n3 was stopped (%d)", target)
	}
	if err := syscall.Kill(n3.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumeAt := time.Now()
	first, notReady = pollUntilReady(t, n3.HTTP, 30*time.Second)
	stepping.Unlock()
	t.Logf("resumed: n3 ready after %v (%d answers 503 first), at generation %d; the leader had %d", time.Since(resumeAt).Round(time.Millisecond), notReady, first, target)
	if first < target {
		t.Fatalf("n3 ready after SIGCONT at generation %d, behind the leader's %d", first, target)
	}
}

// settle waits until the leader's generation has not changed for 2 s.
func settle(t *testing.T, gen func() uint64) uint64 {
	t.Helper()
	g, since := gen(), time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for time.Since(since) < 2*time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("the leader's generation did not settle (%d)", g)
		}
		time.Sleep(100 * time.Millisecond)
		if n := gen(); n != g {
			g, since = n, time.Now()
		}
	}
	return g
}

// pollUntilReady asks /readyz every 10 ms until it answers 200, and
// returns the generation that answer names and how many 503s came first.
func pollUntilReady(t *testing.T, addr string, timeout time.Duration) (uint64, int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	notReady := 0
	reasons := map[string]bool{}
	for time.Now().Before(deadline) {
		code, body, err := readyz(addr)
		if err == nil && code == 200 {
			t.Logf("%s: 503 reasons before ready: %v", addr, reasons)
			return readyGen(t, body), notReady
		}
		if err == nil && code == 503 {
			notReady++
			if i := strings.IndexAny(body, "0123456789"); i > 0 {
				body = body[:i] // the reason, without its figures
			}
			reasons[body] = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s not ready within %v", addr, timeout)
	return 0, 0
}
