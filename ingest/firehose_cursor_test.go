package ingest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// followFirehose runs a firehose source of the simulated relay from
// cursor until it emits an operation of seq past after, and returns that
// operation's cursor and the skips by reason.
func followFirehose(t *testing.T, world *simnet.World, sim *simnet.Net, cursor string, after int64) (string, map[string]int) {
	t.Helper()
	var mu sync.Mutex
	skips := map[string]int{}
	f, err := NewFirehose(sim.FirehoseURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.OnSkip = func(reason string) { mu.Lock(); skips[reason]++; mu.Unlock() }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- f.Run(ctx, cursor, func(op *event.Op, c string) error {
			if op != nil && op.Seq > after {
				select {
				case got <- c:
				default:
				}
				cancel()
			}
			return nil
		})
	}()
	for {
		select {
		case c := <-got:
			<-done
			mu.Lock()
			defer mu.Unlock()
			return c, skips
		case err := <-done:
			// The callback hands its cursor over before it cancels, so
			// both may be ready when this select looks: the cursor wins.
			select {
			case c := <-got:
				mu.Lock()
				defer mu.Unlock()
				return c, skips
			default:
			}
			t.Fatalf("the source ended without an event past seq %d: %v", after, err)
		case <-time.After(50 * time.Millisecond):
			world.Step(5) // live events, for a source at the head
		}
	}
}

// A firehose cursor names the relay that numbered it. One of another
// relay (the source's URL changed) is not sent to this one, whose seqs
// mean other events: the source starts at this relay's head and counts
// relay_changed. A relay that answers FutureCursor for longer than
// futureCursorWait (it numbers from scratch) gets the same. An older
// build's bare seq is this relay's.
func TestFirehoseCursorOfAnotherRelay(t *testing.T) {
	world, sim := servedWorld(t, 3)
	host := urlHost(sim.FirehoseURL())
	last := world.LastSeq()

	// This relay's cursor, in either form: read from there.
	for _, c := range []string{firehoseCursor(10, host), "10"} {
		cur, skips := followFirehose(t, world, sim, c, 10)
		if cur != firehoseCursor(11, host) || len(skips) != 0 {
			t.Fatalf("from %q: first cursor %q (want %q), skips %v", c, cur, firehoseCursor(11, host), skips)
		}
	}
	// Another relay's, far ahead of this one: from this relay's head.
	cur, skips := followFirehose(t, world, sim, firehoseCursor(last+1000, "relay.elsewhere.example"), 10)
	seq, h, err := parseFirehoseCursor(cur)
	if err != nil || h != host || seq <= last || skips["relay_changed"] != 1 {
		t.Fatalf("from another relay's cursor: first cursor %q (want this relay's past %d), skips %v", cur, last, skips)
	}
	// This relay's, past its head, for longer than the wait: from its head.
	defer func(d time.Duration) { futureCursorWait = d }(futureCursorWait)
	futureCursorWait = 0
	last = world.LastSeq()
	cur, skips = followFirehose(t, world, sim, firehoseCursor(last+1_000_000, host), 10)
	if seq, h, err := parseFirehoseCursor(cur); err != nil || h != host || seq <= last || seq > last+1000 || skips["future_cursor"] != 1 {
		t.Fatalf("from a cursor past the relay's head: first cursor %q (want this relay's past %d), skips %v", cur, last, skips)
	}
	// A cursor older than the relay holds: its #info OutdatedCursor is
	// counted, and the stream goes on from the relay's oldest event.
	sim.SetFirehoseOldest(20)
	cur, skips = followFirehose(t, world, sim, firehoseCursor(5, host), 5)
	if cur != firehoseCursor(20, host) || skips["outdated_cursor"] != 1 {
		t.Fatalf("from a cursor older than the relay holds: first cursor %q (want %q), skips %v", cur, firehoseCursor(20, host), skips)
	}
	if _, _, err := parseFirehoseCursor("12@"); err == nil || !strings.Contains(err.Error(), "bad cursor") {
		t.Fatalf("a cursor with an empty host: %v", err)
	}
}
