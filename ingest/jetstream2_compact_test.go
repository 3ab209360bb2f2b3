package ingest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	jetstream "github.com/bluesky-social/jetstream"
	"github.com/hashicorp/go-hclog"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/internal/jetstreamtest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// TestJetstream2ArchiveEndAsksFullCompaction: a Jetstream v2 archive read
// from its start is a backfill, and the first time the events applied
// reach its sealed tip the leader asks for a full compaction, which the
// write path then makes (the links tree ends in one run). A node that
// resumes from a committed cursor with no record of a read from the start
// (an upgrade: its archive read before the record existed) asks nothing
// while it applies the live events that follow.
func TestJetstream2ArchiveEndAsksFullCompaction(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 44, Accounts: 60, Verifiable: true, WebPercent: -1})
	world.Step(3000)
	sim, err := simnet.Serve(world)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	js := jetstreamtest.Start(t, sim.RelayURL(), sim.PLCURL())
	tip := js.Tip(t)

	node := oneNode(t)
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := lsm.NewCatalog(t.TempDir(), store)
	cfg := Config{Node: node, Store: store, Catalog: cat, FlushInterval: 100 * time.Millisecond, MemtableBytes: 64 << 10, GCGrace: time.Nanosecond,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})}
	run := func() (stop func()) {
		src, err := NewJetstream2("http://"+js.Addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := &Runner{Config: cfg, Sources: []Source{src}, CompactionInterval: 100 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		}
	}
	cursor := func() int64 {
		seq, _, _ := strings.Cut(node.FSM.Cursor("jetstream2"), "@")
		n, err := intCursor("jetstream2", seq)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(d); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v (cursor %d, sealed tip %d, links runs %d, pending %v)",
					what, d, cursor(), tip, len(node.FSM.Manifest().RunsOf(lsm.TreeLinks)), FullCompactionPending(node.FSM))
			}
		}
	}

	stop := run()
	waitFor("the archive read to its sealed tip", 2*time.Minute, func() bool { return cursor() >= tip })
	if node.FSM.Setting(backfillStartedKey+"jetstream2") == "" {
		t.Fatal("the read of the archive from its start was not recorded")
	}
	waitFor("the archive's end to ask for a full compaction", 30*time.Second, func() bool {
		return node.FSM.Setting(backfillCompactedKey+"jetstream2") != ""
	})
	waitFor("the full compaction made: one run of links", time.Minute, func() bool {
		return len(FullCompactionPending(node.FSM)) == 0 && len(node.FSM.Manifest().RunsOf(lsm.TreeLinks)) == 1
	})
	stop()

	// As a node upgraded long after its archive was read: neither setting.
	ctx := context.Background()
	for _, k := range []string{backfillStartedKey, backfillCompactedKey} {
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: k + "jetstream2"}); err != nil {
			t.Fatal(err)
		}
	}
	at := cursor()
	stop = run()
	defer stop()
	world.Step(300) // live events, applied past the sealed tip
	waitFor("the live events applied", time.Minute, func() bool { return cursor() > at })
	time.Sleep(500 * time.Millisecond)
	if p := FullCompactionPending(node.FSM); len(p) != 0 || node.FSM.Setting(backfillCompactedKey+"jetstream2") != "" || node.FSM.Setting(backfillStartedKey+"jetstream2") != "" {
		t.Fatalf("a node resuming from its cursor asked for a full compaction: pending %v, %s=%q, %s=%q", p,
			backfillCompactedKey, node.FSM.Setting(backfillCompactedKey+"jetstream2"), backfillStartedKey, node.FSM.Setting(backfillStartedKey+"jetstream2"))
	}
}

// TestAtArchiveEnd: the end is the sealed tip the client planned its
// sweep to, reached by the events applied; no sealed archive has none.
func TestAtArchiveEnd(t *testing.T) {
	for _, c := range []struct {
		tip   uint64
		after int64
		want  bool
	}{
		{0, 0, false}, {0, 5, false}, // nothing sealed: no end to reach
		{100, 0, false}, {100, 99, false},
		{100, 100, true}, {100, 250, true},
	} {
		if got := atArchiveEnd(jetstream.Stats{SealedTip: c.tip, ResidualGap: c.tip / 2}, c.after); got != c.want {
			t.Errorf("sealed tip %d, applied through %d: %v, want %v", c.tip, c.after, got, c.want)
		}
	}
}
