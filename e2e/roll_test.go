package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/query/client"
)

// Version strings of the two builds of the rolling-upgrade test.
const (
	rollVersionN    = "0.0.0-roll-n"
	rollVersionNext = "0.0.1-roll-n1"
)

// buildNode builds eddy-node at version ver (and with tags) into dir.
func buildNode(t *testing.T, dir, name, ver string, tags ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	args := []string{"build", "-ldflags", "-X github.com/eddy-backlinks/eddy/version.Version=" + ver, "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "../cmd/node")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, b)
	}
	b, err := exec.Command(out, "--version").Output()
	if err != nil || strings.TrimSpace(string(b)) != ver {
		t.Fatalf("%s --version: %q, %v; want %q", out, b, err, ver)
	}
	return out
}

// A three-node cluster at version N ingests a simulated network (backfill
// and live stream) and answers a continuous query load across its three
// addresses while eddy-ctl roll replaces every node, one at a time, by a
// version N+1 build that adds a skippable Raft entry type: no query fails,
// every node ends at N+1, the N node that saw the new entry skipped it, and
// every target of the model is equal on every node. The longest time
// without a new manifest generation during the roll is printed.
// (Over 120 lines: one scenario: the rolling upgrade, node by node.)
func TestRollingUpgrade(t *testing.T) {
	bins := t.TempDir()
	binN := buildNode(t, bins, "eddy-node-n", rollVersionN)
	binNext := buildNode(t, bins, "eddy-node-n1", rollVersionNext, "eddy_next")

	accounts := scale("EDDY_E2E_ROLL_ACCOUNTS", 80)
	world := simnet.NewWorld(simnet.Config{Seed: 17, Accounts: accounts})
	world.Step(3000) // history: reached by the backfill
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	backfill := "backfill+" + sim.RelayURL() + "?plc=" + url.QueryEscape(sim.PLCURL()) + "&didweb=" + url.QueryEscape(sim.PLCURL())
	lc := up(t, "--node-bin", binN, "--flush-interval", "300ms", "--source", "jetstream+"+sim.JetstreamURL(), "--source", backfill)

	// The world goes on until the roll is over.
	stopWorld := make(chan struct{})
	worldDone := make(chan struct{})
	go func() {
		defer close(worldDone)
		for {
			select {
			case <-stopWorld:
				return
			case <-time.After(150 * time.Millisecond):
				world.Step(25)
			}
		}
	}()
	defer func() {
		select {
		case <-stopWorld:
		default:
			close(stopWorld)
		}
		<-worldDone
	}()

	lc.waitFor(t, "the backfill is published and served everywhere", 120*time.Second, func() error {
		for _, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			done := false
			for k, v := range st.Cursors {
				done = done || (strings.HasPrefix(k, "backfill:") && strings.HasPrefix(v, "eof:"))
			}
			if !done || st.ViewGeneration == 0 || st.Version != rollVersionN {
				return fmt.Errorf("%s: version %s, cursors %v, serving %d", n.ID, st.Version, st.Cursors, st.ViewGeneration)
			}
		}
		return nil
	})

	// The query load: targets of the history, on every address.
	var targets []string
	for tg := range world.LiveLinks() {
		targets = append(targets, tg)
	}
	sort.Strings(targets)
	if len(targets) < 50 {
		t.Fatalf("only %d targets", len(targets))
	}
	var addrs, admins []string
	for _, n := range lc.Nodes {
		addrs = append(addrs, "http://"+n.HTTP)
		admins = append(admins, n.Admin)
	}
	load := newQueryLoad(addrs, targets)
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	load.start(ctx)
	gens := newGenerationWatch(lc)
	gens.start(ctx)

	// The roll. The restart command saves the node's status as it goes down
	// and starts the N+1 build on the node's data directory. The old
	// leader, still at N, first waits until it has applied (skipped) the
	// entry of the new type its N+1 successor proposes on taking over.
	ctlBin := filepath.Join(binDir, "eddy-ctl")
	restart := fmt.Sprintf(`set -e
if [ "$EDDY_ROLL_NODE_ROLE" = leader ]; then
  i=0
  until %[1]q status --addr "$EDDY_ROLL_NODE_ADMIN" --token-file %[2]q --json | grep -q '"skipped_entries": [1-9]'; do
    i=$((i+1)); [ $i -lt 100 ] || break; sleep 0.1
  done
fi
%[1]q status --addr "$EDDY_ROLL_NODE_ADMIN" --token-file %[2]q --json > %[3]q/before-"$EDDY_ROLL_NODE_ID".json
exec %[1]q local restart --dir %[3]q --id "$EDDY_ROLL_NODE_ID" --node-bin %[4]q`, ctlBin, lc.TokenFile, lc.dir, binNext)
	gens.mark("before")
	time.Sleep(4 * time.Second) // load and ingest running before the roll: the baseline
	gens.mark("roll start")
	rollStart := time.Now()
	cmd := exec.Command(ctlBin, "roll", "--addr", strings.Join(admins, ","), "--token-file", lc.TokenFile,
		"--expect-version", rollVersionNext, "--node-timeout", "90s", "--restart-cmd", restart)
	var rollOut, rollErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &rollOut, &rollErr
	err = cmd.Run()
	rollTook := time.Since(rollStart)
	gens.mark("roll end")
	t.Logf("eddy-ctl roll (%v):\n%s%s", rollTook.Round(time.Millisecond), rollOut.String(), rollErr.String())
	if err != nil {
		t.Fatalf("eddy-ctl roll: %v", err)
	}
	time.Sleep(time.Second) // the load goes on a little after the last restart
	stopLoad()
	load.wait()
	gens.wait()
	close(stopWorld)
	<-worldDone

	// Zero failed queries.
	t.Logf("queries during the roll: %s", load.summary())
	if load.failed() > 0 || load.total() < 100 {
		t.Fatalf("query load: %s", load.summary())
	}
	// The ingest gap.
	gap, where := gens.longestGap("roll start", "roll end")
	base, _ := gens.longestGap("before", "roll start")
	t.Logf("ingest gap: the longest time without a new manifest generation during the roll was %v (%s); roll took %v, %d generations published meanwhile; in the 4 s before the roll the longest was %v (%d generations)",
		gap.Round(time.Millisecond), where, rollTook.Round(time.Millisecond), gens.published("roll start", "roll end"), base.Round(time.Millisecond), gens.published("before", "roll start"))
	fmt.Printf("e2e: rolling upgrade of 3 nodes in %v: ingest gap %v (before the roll: %v), %s\n", rollTook.Round(100*time.Millisecond), gap.Round(10*time.Millisecond), base.Round(10*time.Millisecond), load.summary())

	// Every node at N+1; the N+1 leader proposed the new type; the old
	// leader, at N, skipped it; no N+1 node skipped anything.
	var first localNode
	for _, l := range strings.Split(rollOut.String(), "\n") {
		if strings.Contains(l, "restarting (leader") {
			for _, n := range lc.Nodes {
				if strings.Contains(l, "] "+n.ID+": ") {
					first = n
				}
			}
		}
	}
	if first.ID == "" {
		t.Fatal("the roll output names no leader restart")
	}
	var before []cluster.NodeStatus
	b, err := os.ReadFile(filepath.Join(lc.dir, "before-"+first.ID+".json"))
	if err != nil || json.Unmarshal(b, &before) != nil {
		t.Fatalf("status before restarting %s: %v\n%s", first.ID, err, b)
	}
	i := slices.IndexFunc(before, func(s cluster.NodeStatus) bool { return s.ID == first.ID })
	if i < 0 || before[i].Version != rollVersionN || before[i].SkippedEntries < 1 {
		t.Fatalf("the old leader %s before its restart: %+v", first.ID, before)
	}
	t.Logf("%s at version %s applied %d skippable entries of the N+1 type as no-ops before its restart", first.ID, before[i].Version, before[i].SkippedEntries)
	proposed := 0
	for _, n := range lc.Nodes {
		b, _ := os.ReadFile(n.Log)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "proposed leader entry") && strings.Contains(l, "type=build-info") && strings.Contains(l, "skippable=true") {
				proposed++
			}
		}
	}
	if proposed == 0 {
		t.Fatal("no node logged a proposed build-info entry")
	}

	// Caught up, then every target of the model on every node.
	wantStream := fmt.Sprint(world.LastTimeUS())
	lc.waitFor(t, "the stream caught up and served everywhere", 120*time.Second, func() error {
		var gen uint64
		for i, n := range lc.Nodes {
			st, err := lc.status(n)
			if err != nil {
				return err
			}
			if st.Version != rollVersionNext {
				return fmt.Errorf("%s reports version %q", n.ID, st.Version)
			}
			if st.SkippedEntries != 0 {
				// Replayed by N+1 (no snapshot was taken: the log is far
				// below the snapshot threshold), the new type is known.
				return fmt.Errorf("%s at N+1 skipped %d entries", n.ID, st.SkippedEntries)
			}
			if p := progressOf(st); p.stream != wantStream || p.resyncs > 0 {
				return fmt.Errorf("%s: stream at %q of %s, %d resyncs pending", n.ID, p.stream, wantStream, p.resyncs)
			}
			if st.ViewGeneration != st.Generation || (i > 0 && st.Generation != gen) {
				return fmt.Errorf("%s: serving %d of %d", n.ID, st.ViewGeneration, st.Generation)
			}
			gen = st.Generation
		}
		return nil
	})
	modelTargets, links := lc.assertModel(t, world)
	t.Logf("%d accounts, %d targets, %d links compared on %d nodes at version %s: all equal to the model", accounts, modelTargets, links, len(lc.Nodes), rollVersionNext)
}

// queryLoad runs listBacklinks queries across the nodes until stopped: two
// workers through query/client, each asking for at least the newest
// generation it has seen (a restarted node that has not caught up must not
// answer from an older view: it waits, or the client moves on), and one
// running the eddy-ctl query binary.
type queryLoad struct {
	addrs   []string
	targets []string
	wg      sync.WaitGroup
	mu      struct {
		sync.Mutex
		total, ctlTotal int
		errs            []string
		failed          int
		byNode          map[string]int
		maxLatency      time.Duration
	}
}

func newQueryLoad(addrs, targets []string) *queryLoad {
	q := &queryLoad{addrs: addrs, targets: targets}
	q.mu.byNode = map[string]int{}
	return q
}

func (q *queryLoad) record(node string, took time.Duration, ctlRun bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.total++
	if ctlRun {
		q.mu.ctlTotal++
	}
	q.mu.maxLatency = max(q.mu.maxLatency, took)
	if err != nil {
		q.mu.failed++
		if len(q.mu.errs) < 10 {
			q.mu.errs = append(q.mu.errs, err.Error())
		}
		return
	}
	q.mu.byNode[node]++
}

func (q *queryLoad) start(ctx context.Context) {
	for w := 0; w < 2; w++ {
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			var seen uint64
			for i := w; ctx.Err() == nil; i += 2 {
				target := q.targets[i%len(q.targets)]
				// Each query starts at the next address, as behind a
				// round-robin name, so every node takes load.
				k := i % len(q.addrs)
				c := client.New(append(slices.Clone(q.addrs[k:]), q.addrs[:k]...)...)
				p := url.Values{"target": {target}, "limit": {"100"}, "minGeneration": {strconv.FormatUint(seen, 10)}}
				var out client.Backlinks
				start := time.Now()
				ans, err := c.Get(context.Background(), "/xrpc/blue.cerulea.backlinks.listBacklinks", p, &out)
				if err == nil && ans.Generation < seen {
					err = fmt.Errorf("%s answered from generation %d after %d was seen", ans.Node, ans.Generation, seen)
				}
				if err == nil && out.Backlinks == nil {
					err = fmt.Errorf("%s: no backlinks object", ans.Node)
				}
				seen = max(seen, ans.Generation)
				q.record(ans.Node, time.Since(start), false, err)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			target := q.targets[(i*7)%len(q.targets)]
			start := time.Now()
			k := i % len(q.addrs)
			addrs := append(slices.Clone(q.addrs[k:]), q.addrs[:k]...)
			out, err := exec.Command(filepath.Join(binDir, "eddy-ctl"), "query", target, "--json", "--addr", strings.Join(addrs, ",")).Output()
			var page struct {
				Node      string              `json:"node"`
				Backlinks map[string][]string `json:"backlinks"`
			}
			if err == nil {
				if err = json.Unmarshal(out, &page); err == nil && page.Backlinks == nil {
					err = errors.New("no backlinks object")
				}
			}
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					err = fmt.Errorf("eddy-ctl query %s: %v: %s", target, err, ee.Stderr)
				}
			}
			q.record(page.Node, time.Since(start), true, err)
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

func (q *queryLoad) wait() { q.wg.Wait() }

func (q *queryLoad) total() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.total
}

func (q *queryLoad) failed() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.failed
}

func (q *queryLoad) summary() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := fmt.Sprintf("%d queries (%d through eddy-ctl query), %d failed, slowest %v, answered by %v",
		q.mu.total, q.mu.ctlTotal, q.mu.failed, q.mu.maxLatency.Round(time.Millisecond), q.mu.byNode)
	if len(q.mu.errs) > 0 {
		s += "; first errors: " + strings.Join(q.mu.errs, " | ")
	}
	return s
}

// generationWatch polls every node's status and records when the highest
// manifest generation any node has applied went up.
type generationWatch struct {
	lc   *localCluster
	done chan struct{}
	mu   sync.Mutex
	ups  []genEvent // generation increases and marks, in time order
}

type genEvent struct {
	at   time.Time
	gen  uint64
	mark string
}

func newGenerationWatch(lc *localCluster) *generationWatch {
	return &generationWatch{lc: lc, done: make(chan struct{})}
}

func (g *generationWatch) start(ctx context.Context) {
	go func() {
		defer close(g.done)
		var top uint64
		for ctx.Err() == nil {
			for _, n := range g.lc.Nodes {
				if st, err := g.lc.status(n); err == nil && st.Generation > top {
					top = st.Generation
					g.mu.Lock()
					g.ups = append(g.ups, genEvent{at: time.Now(), gen: top})
					g.mu.Unlock()
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func (g *generationWatch) wait() { <-g.done }

func (g *generationWatch) mark(name string) {
	g.mu.Lock()
	g.ups = append(g.ups, genEvent{at: time.Now(), mark: name})
	g.mu.Unlock()
}

// window returns the times of the generation increases between two marks,
// with the marks themselves first and last.
func (g *generationWatch) window(from, to string) []genEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []genEvent
	in := false
	for _, e := range g.ups {
		switch {
		case e.mark == from:
			in = true
			out = append(out, e)
		case e.mark == to && in:
			return append(out, e)
		case in && e.mark == "":
			out = append(out, e)
		}
	}
	return out
}

func (g *generationWatch) longestGap(from, to string) (time.Duration, string) {
	w := g.window(from, to)
	var gap time.Duration
	where := ""
	for i := 1; i < len(w); i++ {
		if d := w[i].at.Sub(w[i-1].at); d > gap {
			gap = d
			where = fmt.Sprintf("from %s to %s", genLabel(w[i-1]), genLabel(w[i]))
		}
	}
	return gap, where
}

func (g *generationWatch) published(from, to string) int {
	n := 0
	for _, e := range g.window(from, to) {
		if e.mark == "" {
			n++
		}
	}
	return n
}

func genLabel(e genEvent) string {
	if e.mark != "" {
		return e.mark
	}
	return fmt.Sprintf("generation %d", e.gen)
}
