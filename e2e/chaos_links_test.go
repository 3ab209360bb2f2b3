package e2e

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/eddy-backlinks/eddy/internal/toxiproxytest"
)

// Slow links between the nodes (the schedules' "slow" fault).
//
// This kernel has no netem qdisc, so delay comes from toxiproxy: every
// directed Raft link of a schedule's cluster (node a dialling node b's
// Raft address) goes through a proxy of its own, always, not only while a
// fault holds. A DNAT rule in the namespace's nat table sends a's
// connections to b's Raft port to the proxy (listening on an address of
// its own, 127.0.0.(21+3a+b)), which forwards them to b; the nodes dial the
// addresses they always dial, so their TLS names and their membership are
// unchanged. The connections made before the rules are closed (ss -K) and
// Raft dials again, through the proxies. A slow fault adds a latency toxic
// to both directions of every link of one node; healing removes it. Cuts
// still cut: a's packets to b meet the blackhole rule when they are
// routed, before the nat table rewrites them.
type raftLinks struct {
	tp    *toxiproxytest.Server
	names map[[2]int]string // (from, to) -> proxy name
	addrs map[[2]int]string // (from, to) -> the proxy's listen address
	rules [][]string        // the iptables rules added (their -A form)
	slow  map[string]bool   // proxies with latency toxics now
}

// proxyRaftLinks puts a proxy in every directed Raft link between nodes.
func proxyRaftLinks(tp *toxiproxytest.Server, seed uint64, nodes []localNode) (*raftLinks, error) {
	l := &raftLinks{tp: tp, names: map[[2]int]string{}, addrs: map[[2]int]string{}, slow: map[string]bool{}}
	for a := range nodes {
		for b := range nodes {
			if a == b {
				continue
			}
			host, port, err := net.SplitHostPort(nodes[b].Raft)
			if err != nil {
				return l, fmt.Errorf("%s's Raft address %q: %v", nodes[b].ID, nodes[b].Raft, err)
			}
			name := fmt.Sprintf("seed%d-raft-%s-%s", seed, nodes[a].ID, nodes[b].ID)
			listen := net.JoinHostPort(fmt.Sprintf("127.0.0.%d", 21+3*a+b), port)
			if err := tp.Create(name, listen, nodes[b].Raft); err != nil {
				return l, err
			}
			l.names[[2]int{a, b}], l.addrs[[2]int{a, b}] = name, listen
			rule := []string{"-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-s", chaosHosts[a], "-d", host, "--dport", port, "-j", "DNAT", "--to-destination", listen}
			if out, err := exec.Command("iptables", rule...).CombinedOutput(); err != nil {
				return l, fmt.Errorf("iptables %v: %v %s", rule, err, out)
			}
			l.rules = append(l.rules, rule)
			// Connections made before the rule (both ends): closed, so
			// that Raft dials again, through the proxy.
			for _, f := range [][]string{{"src", chaosHosts[a], "dst", nodes[b].Raft}, {"src", nodes[b].Raft, "dst", chaosHosts[a]}} {
				if out, err := exec.Command("ss", append([]string{"-K", "-t", "-H"}, f...)...).CombinedOutput(); err != nil {
					return l, fmt.Errorf("ss -K %v: %v %s", f, err, out)
				}
			}
		}
	}
	return l, nil
}

// established counts the connections the proxy of link (a, b) has
// accepted and holds.
func (l *raftLinks) established(a, b int) int {
	out, err := exec.Command("ss", "-H", "-t", "-n", "state", "established", "src", l.addrs[[2]int{a, b}]).Output()
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// awaitProxied waits until the leader's links to the others carry Raft
// through their proxies (a leader dials its followers; the followers dial
// only to vote).
func (l *raftLinks) awaitProxied(leader, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		missing := ""
		for b := range n {
			if b != leader && l.established(leader, b) == 0 {
				missing += fmt.Sprintf(" n%d->n%d", leader+1, b+1)
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no Raft connection through the proxies of%s after %v", missing, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// setSlow adds (on) or removes latency, each way, on every link to and
// from node who.
func (l *raftLinks) setSlow(who, n int, latency, jitter time.Duration, on bool) error {
	for o := range n {
		if o == who {
			continue
		}
		for _, link := range [][2]int{{who, o}, {o, who}} {
			name := l.names[link]
			if on {
				for _, s := range []toxiproxytest.Stream{toxiproxytest.Upstream, toxiproxytest.Downstream} {
					if err := l.tp.AddLatency(name, "slow-"+string(s), s, latency, jitter); err != nil {
						return err
					}
				}
				l.slow[name] = true
			} else if l.slow[name] {
				if err := l.unslow(name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (l *raftLinks) unslow(name string) error {
	for _, s := range []toxiproxytest.Stream{toxiproxytest.Upstream, toxiproxytest.Downstream} {
		if err := l.tp.RemoveToxic(name, "slow-"+string(s)); err != nil {
			return err
		}
	}
	delete(l.slow, name)
	return nil
}

// probe times a TLS handshake from node a's address with node b's Raft
// port, through the link's proxy as Raft's own connections go: at least a
// round trip of the link (the handshake fails at the client certificate
// it lacks, after the server's first flight).
func (l *raftLinks) probe(a int, bRaft string) (time.Duration, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(chaosHosts[a])}}
	conn, err := d.Dial("tcp", bRaft)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true})
	err = tc.Handshake()
	took := time.Since(start)
	// Refused for the certificate it lacks: the server answered. Its
	// connection closed or timed out: the link did not carry it.
	if ne, ok := err.(net.Error); (ok && ne.Timeout()) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return took, err
	}
	return took, nil
}

// heal removes every latency toxic.
func (l *raftLinks) heal() {
	for name := range l.slow {
		_ = l.unslow(name)
	}
}

// close removes the rules and the proxies.
func (l *raftLinks) close() {
	for _, r := range l.rules {
		d := append([]string(nil), r...)
		d[2] = "-D"
		_ = exec.Command("iptables", d...).Run()
	}
	for _, name := range l.names {
		_ = l.tp.Delete(name)
	}
}
