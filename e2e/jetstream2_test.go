package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/jetstream/segment"
	"github.com/gorilla/websocket"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/internal/jetstreamtest"
)

// jetstreamServer is a running Jetstream v2 server (internal/jetstreamtest)
// with what these tests ask of it besides.
type jetstreamServer struct{ *jetstreamtest.Server }

// startJetstream runs the server on the simulated network's relay and PLC
// directory until its archive is sealed.
func startJetstream(t *testing.T, sim *simnet.Net) *jetstreamServer {
	t.Helper()
	return &jetstreamServer{jetstreamtest.Start(t, sim.RelayURL(), sim.PLCURL())}
}

// segmentBlocks downloads a sealed segment of the server and returns its
// blocks' places in the file.
func (js *jetstreamServer) segmentBlocks(t *testing.T, name string) []segment.BlockInfo {
	t.Helper()
	resp, err := http.Get("http://" + js.Addr + "/xrpc/network.bsky.jetstream.getSegment?name=" + url.QueryEscape(name))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("getSegment %s: %s, %v", name, resp.Status, err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := segment.Open(segment.ReaderConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.Blocks()
}

// v1URL is the server's v1 websocket.
func (js *jetstreamServer) v1URL() string { return "ws://" + js.Addr + "/subscribe" }

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
// commits the server's numeric cursor with its host and time
// ("<seq>@<host>:<time_us>")
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

	stepDone := stepInBackground(world, 20, 150, 150*time.Millisecond)
	lc.killLeaders(t, rand.New(rand.NewPCG(5, 6)), 3)
	<-stepDone
	seq := js.seqOfLast(t, world)
	start := time.Now()
	lc.waitCaughtUp(t, "backfill done, the v1 stream at the server's last seq, every node serving it", 3*time.Minute,
		ingestProgress{streamPrefix: fmt.Sprintf("%d@%s:", seq, js.Addr)}, nil)
	t.Logf("caught up %v after the world stopped, at the server's seq %d", time.Since(start).Round(time.Millisecond), seq)
	targets, links := lc.assertModel(t, world)
	t.Logf("%d targets, %d links compared on %d nodes: all equal to the model", targets, links, len(lc.Nodes))
	fmt.Printf("e2e: Jetstream v1 client on the Jetstream v2 server, 3 leader SIGKILLs: cursor %d@<host>:<time_us>, %d links on %d nodes equal to the model\n", seq, links, len(lc.Nodes))
}

// jsProxy stands between Eddy and the Jetstream server: it passes
// everything through (the live websocket too), but can hold each archive
// download (getSegment, getBlock) for a while, so that a kill lands in the
// archive phase, and damage the next ones: a body cut short, or one byte
// flipped (the client's xxh3 check must refuse both).
type jsProxy struct {
	srv   *httptest.Server
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	delay time.Duration
	harm  []string // the next archive downloads' damage, in order: "truncate", "flip"
	done  map[string]int
	seen  int // archive downloads
	// wholeSegs: getSegment requests (a plan from the start of a segment;
	// a plan from inside one fetches blocks)
	wholeSegs int
	logf      func(format string, args ...any)
	// flipAt: the segment file offset a "flip" of a getSegment answer
	// damages (set before the downloads start).
	flipAt int64
}

func newJSProxy(t *testing.T, target string) *jsProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &jsProxy{proxy: httputil.NewSingleHostReverseProxy(u), done: map[string]int{}, logf: t.Logf}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *jsProxy) set(delay time.Duration, harm ...string) {
	p.mu.Lock()
	p.delay, p.harm = delay, append(p.harm, harm...)
	p.mu.Unlock()
}

func (p *jsProxy) stats() (downloads int, harmed map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen, maps.Clone(p.done)
}

func (p *jsProxy) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, ".getZstdDictionary") {
		// Not a zstd dictionary: the client must refuse it and follow the
		// live stream uncompressed.
		p.mu.Lock()
		p.done["dictionary"]++
		p.mu.Unlock()
		rw.Header().Set("Content-Type", "application/octet-stream")
		rw.Write(bytes.Repeat([]byte("not a dictionary "), 64))
		return
	}
	archive := strings.HasSuffix(r.URL.Path, ".getSegment") || strings.HasSuffix(r.URL.Path, ".getBlock")
	if !archive {
		p.proxy.ServeHTTP(rw, r)
		return
	}
	p.mu.Lock()
	p.seen++
	if strings.HasSuffix(r.URL.Path, ".getSegment") {
		p.wholeSegs++
	}
	delay, harm := p.delay, ""
	if len(p.harm) > 0 {
		harm, p.harm = p.harm[0], p.harm[1:]
		p.done[harm]++
	}
	p.mu.Unlock()
	time.Sleep(delay)
	if harm != "" && p.logf != nil {
		p.logf("proxy: %s of %s (Range %q)", harm, r.URL.RequestURI(), r.Header.Get("Range"))
	}
	if harm == "" {
		p.proxy.ServeHTTP(rw, r)
		return
	}
	rec := httptest.NewRecorder()
	p.proxy.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	switch harm {
	case "truncate":
		// The connection drops halfway through the body.
		for k, v := range rec.Header() {
			rw.Header()[k] = v
		}
		rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
		rw.WriteHeader(rec.Code)
		rw.Write(body[:len(body)/2])
		rw.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	case "flip":
		// A byte of compressed block data: at p.flipAt in the segment file
		// (a getSegment body starts at its range's first byte), the middle
		// of a getBlock body (one block's zstd frame). Each block is a
		// zstd frame with a content checksum; the file's own xxh3 covers
		// its metadata (header, block index, filters), which a replay does
		// not read.
		off := len(body) / 2
		if strings.HasSuffix(r.URL.Path, ".getSegment") {
			var first int
			fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-", &first)
			off = int(p.flipAt) - first
			if off < 0 || off >= len(body) {
				off = len(body) / 2
			}
		}
		if off >= 0 {
			body = bytes.Clone(body)
			body[off] ^= 0x40
		}
	}
	for k, v := range rec.Header() {
		if k != "Content-Length" {
			rw.Header()[k] = v
		}
	}
	rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
	rw.WriteHeader(rec.Code)
	rw.Write(body)
}

// seqOf is the seq of a Jetstream v2 source's cursor ("<seq>@<host>"), 0
// for none.
func seqOf(cursor string) int64 {
	seq, _, _ := strings.Cut(cursor, "@")
	n, _ := strconv.ParseInt(seq, 10, 64)
	return n
}

// TestJetstream2ArchiveThenLive: a three-node cluster whose history
// comes from a real Jetstream v2 server (jetstream2+http://…) backfills
// from its archive of the simulated network and then follows its live
// stream. The leader is SIGKILLed once in the middle of the archive (the
// downloads held back by a proxy so the archive phase lasts; its
// successor resumes from the committed seq) and once during the live
// phase; two archive downloads are damaged: one with a byte flipped in a
// block (the block's checksum refuses it; counted as archive_error, and
// Eddy plans again from the last event it applied), one cut off halfway
// (counted as archive_cut; the client fetches it again); and the zstd
// dictionary of the live stream is not one (the client refuses it,
// counted as client_warning, and follows uncompressed). At the end every node equals the simulated network's model for
// every target, and the damaged data was never written.
func TestJetstream2ArchiveThenLive(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 43, Accounts: 150, Verifiable: true, WebPercent: -1})
	world.Step(10000) // history: in the server's archive (two blocks of its segment)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	js := startJetstream(t, sim)
	segs, err := js.ListSegments()
	if err != nil {
		t.Fatal(err)
	}
	tip := segs[len(segs)-1].MaxSeq
	blocks := js.segmentBlocks(t, segs[0].Name)
	if len(segs) != 1 || len(blocks) < 2 {
		t.Fatalf("the archive: %d segments, %d blocks in the first; the test damages the second block of one segment", len(segs), len(blocks))
	}
	// Events the archive does not hold yet (the server's active segment):
	// the live stream delivers them after the cut-over.
	world.Step(500)

	px := newJSProxy(t, "http://"+js.Addr)
	px.flipAt = int64(blocks[1].Offset) + 8 + 20
	px.set(1500*time.Millisecond, "flip", "truncate")
	// Accounts active again are fetched from their PDS (the archive holds
	// no records of an account that was inactive when the server crawled):
	// a backfill source that crawls nothing else.
	resync := "backfill+" + sim.RelayURL() + "?plc=" + url.QueryEscape(sim.PLCURL()) + "&resync_only=true"
	lc := up(t, "--flush-interval", "300ms", "--source", "jetstream2+"+px.srv.URL, "--source", resync)

	// 1. The archive phase, every download held back 1.5 s. The first
	// download's second block has a byte flipped: its zstd checksum fails,
	// the client reports it, Eddy counts it (archive_error) with the first
	// block's events applied, and plans again from the last of them (the
	// rest of the segment, block by block). The next download is cut off
	// halfway: counted (archive_cut), the client fetches it again. The
	// leader dies while that is held back: its committed cursor is inside
	// the archive, where the next leader resumes.
	var counted map[string]float64
	var cursor int64
	lc.waitFor(t, "a damaged block and a cut download counted by the leader, its cursor inside the archive", time.Minute, func() error {
		lead, err := lc.leader(nil)
		if err != nil {
			return err
		}
		counted = skipped(t, lead, "jetstream2")
		st, err := lc.status(lead)
		if err != nil {
			return err
		}
		cursor = seqOf(st.Cursors["jetstream2"])
		if counted["archive_cut"] < 1 || counted["archive_error"] < 1 || cursor <= 0 {
			return fmt.Errorf("counted: %v; committed cursor %d", counted, cursor)
		}
		return nil
	})
	px.mu.Lock()
	segsBefore := px.wholeSegs
	px.mu.Unlock()
	lead := lc.killLeader(t)
	t.Logf("kill 1 (archive phase, sealed tip %d): SIGKILLed leader %s; committed cursor %d", tip, lead.ID, cursor)
	if cursor >= tip {
		t.Fatalf("the archive phase was over before the kill: cursor %d, sealed tip %d", cursor, tip)
	}
	px.set(0)
	lc.waitFor(t, "the archive read past its sealed tip", 2*time.Minute, func() error {
		st, err := lc.status(lc.Nodes[0])
		if err != nil {
			return err
		}
		if c := seqOf(st.Cursors["jetstream2"]); c <= tip {
			return fmt.Errorf("cursor %q, sealed tip %d", st.Cursors["jetstream2"], tip)
		}
		return nil
	})

	// The successor resumed inside the segment, from the committed seq:
	// blocks, not the whole segment again.
	px.mu.Lock()
	segsAfter := px.wholeSegs
	px.mu.Unlock()
	if segsAfter != segsBefore {
		t.Fatalf("the successor downloaded the whole segment again (%d getSegment requests, %d before the kill): it did not resume from seq %d", segsAfter, segsBefore, cursor)
	}

	// 2. The live phase: the world goes on, the leader dies once more.
	stepDone := stepInBackground(world, 20, 100, 150*time.Millisecond)
	time.Sleep(1200 * time.Millisecond)
	lead = lc.killLeader(t)
	t.Logf("kill 2 (live phase): SIGKILLed leader %s (restarted)", lead.ID)
	<-stepDone

	seq := js.seqOfLast(t, world)
	start := time.Now()
	lc.waitCaughtUp(t, "the Jetstream v2 stream at the server's last seq, every node serving it", 3*time.Minute,
		ingestProgress{stream: fmt.Sprintf("%d@%s", seq, strings.TrimPrefix(px.srv.URL, "http://"))}, nil)
	t.Logf("caught up %v after the world stopped, at the server's seq %d", time.Since(start).Round(time.Millisecond), seq)
	targets, links := lc.assertModel(t, world)

	// The same world through the relay: one node on its firehose and a
	// backfill of every repository (which starts once the firehose has
	// committed a position: the world takes a few more steps), then every
	// target answers the same links on it as on the Jetstream v2 cluster.
	backfill := "backfill+" + sim.RelayURL() + "?plc=" + url.QueryEscape(sim.PLCURL())
	relay := up(t, "--nodes", "1", "--flush-interval", "300ms", "--source", "firehose+"+sim.FirehoseURL(), "--source", backfill)
	time.Sleep(time.Second)
	world.Step(30)
	seq = js.seqOfLast(t, world)
	lc.waitCaughtUp(t, "the Jetstream v2 cluster at the server's last seq again", time.Minute,
		ingestProgress{stream: fmt.Sprintf("%d@%s", seq, strings.TrimPrefix(px.srv.URL, "http://"))}, nil)
	relay.waitCaughtUp(t, "the relay-fed node: backfill done, the firehose at the relay's last seq", 3*time.Minute,
		ingestProgress{stream: fmt.Sprint(world.LastSeq())}, nil)
	lc.assertModel(t, world)
	same := 0
	for target := range world.LiveLinks() {
		a, b := nodeLinks(t, relay.Nodes[0], target), nodeLinks(t, lc.Nodes[0], target)
		if !slices.Equal(a, b) {
			t.Fatalf("target %s: %d links through the relay, %d through Jetstream v2\n relay %v\n jetstream2 %v", target, len(a), len(b), a, b)
		}
		same += len(a)
	}
	t.Logf("the same world through the relay's firehose and a backfill: %d links, equal on every target", same)
	downloads, harmed := px.stats()
	lead, err = lc.leader(nil)
	if err != nil {
		t.Fatal(err)
	}
	warned := skipped(t, lead, "jetstream2")["client_warning"]
	t.Logf("%d targets, %d links compared on %d nodes: all equal to the model; %d archive downloads, damaged %v, counted by the first leader %v; the last leader refused the dictionary and counted %v client warnings",
		targets, links, len(lc.Nodes), downloads, harmed, counted, warned)
	if harmed["truncate"] != 1 || harmed["flip"] != 1 || harmed["dictionary"] < 1 || warned < 1 {
		t.Fatalf("damaged downloads: %v; client warnings on the leader: %v", harmed, warned)
	}
	fmt.Printf("e2e: Jetstream v2 archive then live, leader SIGKILLed in each phase, a cut and a corrupt download and a bad dictionary refused: %d links on %d nodes equal to the model\n", links, len(lc.Nodes))
}

// TestJetstream2ResyncFromArchive: with no source that fetches
// repositories from their PDS, an account active again is read back from
// the Jetstream v2 server (its archive, then its live stream up to the
// reactivation) and written whole at one stamp. Every node equals the
// model for every source whose account was active when the server
// crawled; an account inactive then is not in the archive (the server
// neither crawls it nor fetches it when it comes back), and the test
// leaves its records out on both sides.
func TestJetstream2ResyncFromArchive(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 43, Accounts: 150, Verifiable: true, WebPercent: -1})
	world.Step(4000)
	notCrawled := map[string]bool{}
	for _, a := range world.Accounts() {
		if !a.Active() {
			notCrawled[a.DID] = true
		}
	}
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	js := startJetstream(t, sim)
	lc := up(t, "--flush-interval", "300ms", "--source", "jetstream2+http://"+js.Addr)
	<-stepInBackground(world, 20, 150, 100*time.Millisecond)
	seq := js.seqOfLast(t, world)
	lc.waitCaughtUp(t, "the Jetstream v2 stream at the server's last seq, every node serving it", 3*time.Minute,
		ingestProgress{stream: fmt.Sprintf("%d@%s", seq, js.Addr), noBackfill: true}, nil)

	crawled := func(ls []string) []string {
		var out []string
		for _, l := range ls {
			did := strings.SplitN(strings.TrimPrefix(l, "at://"), "/", 2)[0]
			if !notCrawled[did] {
				out = append(out, l)
			}
		}
		return out
	}
	links := 0
	for target, refs := range world.LiveLinks() {
		var want []string
		for _, l := range refs {
			want = append(want, l.Source+" "+l.Path)
		}
		want = crawled(want)
		slices.Sort(want)
		for _, n := range lc.Nodes {
			have := crawled(nodeLinks(t, n, target))
			if !slices.Equal(have, want) {
				t.Fatalf("%s target %s: %d links, model %d (accounts not crawled left out)\n have %v\n want %v", n.ID, target, len(have), len(want), have, want)
			}
			links += len(want)
		}
	}
	lead, err := lc.leader(nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := scrapeMetrics(lead.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	readBack, _ := family(m, "eddy_ingest_events_total", `source="jetstream2"`, `kind="repo"`)
	t.Logf("%d links compared on %d nodes (%d accounts not crawled left out); %v repositories read back from the archive by the leader", links, len(lc.Nodes), len(notCrawled), readBack)
	if readBack < 1 {
		t.Fatal("no account came back active: the test read no repository back")
	}
}
