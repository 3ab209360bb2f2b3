package ingest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/syntax"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/ipfs/go-cid"
	"github.com/prometheus/client_golang/prometheus"
)

// presentRepos is a Backfiller whose repositories are at the revisions
// it is given (the network's present): each Resync asks the writer, as
// Backfill's does, and reports what came of it on done ("<did> held" or
// "<did> written"); a DID in gate waits for the test before it is
// judged.
type presentRepos struct {
	mu    sync.Mutex
	rev   map[string]string
	gate  map[string]chan struct{}
	calls map[string]int // Resyncs begun, by DID
	done  chan string
}

func newPresentRepos() *presentRepos {
	return &presentRepos{rev: map[string]string{}, gate: map[string]chan struct{}{}, calls: map[string]int{}, done: make(chan string, 100)}
}

// begun is the Resyncs of did begun so far.
func (p *presentRepos) begun(did string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[did]
}

func (p *presentRepos) Name() string { return "backfill:present" }
func (p *presentRepos) Live() bool   { return false }
func (p *presentRepos) Ingest(ctx context.Context, w *Writer, cursor string) error {
	<-ctx.Done()
	return nil
}

func (p *presentRepos) Resync(ctx context.Context, w *Writer, did string) error {
	stamp, err := w.ReserveStamp(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	rev, gate := p.rev[did], p.gate[did]
	p.calls[did]++
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done(): // a test that failed before it opened the gate
			return ctx.Err()
		}
	}
	if !w.ResyncReady(did, rev) {
		p.done <- did + " held"
		return fmt.Errorf("%s: %w", did, ErrResyncHeld)
	}
	if err := w.ApplyRepo(ctx, p.Name(), did, stamp, nil); err != nil {
		return err
	}
	p.done <- did + " written"
	return nil
}

// at is a repository at a revision of time t.
func (p *presentRepos) at(did string, t time.Time) {
	p.mu.Lock()
	p.rev[did] = syntax.NewTID(t.UnixMicro(), 7).String()
	p.mu.Unlock()
}

// expect waits for the next outcome and checks it is want.
func (p *presentRepos) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-p.done:
		if got != want {
			t.Fatalf("resync: %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("resync: nothing after 10 s, want %s", want)
	}
}

// expectNone checks that no resync is judged for a while.
func (p *presentRepos) expectNone(t *testing.T) {
	t.Helper()
	select {
	case got := <-p.done:
		t.Fatalf("resync: %s, want none", got)
	case <-time.After(300 * time.Millisecond):
	}
}

// jsAccount is a Jetstream account event at t.
func jsAccount(t *testing.T, t0 time.Time, did string, active bool) event.Op {
	t.Helper()
	a := map[string]any{"did": did, "active": active, "seq": 1}
	if !active {
		a["status"] = "deactivated"
	}
	return jsEvent(t, map[string]any{"did": did, "time_us": t0.UnixMicro(), "kind": "account", "account": a})
}

// resyncFixture is a writer, its resync loop on a presentRepos, and
// ways to apply events and read what was published.
type resyncFixture struct {
	t     *testing.T
	ctx   context.Context
	w     *Writer
	repos *presentRepos
	reg   *prometheus.Registry
	t0    time.Time
}

func newResyncFixture(t *testing.T) *resyncFixture {
	ctx, cancel := context.WithCancel(context.Background())
	w, _, _, reg := testWriterOf(t, 1<<20)
	repos := newPresentRepos()
	w.resyncer.Store(true) // as the runner does with a backfill source among its sources
	var wg sync.WaitGroup
	wg.Go(func() { (&Runner{}).resyncLoop(ctx, w, repos) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &resyncFixture{t: t, ctx: ctx, w: w, repos: repos, reg: reg, t0: time.Date(2026, 7, 4, 14, 38, 8, 0, time.UTC)}
}

// apply applies op from the stream "jetstream".
func (f *resyncFixture) apply(op event.Op) {
	f.t.Helper()
	if err := f.w.Apply(f.ctx, "jetstream", fmt.Sprint(op.Seq), &op); err != nil {
		f.t.Fatal(err)
	}
}

// commit is a commit op of another account at t0+d: the stream moves on.
func (f *resyncFixture) commit(d time.Duration) event.Op {
	return jsCommit(f.t, f.t0.Add(d).UnixMicro(), "did:plc:cccccccccccccccccccccccc", "create", "app.bsky.feed.like", "3mptbyplj5d2a",
		map[string]any{"subject": strongRef("at://did:plc:dddddddddddddddddddddddd/app.bsky.feed.post/3mptbyplj5d2b"), "createdAt": "2026-07-04T14:38:08.999Z"})
}

// marker checks the replicated marker of did's resync once flushed ("":
// none), waiting a while for it (a resync written clears it after its
// outcome is reported).
func (f *resyncFixture) marker(did, want, what string) {
	f.t.Helper()
	var got string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := f.w.Flush(f.ctx); err != nil {
			f.t.Fatal(err)
		}
		if got = f.w.cfg.Node.FSM.Cursor(ResyncPrefix + did); got == want || time.Now().After(end) {
			break
		}
	}
	if got != want {
		f.t.Fatalf("%s: marker %q, want %q", what, got, want)
	}
}

func (f *resyncFixture) metrics(deferred, cancelled float64) {
	f.t.Helper()
	v := metricstest.Values(f.t, f.reg)
	if v["eddy_ingest_resyncs_deferred_total"] != deferred || v["eddy_ingest_resyncs_cancelled_total"] != cancelled {
		f.t.Fatalf("resyncs deferred %v, cancelled %v; want %v, %v", v["eddy_ingest_resyncs_deferred_total"], v["eddy_ingest_resyncs_cancelled_total"], deferred, cancelled)
	}
}

// A stream catching up (its events a minute older than the repositories
// fetched): a reactivation's resync is held while the repository is
// ahead of the stream, its marker kept; the account's deactivation cancels
// it and clears the marker; a repository not ahead (no commit since) is
// written at once; once the stream reaches the held one's revision it is
// fetched again and written. (Without the hold, the repository's present
// records went in at the reactivation, and the stream's deactivation and
// next reactivation took them out and back: docs/reliability.md, "The
// outage".)
func TestResyncWaitsForItsStream(t *testing.T) {
	f := newResyncFixture(t)
	const a, b = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	f.repos.at(a, f.t0.Add(time.Minute)) // a committed after the stream's position
	f.repos.at(b, f.t0.Add(-time.Hour))  // b has not committed for an hour
	f.apply(f.commit(0))

	f.apply(jsAccount(t, f.t0.Add(time.Second), a, true))
	f.repos.expect(t, a+" held")
	f.metrics(1, 0)
	f.marker(a, "pending", "held")

	f.apply(jsAccount(t, f.t0.Add(2*time.Second), a, false))
	f.metrics(1, 1)
	f.marker(a, "", "cancelled")
	f.repos.expectNone(t)

	f.apply(jsAccount(t, f.t0.Add(3*time.Second), a, true))
	f.repos.expect(t, a+" held")
	f.metrics(2, 1)
	f.marker(a, "pending", "held again")

	f.apply(jsAccount(t, f.t0.Add(4*time.Second), b, true))
	f.repos.expect(t, b+" written")
	f.marker(b, "", "written")

	f.apply(f.commit(30 * time.Second)) // half way: still behind
	f.repos.expectNone(t)
	f.apply(f.commit(time.Minute - 500*time.Millisecond)) // within the slack
	f.repos.expect(t, a+" written")
	f.marker(a, "", "written at last")
	f.metrics(2, 1)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if n := len(f.w.mu.resyncs) + len(f.w.mu.resync.deferred) + len(f.w.mu.resync.revoked); n != 0 {
		t.Fatalf("%d requests, deferred or revoked entries left", n)
	}
}

// A resync being fetched when its account is deactivated is cancelled
// when the writer judges it (its marker cleared); a previous term's
// resync is held against the stream once it has a position, and before
// that until the write path has been idle; a stream that stops lets go of
// the resyncs waiting for it.
func TestResyncHeldCancelledAndLetGo(t *testing.T) {
	f := newResyncFixture(t)
	const (
		a = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
		d = "did:plc:dddddddddddddddddddddddd"
		e = "did:plc:eeeeeeeeeeeeeeeeeeeeeeee"
		r = "did:plc:rrrrrrrrrrrrrrrrrrrrrrrr"
	)
	// A previous term's marker, no stream position yet: held, then let go
	// once idle (nothing to replay).
	f.repos.at(e, f.t0.Add(time.Hour))
	f.w.queueUnfinished(e)
	f.repos.expect(t, e+" held")
	f.w.releaseUnplaced(false)
	f.repos.expectNone(t)
	f.w.releaseUnplaced(true)
	f.repos.expect(t, e+" written")

	// In flight when the account goes.
	gate := make(chan struct{})
	f.repos.mu.Lock()
	f.repos.gate[a] = gate
	f.repos.mu.Unlock()
	f.repos.at(a, f.t0)
	f.apply(jsAccount(t, f.t0.Add(time.Second), a, true))
	f.apply(jsAccount(t, f.t0.Add(2*time.Second), a, false))
	close(gate)
	f.repos.expect(t, a+" held")
	f.metrics(1, 1)
	f.marker(a, "", "cancelled in flight")

	// A previous term's marker, the stream at t0+2s: held until the
	// stream is within the slack of the repository.
	f.repos.at(d, f.t0.Add(10*time.Second))
	f.w.queueUnfinished(d)
	f.repos.expect(t, d+" held")
	f.apply(f.commit(5 * time.Second))
	f.repos.expectNone(t)
	f.apply(f.commit(9500 * time.Millisecond))
	f.repos.expect(t, d+" written")

	// Asked by a replay that then stops: let go.
	f.repos.at(r, f.t0.Add(time.Hour))
	op := jsAccount(t, f.t0, r, true)
	if err := f.w.Apply(f.ctx, "replay", "1", &op); err != nil {
		t.Fatal(err)
	}
	f.repos.expect(t, r+" held")
	f.w.sourceStopped("replay")
	f.repos.expect(t, r+" written")
	f.metrics(3, 1)
	f.marker(r, "", "let go")
}

// A repository that stays ahead of its stream (an account committing
// faster than a lagging stream gains on it) is held resyncHoldMax times,
// fetched again each time the stream reaches it, then written.
func TestResyncHoldsAtMostHoldMax(t *testing.T) {
	f := newResyncFixture(t)
	const x = "did:plc:xxxxxxxxxxxxxxxxxxxxxxxx"
	f.apply(f.commit(0))
	f.repos.at(x, f.t0.Add(10*time.Second))
	f.apply(jsAccount(t, f.t0.Add(time.Second), x, true))
	for i := 1; i <= resyncHoldMax; i++ {
		f.repos.expect(t, x+" held")
		f.metrics(float64(i), 0)
		f.repos.at(x, f.t0.Add(time.Duration(10*(i+1))*time.Second)) // it committed again
		f.apply(f.commit(time.Duration(10*i) * time.Second))         // the stream reaches the revision held
	}
	f.repos.expect(t, x+" written")
	f.marker(x, "", "written after the holds")
	f.metrics(resyncHoldMax, 0)
}

// Without a backfill source nothing can fetch a repository again: an
// account active again leaves no marker in the replicated state (it would
// stay for good, queued again by every term), only a count; a marker an
// earlier term left (with a backfill source) is not queued, and stays for
// a later term that has one.
func TestResyncWithoutBackfillSource(t *testing.T) {
	ctx := context.Background()
	w, node, _, reg := testWriterOf(t, 1<<20)
	t0 := time.Date(2026, 7, 4, 14, 38, 8, 0, time.UTC)
	const did, old = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	// reactivate applies an account's reactivation at t and publishes it.
	reactivate := func(did, cursor string, at time.Time) {
		t.Helper()
		op := jsAccount(t, at, did, true)
		if err := w.Apply(ctx, "jetstream", cursor, &op); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// An earlier term's marker, as a writer with a backfill source leaves it.
	w.resyncer.Store(true)
	reactivate(old, "1", t0)
	if got := node.FSM.Cursor(ResyncPrefix + old); got != "pending" {
		t.Fatalf("marker of %s: %q, want pending", old, got)
	}
	<-w.resync // its job: this test runs no resync loop
	w.resyncer.Store(false)
	(&Runner{Config: Config{Node: node}}).queueUnfinishedResyncs(w)
	reactivate(did, "2", t0.Add(time.Second))
	if got := node.FSM.Cursor(ResyncPrefix + did); got != "" {
		t.Errorf("marker of %s: %q, want none", did, got)
	}
	if got := node.FSM.Cursor(ResyncPrefix + old); got != "pending" {
		t.Errorf("the earlier term's marker of %s: %q, want it kept", old, got)
	}
	if n := metricstest.Values(t, reg)["eddy_ingest_skipped_total{reason=no_backfill_source,source=resync}"]; n != 1 {
		t.Errorf("no_backfill_source skips: %v, want 1", n)
	}
	select {
	case j := <-w.resync:
		t.Fatalf("queued %+v with nothing to fetch it", j)
	default:
	}
}

// An account a relay marks inactive for its own reasons (desynchronized,
// throttled) or for none given is still there: its links stay, counted;
// one deactivated, taken down, suspended or deleted has them revoked.
func TestInactiveAccountStatuses(t *testing.T) {
	for i, c := range []struct {
		status string
		gone   bool
	}{
		{"desynchronized", false}, {"throttled", false}, {"host-throttled", false}, {"", false},
		{"deactivated", true}, {"takendown", true}, {"suspended", true}, {"deleted", true},
	} {
		w, _, _, reg := testWriterOf(t, 1<<20)
		op := event.Op{Kind: event.KindAccount, DID: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", Status: c.status, Seq: int64(i + 1), Time: time.Now()}
		if err := w.Apply(context.Background(), "firehose", fmt.Sprintf("%d@relay", i+1), &op); err != nil {
			t.Fatal(err)
		}
		revoked := w.mu.revs.Len()
		kept := metricstest.Values(t, reg)["eddy_ingest_accounts_inactive_kept_total"]
		if c.gone && (revoked != 1 || kept != 0) || !c.gone && (revoked != 0 || kept != 1) {
			t.Errorf("status %q: %d revocations, %v counted kept; want the repository revoked: %v", c.status, revoked, kept, c.gone)
		}
	}
}

// A firehose commit whose blocks the relay left out (tooBig; a PDS lists
// no ops either) asks for a resync of the repository: its records can only
// be had from the repository itself.
func TestTooBigCommitAsksForAResync(t *testing.T) {
	ctx := context.Background()
	w, node, _, _ := testWriterOf(t, 1<<20)
	w.resyncer.Store(true)
	const did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	root, err := cid.Decode("bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza")
	if err != nil {
		t.Fatal(err)
	}
	commit := &comatproto.SyncSubscribeRepos_Commit{Repo: did, Seq: 5, Rev: "3mpsjbtci2c2q", TooBig: true, Time: "2026-07-04T14:38:08.999Z",
		Commit: lexutil.LexLink(root), Ops: []*comatproto.SyncSubscribeRepos_RepoOp{}, Blocks: []byte{}}
	var frame bytes.Buffer
	frame.Write([]byte{0xa2, 0x61, 't', 0x67, '#', 'c', 'o', 'm', 'm', 'i', 't', 0x62, 'o', 'p', 0x01}) // {"t": "#commit", "op": 1}
	if err := commit.MarshalCBOR(&frame); err != nil {
		t.Fatal(err)
	}
	var ops []event.Op
	if err := event.DecodeFrame(frame.Bytes(), func(o *event.Op) error { ops = append(ops, *o); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		if err := w.Apply(ctx, "firehose", fmt.Sprintf("%d@relay", ops[i].Seq), &ops[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := node.FSM.Cursor(ResyncPrefix + did); got != "pending" {
		t.Fatalf("marker of %s: %q, want pending (ops %+v)", did, got, ops)
	}
	if j := <-w.resync; j.did != did {
		t.Fatalf("queued %+v", j)
	}
}

// A resync whose PDS stalls holds one of the loop's resyncConcurrency
// fetches, not every account's resync behind it; one account's resyncs
// still run one at a time, and those asked while one is in flight are
// answered by one fetch after it.
func TestResyncsDoNotWaitForAStalledOne(t *testing.T) {
	f := newResyncFixture(t)
	const (
		a = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
		b = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	)
	gate := make(chan struct{})
	f.repos.mu.Lock()
	f.repos.gate[a] = gate
	f.repos.mu.Unlock()
	f.repos.at(a, f.t0)
	f.repos.at(b, f.t0)
	f.apply(jsAccount(t, f.t0.Add(time.Second), a, true))
	f.apply(jsAccount(t, f.t0.Add(2*time.Second), a, true)) // asked again while the first is in flight
	f.apply(jsAccount(t, f.t0.Add(3*time.Second), b, true))
	f.apply(jsAccount(t, f.t0.Add(4*time.Second), a, true)) // and again: one fetch after the first answers both
	f.repos.expect(t, b+" written")                         // a's PDS still stalls
	f.repos.expectNone(t)
	if n := f.repos.begun(a); n != 1 {
		t.Fatalf("%d of a's resyncs begun while its first stalls, want 1 (its second waits)", n)
	}
	close(gate)
	f.repos.expect(t, a+" written")
	f.repos.expect(t, a+" written")
	f.repos.expectNone(t)
	if n := f.repos.begun(a); n != 2 {
		t.Fatalf("%d of a's resyncs begun, want 2 (its first, and one for the two asked while it stalled)", n)
	}
	f.marker(a, "", "a's resyncs written")
	f.marker(b, "", "b's written")
}

// A Jetstream record past the JSON decoder's bound (valid: its CBOR under
// 1 MiB) is skipped as record_too_big, and its repository is fetched
// again, where its links are read from the CBOR; before, the whole event
// was refused, and an update's old links stayed live.
func TestJetstreamRecordTooBigResyncs(t *testing.T) {
	f := newResyncFixture(t)
	const a = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	f.repos.at(a, f.t0.Add(-time.Hour))
	f.apply(f.commit(0))
	msg := fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{"rev":"3mptbypluud2a","operation":"update","collection":"app.bsky.feed.post","rkey":"3mptbyplj5d2c","cid":"bafy","record":{"$type":"app.bsky.feed.post","text":"%s"}}}`,
		a, f.t0.Add(time.Second).UnixMicro(), strings.Repeat(`\u0001`, 400_000))
	op, err := event.DecodeJetstream([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	f.apply(op)
	f.repos.expect(t, a+" written")
	if v := metricstest.Values(t, f.reg)["eddy_ingest_skipped_total{reason=record_too_big,source=jetstream}"]; v != 1 {
		t.Fatalf("record_too_big skipped %v times, want 1", v)
	}
}
