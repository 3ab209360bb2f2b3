package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/gorilla/websocket"
)

// nvClient is the HTTP client of the non-voter checks.
var nvClient = &http.Client{Timeout: 10 * time.Second}

// nvSame asks every node in nodes for path at the same generation (at
// least *floor, raised when a node answers from a newer one) and demands
// byte-identical 200 answers; it returns the body.
func nvSame(t *testing.T, nodes []localNode, path string, floor *uint64) []byte {
	t.Helper()
	for attempt := 0; ; attempt++ {
		bodies := make([][]byte, len(nodes))
		gens := make([]uint64, len(nodes))
		for i, n := range nodes {
			st, b, g, err := getAt(context.Background(), nvClient, n, path, *floor)
			if err == nil && st != 200 {
				err = fmt.Errorf("HTTP %d: %s", st, qClip(b))
			}
			if err != nil {
				t.Fatalf("%s %s: %v", n.ID, path, err)
			}
			bodies[i], gens[i] = b, g
		}
		if top := slices.Max(gens); slices.Min(gens) != top {
			if attempt >= 10 {
				t.Fatalf("%s: the nodes never answered at one generation: %v", path, gens)
			}
			*floor = top
			continue
		}
		for i := 1; i < len(bodies); i++ {
			if string(bodies[i]) != string(bodies[0]) {
				t.Fatalf("%s at generation %d:\n%s answered %s\n%s answered %s", path, gens[0], nodes[0].ID, qClip(bodies[0]), nodes[i].ID, qClip(bodies[i]))
			}
		}
		return bodies[0]
	}
}

// likeLine is a Jetstream like of target by did, record key rkey, at us.
func likeLine(did, rkey, target string, us int64) string {
	return fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{"rev":"3mptbypluud2a","operation":"create","collection":"app.bsky.feed.like","rkey":%q,"record":{"$type":"app.bsky.feed.like","createdAt":"2026-07-01T00:00:00.000Z","subject":{"uri":%q,"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"}},"cid":"bafyreiguce4jh7kcbmof3pmcvasifqtw24b6isakj5ve5ga2b4z4alpc4i"}}`, did, us, rkey, target)
}

// lastTimeUS is the highest time_us of a Jetstream capture.
func lastTimeUS(t *testing.T, file string) int64 {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev struct {
			TimeUS int64 `json:"time_us"`
		}
		if json.Unmarshal([]byte(l), &ev) == nil {
			last = max(last, ev.TimeUS)
		}
	}
	return last
}

// gatedJetstream is a live Jetstream on loopback that sends nothing until
// released, then likes of one new target, then holds the connection.
type gatedJetstream struct {
	addr, target, cursor string // cursor: the last like's time_us
	likes                int
	release              func()
}

func startGatedJetstream(t *testing.T, after int64) *gatedJetstream {
	g := &gatedJetstream{target: "at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/3mpsjbtci2zzz"}
	var lines []string
	for i, rkey := range []string{"3mptbyplj5e2a", "3mptbyplj5e2b", "3mptbyplj5e2c"} {
		us := after + 1000 + int64(i)
		lines = append(lines, likeLine("did:plc:wq4aajammjtxdomz3e23667t", rkey, g.target, us))
		g.cursor = strconv.FormatInt(us, 10)
	}
	g.likes = len(lines)
	gate := make(chan struct{})
	var once sync.Once
	g.release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(g.release)
	g.addr = serveWS(t, func(c *websocket.Conn, r *http.Request) {
		<-gate
		for _, l := range lines {
			if c.WriteMessage(websocket.TextMessage, []byte(l)) != nil {
				return
			}
		}
		holdOpen(c)
	})
	return g
}

// checkNonvoterStatus: eddy-ctl status --json lists four answering nodes,
// q1 a Nonvoter that follows (in its own status and every node's
// configuration), the others Voters; the table shows the Nonvoter.
func checkNonvoterStatus(t *testing.T, lc *localCluster) {
	t.Helper()
	var all []string
	for _, n := range lc.Nodes {
		all = append(all, n.Admin)
	}
	auth := []string{"--addr", strings.Join(all, ","), "--token-file", lc.TokenFile}
	var sts []cluster.NodeStatus
	// The first member to answer may be a voter that has not yet taken the
	// configuration that adds q1 (a node's status lists what it has).
	lc.waitFor(t, "status lists the four nodes", 10*time.Second, func() error {
		sts = nil
		if err := json.Unmarshal([]byte(ctl(t, append([]string{"status", "--json"}, auth...)...)), &sts); err != nil {
			return err
		}
		if len(sts) != 4 {
			return fmt.Errorf("status lists %d nodes", len(sts))
		}
		return nil
	})
	suffrage := func(id string) string {
		if id == "q1" {
			return cluster.SuffrageNonvoter
		}
		return cluster.SuffrageVoter
	}
	for _, st := range sts {
		if st.Error != "" {
			t.Fatalf("%s: %s", st.ID, st.Error)
		}
		if st.ID == "q1" && (st.State != "Follower" || st.Leader == "" || st.Leader == "q1") {
			t.Fatalf("q1: state %s, leader %q", st.State, st.Leader)
		}
		if st.Suffrage != suffrage(st.ID) {
			t.Fatalf("%s's own suffrage %q, want %q", st.ID, st.Suffrage, suffrage(st.ID))
		}
		for _, s := range st.Servers {
			if s.Suffrage != suffrage(s.ID) {
				t.Fatalf("%s's configuration: %s is %q, want %q", st.ID, s.ID, s.Suffrage, suffrage(s.ID))
			}
		}
	}
	if table := ctl(t, append([]string{"status"}, auth...)...); !strings.Contains(table, "Nonvoter") {
		t.Fatalf("eddy-ctl status does not show the non-voter:\n%s", table)
	}
}

// compareAnswers asks every node in nodes, at one generation (at least
// *floor), listBacklinks and getBacklinks (each source) of the most linked
// targets of want and a few small ones: byte-identical answers, and
// listBacklinks' sources those of want. It returns the targets and links.
func compareAnswers(t *testing.T, nodes []localNode, want map[string][]string, floor *uint64) (int, int) {
	t.Helper()
	targets := make([]string, 0, len(want))
	for k := range want {
		targets = append(targets, k)
	}
	sort.Slice(targets, func(i, j int) bool {
		if len(want[targets[i]]) != len(want[targets[j]]) {
			return len(want[targets[i]]) > len(want[targets[j]])
		}
		return targets[i] < targets[j]
	})
	picked := append(slices.Clone(targets[:5]), targets[len(targets)-3:]...)
	links := 0
	for _, tg := range picked {
		b := nvSame(t, nodes, "/xrpc/blue.cerulea.backlinks.listBacklinks?limit=1000&target="+url.QueryEscape(tg), floor)
		var resp struct {
			Backlinks map[string][]string `json:"backlinks"`
		}
		qDecode(t, tg, b, &resp)
		var have, exp []string
		for _, ss := range resp.Backlinks {
			have = append(have, ss...)
		}
		sources := map[string]bool{}
		for _, k := range want[tg] {
			s, path, _ := strings.Cut(k, " ")
			exp = append(exp, s)
			_, coll, _ := qSplit(s)
			sources[coll+":"+strings.TrimPrefix(path, ".")] = true
		}
		slices.Sort(have)
		slices.Sort(exp)
		if !slices.Equal(have, exp) {
			t.Fatalf("target %s: listBacklinks %v, want %v", tg, have, exp)
		}
		for source := range sources {
			nvSame(t, nodes, "/xrpc/blue.microcosm.links.getBacklinks?limit=100&subject="+url.QueryEscape(tg)+"&source="+url.QueryEscape(source), floor)
		}
		links += len(exp)
	}
	return len(picked), links
}

// A query node: eddy-ctl local up --nonvoters 1 starts three voters and a
// non-voter q1 over the replay of a real capture. q1 applies the log and
// serves the same answers as the voters (listBacklinks and getBacklinks,
// byte for byte at one generation), status lists it as a Nonvoter that
// follows, and SIGKILLing it changes neither the leader nor its term while
// the write path goes on ingesting and publishing (a live source released
// after the kill).
func TestNonvoterServesAndDoesNotCount(t *testing.T) {
	src, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	want := wantLinks(t, "--jetstream", src)
	live := startGatedJetstream(t, lastTimeUS(t, src))
	lc := up(t, "--nonvoters", "1", "--flush-interval", "200ms",
		"--source", "replay+file://"+src, "--source", "jetstream+ws://"+live.addr+"/subscribe")
	var voters []localNode
	var q1 localNode
	for _, n := range lc.Nodes {
		if n.ID == "q1" {
			q1 = n
		} else {
			voters = append(voters, n)
		}
	}
	if q1.ID == "" || len(voters) != 3 {
		t.Fatalf("nodes %v: want n1..n3 and q1", lc.Nodes)
	}
	replay := "replay:" + src
	var gen uint64
	lc.waitFor(t, "every node, q1 included, serves the replay", 60*time.Second, func() error {
		gens := map[uint64]bool{}
		for _, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(st.Cursors[replay], "eof:") || st.ViewGeneration != st.Generation || st.Generation == 0 {
				return fmt.Errorf("%s: cursor %q, serving %d of %d", n.ID, st.Cursors[replay], st.ViewGeneration, st.Generation)
			}
			gens[st.Generation] = true
			gen = st.Generation
		}
		if len(gens) != 1 {
			return fmt.Errorf("generations %v", gens)
		}
		return nil
	})
	checkNonvoterStatus(t, lc)
	floor := gen
	targets, links := compareAnswers(t, append([]localNode{q1}, voters...), want, &floor)
	t.Logf("%d targets (%d links) answered byte-identically by q1 and the voters at generation %d", targets, links, floor)

	// SIGKILL the non-voter, then release the live source.
	lead, before, err := lc.leaderStatus()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(q1.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	live.release()
	steady := func() error {
		for _, n := range voters {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if st.Leader != lead.ID || st.Term != before.Term {
				t.Fatalf("%s after q1's SIGKILL: leader %q term %s, was %q term %s", n.ID, st.Leader, st.Term, lead.ID, before.Term)
			}
		}
		return nil
	}
	var after cluster.NodeStatus
	lc.waitFor(t, "the leader publishes the live source's events", 30*time.Second, func() error {
		if err := steady(); err != nil {
			return err
		}
		st, err := lc.status(lead)
		if err != nil {
			return err
		}
		if st.Cursors["jetstream"] != live.cursor || st.Generation <= before.Generation {
			return fmt.Errorf("jetstream cursor %q (want %s), generation %d (was %d)", st.Cursors["jetstream"], live.cursor, st.Generation, before.Generation)
		}
		after = st
		return nil
	})
	// Three election timeouts after the kill, the same leader and term.
	for time.Since(killed) < 3*time.Second {
		if err := steady(); err != nil {
			t.Logf("status: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	floor = after.Generation
	b := nvSame(t, voters, "/xrpc/blue.cerulea.backlinks.listBacklinks?limit=100&target="+url.QueryEscape(live.target), &floor)
	var resp struct {
		Backlinks map[string][]string `json:"backlinks"`
	}
	qDecode(t, live.target, b, &resp)
	if n := len(resp.Backlinks["$.subject"]); n != live.likes {
		t.Fatalf("the live source's target: %d links, want %d: %s", n, live.likes, b)
	}
	t.Logf("q1 SIGKILLed: leader %s stayed in term %s; generation %d -> %d published after", lead.ID, before.Term, before.Generation, after.Generation)
}
