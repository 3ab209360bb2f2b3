package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// The real Jetstream v2 server (github.com/bluesky-social/jetstream
// v0.2.0, cmd/jetstream; `make jetstream`, scripts/install-jetstream.sh)
// run against the simulated network: it crawls every repository through
// the relay (listHosts, listRepos, getRepo) into its archive, seals it,
// then follows the relay's firehose, verifying every commit (Sync 1.1:
// signatures against the DID documents, MST proofs), so the world must be
// simnet.Config.Verifiable, and without did:web (the server resolves
// did:web over https at the host itself).

const (
	envJetstreamBin     = "EDDY_JETSTREAM_BIN"
	envRequireJetstream = "EDDY_REQUIRE_JETSTREAM"
)

// jetstreamServer is a running Jetstream v2 server.
type jetstreamServer struct {
	addr string // 127.0.0.1:port: /subscribe, /xrpc/network.bsky.jetstream.*
	log  string // its log file
}

// jetstreamBinary finds the server: $EDDY_JETSTREAM_BIN, else
// GOPATH/bin/jetstream-v0.2.0. Missing, it skips the test, or fails it
// under make test (EDDY_REQUIRE_JETSTREAM=1) or CI.
func jetstreamBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv(envJetstreamBin)
	if p == "" {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err == nil {
			p = filepath.Join(filepath.SplitList(strings.TrimSpace(string(out)))[0], "bin", "jetstream-v0.2.0")
		}
	}
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		msg := fmt.Sprintf("no Jetstream v2 server at %q (make jetstream builds one)", p)
		if os.Getenv(envRequireJetstream) == "1" || os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// startJetstream starts a Jetstream v2 server on the simulated network's
// relay and PLC directory and waits until it has crawled every repository
// and sealed its archive (its archive endpoints answer once it follows
// the live stream). It stops at the end of the test.
func startJetstream(t *testing.T, sim *simnet.Net) *jetstreamServer {
	t.Helper()
	bin := jetstreamBinary(t)
	dir := t.TempDir()
	addr, debug := freeAddr(t), freeAddr(t)
	logPath := filepath.Join(dir, "jetstream.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--log-format", "text", "serve",
		"--addr", addr, "--debug-addr", debug, "--data-dir", filepath.Join(dir, "data"),
		"--relay-url", sim.RelayURL(), "--plc-url", sim.PLCURL(), "--shutdown-timeout", "5s")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = jetstreamEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	js := &jetstreamServer{addr: addr, log: logPath}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("--- jetstream log tail:\n%s", b)
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		segs, err := js.listSegments()
		if err == nil && len(segs) > 0 {
			return js
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("jetstream not serving its archive after 2 minutes (%v):\n%s", err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jetstreamEnv is the environment without JETSTREAM_* variables: the
// server refuses to start with one it does not know.
func jetstreamEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETSTREAM_") {
			env = append(env, kv)
		}
	}
	return env
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type jsSegment struct {
	Name       string `json:"name"`
	EventCount int64  `json:"eventCount"`
	MinSeq     int64  `json:"minSeq"`
	MaxSeq     int64  `json:"maxSeq"`
}

// listSegments lists the server's sealed archive segments.
func (js *jetstreamServer) listSegments() ([]jsSegment, error) {
	resp, err := http.Get("http://" + js.addr + "/xrpc/network.bsky.jetstream.listSegments")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listSegments: %s: %s", resp.Status, b)
	}
	var out struct {
		Segments []jsSegment `json:"segments"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out.Segments, nil
}

// v1URL is the server's v1 websocket.
func (js *jetstreamServer) v1URL() string { return "ws://" + js.addr + "/subscribe" }

// seqOfLast reads the server's v1 stream from its first event until the
// one that carries the world's last event, then on while more come within
// two seconds (the server may pass on more than one event for the last
// one), and returns the last seq (the v1 event's "cursor"): the position
// of a consumer that has everything.
func (js *jetstreamServer) seqOfLast(t *testing.T, world *simnet.World) int64 {
	t.Helper()
	var last []event.Op
	err := world.FirehoseFrames(world.LastSeq()-1, func(seq int64, f []byte) error {
		return event.DecodeFrame(f, func(op *event.Op) error { last = append(last, *op); return nil })
	})
	if err != nil || len(last) == 0 {
		t.Fatalf("the world's last event: %v (%d ops)", err, len(last))
	}
	want := last[len(last)-1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, js.v1URL()+"?cursor=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var seq int64
	found := false
	for {
		if found {
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		}
		_, msg, err := conn.ReadMessage()
		if err != nil {
			if found {
				return seq
			}
			t.Fatalf("reading the Jetstream v1 stream for the world's last event (%s %s rev %s seq %d): %v", want.Kind, want.DID, want.Rev, want.Seq, err)
		}
		op, err := event.DecodeJetstream(msg)
		if err != nil {
			continue
		}
		if op.Cursor <= 0 {
			t.Fatalf("the v2 server's v1 event has no cursor: %s", msg)
		}
		seq = op.Cursor
		if op.DID == want.DID && op.Kind == want.Kind &&
			((want.Kind == event.KindCommit && op.Rev == want.Rev && op.RKey == want.RKey) ||
				(want.Kind != event.KindCommit && op.RelaySeq == want.Seq)) {
			found = true
		}
	}
}

// TestJetstreamV1ClientOnV2Server: Eddy's Jetstream v1 consumer follows
// the real Jetstream v2 server's v1 /subscribe (the history comes from
// Eddy's own backfill of the PDSes, as it would with a v1 server), the
// leader SIGKILLed three times while the world goes on: the consumer
// commits the server's numeric cursor with its time ("<seq>:<time_us>")
// and resumes right after it, and every node equals the model at the end.
func TestJetstreamV1ClientOnV2Server(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 41, Accounts: 150, Verifiable: true, WebPercent: -1})
	world.Step(3000) // history: reached by the backfill (and the server's crawl)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	js := startJetstream(t, sim)
	backfill := "backfill+" + sim.RelayURL() + "?plc=" + url.QueryEscape(sim.PLCURL())
	lc := up(t, "--flush-interval", "300ms", "--source", "jetstream+"+js.v1URL(), "--source", backfill)

	r := rand.New(rand.NewPCG(5, 6))
	stepDone := make(chan struct{})
	go func() {
		defer close(stepDone)
		for i := 0; i < 20; i++ {
			world.Step(150)
			time.Sleep(150 * time.Millisecond)
		}
	}()
	for k := 0; k < 3; k++ {
		time.Sleep(time.Duration(500+r.IntN(1500)) * time.Millisecond)
		lead := lc.killLeader(t)
		t.Logf("kill %d: SIGKILLed leader %s (restarted)", k+1, lead.ID)
	}
	<-stepDone
	seq := js.seqOfLast(t, world)
	start := time.Now()
	lc.waitCaughtUp(t, "backfill done, the v1 stream at the server's last seq, every node serving it", 3*time.Minute,
		ingestProgress{stream: fmt.Sprintf("%d:", seq)}, nil)
	t.Logf("caught up %v after the world stopped, at the server's seq %d", time.Since(start).Round(time.Millisecond), seq)
	targets, links := lc.assertModel(t, world)
	t.Logf("%d targets, %d links compared on %d nodes: all equal to the model", targets, links, len(lc.Nodes))
	fmt.Printf("e2e: Jetstream v1 client on the Jetstream v2 server, 3 leader SIGKILLs: cursor %d:<time_us>, %d links on %d nodes equal to the model\n", seq, links, len(lc.Nodes))
}
