package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/hashicorp/go-hclog"
	dto "github.com/prometheus/client_model/go"
)

func TestParsePLCFlag(t *testing.T) {
	if d, err := ParsePLCFlag("off"); d != nil || err != nil {
		t.Fatalf("off: %v, %v", d, err)
	}
	d, err := ParsePLCFlag("https://plc.directory/")
	if err != nil || d.URL != "https://plc.directory" || d.Name() != "plc:https://plc.directory" {
		t.Fatalf("url: %+v, %v", d, err)
	}
	for _, bad := range []string{"", "on", "plc.directory", "ftp://x", "https://", "https://x/?a=b"} {
		if _, err := ParsePLCFlag(bad); err == nil {
			t.Errorf("--plc %q accepted", bad)
		}
	}
}

// plcProxy is a PLC directory in front of the simulated one: it serves
// the operations up to a cutoff only (the directory "has not sequenced"
// the rest yet), can hang every request, and inserts bad lines.
type plcProxy struct {
	t        *testing.T
	upstream string
	srv      *httptest.Server

	mu      sync.Mutex
	cutoff  int64
	hang    chan struct{}      // non-nil: requests wait for it
	garbage map[int64][]string // bad lines served before seq k
	didOf   map[int64]string   // the DID served in seq k's line
}

func newPLCProxy(t *testing.T, upstream string, cutoff int64) *plcProxy {
	p := &plcProxy{t: t, upstream: upstream, cutoff: cutoff, garbage: map[int64][]string{}, didOf: map[int64]string{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *plcProxy) set(f func(p *plcProxy)) {
	p.mu.Lock()
	f(p)
	p.mu.Unlock()
}

func (p *plcProxy) serve(rw http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	hang, cutoff := p.hang, p.cutoff
	garbage, didOf := p.garbage, p.didOf
	p.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
			return
		}
	}
	resp, err := http.Get(p.upstream + r.URL.RequestURI())
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		rw.WriteHeader(resp.StatusCode)
		rw.Write(body)
		return
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct{ Seq int64 }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			p.t.Errorf("upstream line: %v", err)
			return
		}
		if l.Seq > cutoff {
			break
		}
		for _, g := range garbage[l.Seq] {
			out.WriteString(g + "\n")
		}
		line := sc.Bytes()
		if d, ok := didOf[l.Seq]; ok {
			var m map[string]any
			json.Unmarshal(line, &m)
			m["did"] = d
			line, _ = json.Marshal(m)
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	rw.Write(out.Bytes())
}

// plcWriter starts a writer with a PLC follower on a one-node cluster.
func plcWriter(t testing.TB, ctx context.Context, dir *PLCDirectory) (*Writer, *cluster.Node, objstore.Store, *lsm.Catalog) {
	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := lsm.NewCatalog(t.TempDir(), store)
	w, err := NewWriter(ctx, Config{Node: node, Store: store, Catalog: cat, PLCDirectory: dir, MemtableBytes: 1 << 20,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	return w, node, store, cat
}

func genesisSeqs(w *simnet.World) map[string]uint64 {
	out := map[string]uint64{}
	for _, a := range w.Accounts() {
		if a.PLCSeq > 0 {
			out[a.DID] = uint64(a.PLCSeq)
		}
	}
	return out
}

// The follower pages through /export exactly by seq, skips and counts bad
// lines, and the writer's wait: a DID the directory has sequenced but the
// follower not yet read makes the writer wait for the next poll, then is
// inline; one the directory never has is outlined after the next poll
// (not after the bound); a directory that does not answer makes the
// writer wait the whole bound, then outline. Flushed, the map answers on a
// fresh node's view.
// (Over 120 lines: one scenario: the directory followed, paged, waited on.)
func TestPLCFollowerAndWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	world := simnet.NewWorld(simnet.Config{Seed: 5, Accounts: 120})
	world.Step(300) // handle changes: non-genesis operations
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	genesis := genesisSeqs(world)
	last := world.LastPLCSeq()
	if int64(len(genesis)) >= last {
		t.Fatalf("world has %d genesis ops of %d: want updates too", len(genesis), last)
	}
	// The last genesis operation is held back at first.
	var late string
	var lateSeq uint64
	for d, s := range genesis {
		if s > lateSeq {
			late, lateSeq = d, s
		}
	}
	// One genesis line names a malformed DID: that account stays unknown.
	var mangled string
	for d, s := range genesis {
		if s > 10 && d != late {
			mangled = d
			break
		}
	}
	proxy := newPLCProxy(t, sim.PLCURL(), int64(lateSeq)-1)
	proxy.set(func(p *plcProxy) {
		p.garbage[3] = []string{`{"not json`, `{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","seq":2,"operation":{"prev":null}}`}
		p.garbage[10] = []string{strings.Repeat("x", plcLineBytesMax+10), `{"type":"sequenced_op","operation":{"prev":null}}`}
		p.didOf[int64(genesis[mangled])] = "did:plc:abc"
	})
	delete(genesis, mangled)
	dir := &PLCDirectory{URL: proxy.srv.URL, PageSize: 7, PollInterval: time.Hour, Wait: 3 * time.Second}
	w, node, store, _ := plcWriter(t, ctx, dir)
	done := make(chan error, 1)
	go func() { done <- w.plc.run(ctx) }()
	if !w.plc.waitReady(ctx) {
		t.Fatal("follower never reached the head")
	}
	for d, s := range genesis {
		if d == late {
			continue
		}
		got, ok, err := w.plc.m.SeqOf(ctx, d)
		if err != nil || !ok || got != s {
			t.Fatalf("%s: %d %v %v, want %d", d, got, ok, err, s)
		}
	}
	if _, ok, err := w.plc.m.SeqOf(ctx, mangled); ok || err != nil {
		t.Fatalf("%s was served with a malformed DID, yet known (%v)", mangled, err)
	}
	for reason, want := range map[string]float64{"plc_bad_json": 1, "plc_bad_seq": 2, "plc_line_too_long": 1, "plc_bad_did": 1} {
		var mv dto.Metric
		if err := w.metrics.Skipped.WithLabelValues(dir.Name(), reason).Write(&mv); err != nil {
			t.Fatal(err)
		}
		if n := mv.GetCounter().GetValue(); n != want {
			t.Errorf("skipped %s: %v, want %v", reason, n, want)
		}
	}
	// The directory has sequenced the held-back operation, but answers
	// slowly: the writer waits for the follower's next poll.
	slow := make(chan struct{})
	proxy.set(func(p *plcProxy) { p.cutoff, p.hang = last, slow })
	go func() {
		time.Sleep(200 * time.Millisecond)
		proxy.set(func(p *plcProxy) { p.hang = nil })
		close(slow)
	}()
	start := time.Now()
	w.mu.Lock() // as Apply encodes: under the writer's lock, which the follower must not need
	v, err := w.codec.DID(late, true)
	w.mu.Unlock()
	took := time.Since(start)
	if err != nil || v != lateSeq {
		t.Fatalf("late DID encoded %x, %v; want inline %d", v, err, lateSeq)
	}
	if took < 150*time.Millisecond || took >= dir.Wait {
		t.Fatalf("late DID took %v: want the wait to end when the directory had it", took)
	}
	// A did:plc the directory never has: outlined after one more poll.
	var id lsm.PLCID
	rand.Read(id[:])
	start = time.Now()
	v, err = w.codec.DID(id.String(), true)
	if took := time.Since(start); err != nil || v&link.OutlinedBit == 0 || took >= dir.Wait {
		t.Fatalf("unknown DID: %x, %v after %v; want outlined before the bound", v, err, took)
	}
	// Once outlined it stays outlined, and does not wait again.
	start = time.Now()
	if v2, err := w.codec.DID(id.String(), true); err != nil || v2 != v || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("second encoding %x, %v after %v", v2, err, time.Since(start))
	}
	// A directory that does not answer: the wait is bounded.
	hang := make(chan struct{})
	proxy.set(func(p *plcProxy) { p.hang = hang })
	rand.Read(id[:])
	start = time.Now()
	v, err = w.codec.DID(id.String(), true)
	took = time.Since(start)
	close(hang)
	if err != nil || v&link.OutlinedBit == 0 || took < dir.Wait || took > dir.Wait+2*time.Second {
		t.Fatalf("hung directory: %x, %v after %v; want outlined after the bound %v", v, err, took, dir.Wait)
	}
	// A target's DID never waits: one the map does not know is written
	// under its hash (which queries read too), though the directory hangs;
	// a record naming many made-up DIDs held the writer a wait for each.
	hang = make(chan struct{})
	proxy.set(func(p *plcProxy) { p.hang = hang })
	start = time.Now()
	for range 20 {
		rand.Read(id[:])
		tg, err := link.ParseTarget(id.String())
		if err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		k := w.codec.TargetKey(&tg)
		w.mu.Unlock()
		if k.Collection != link.CollectionHashed {
			t.Fatalf("a target of an unknown did:plc written as %+v, want its hash", k)
		}
	}
	took = time.Since(start)
	close(hang)
	if took >= dir.Wait {
		t.Fatalf("20 targets of unknown did:plc took %v with the directory hung: the writer waited for it", took)
	}
	tg, _ := link.ParseTarget(late) // known: its number, without a wait
	w.mu.Lock()
	k := w.codec.TargetKey(&tg)
	w.mu.Unlock()
	if k != link.RepoID(lateSeq) {
		t.Fatalf("a target of a known did:plc written as %+v, want its number %d", k, lateSeq)
	}

	// Publish: the tables and the cursor in one entry; a fresh node's view
	// answers both ways.
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if c := node.FSM.Cursor(dir.Name()); c != fmt.Sprint(last) {
		t.Fatalf("committed cursor %q, want %d", c, last)
	}
	m := node.FSM.Manifest()
	if len(m.RunsOf(lsm.TreePLCDID)) == 0 || len(m.RunsOf(lsm.TreePLCSeq)) == 0 {
		t.Fatalf("no PLC runs in the manifest: %+v", m.Runs)
	}
	view, err := lsm.OpenView(ctx, lsm.NewCatalog(t.TempDir(), store), m)
	if err != nil {
		t.Fatal(err)
	}
	fresh := lsm.NewPLCMap(lsm.NewReader(store, nil), lsm.Views(func() *lsm.View { return view }), 8)
	for d, s := range genesis {
		got, ok, err := fresh.SeqOf(ctx, d)
		if err != nil || !ok || got != s {
			t.Fatalf("fresh %s: %d %v %v, want %d", d, got, ok, err, s)
		}
		back, ok, err := fresh.DIDOf(ctx, s)
		if err != nil || !ok || back != d {
			t.Fatalf("fresh %d: %s %v %v, want %s", s, back, ok, err, d)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
