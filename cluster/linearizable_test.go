package cluster

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/eddy-backlinks/eddy/fsm"
)

// The committed clock is a compare-and-set register (a reservation names
// the clock it expects, fsm.ReserveClock), the way the manifest's
// generation is (a flush names its base): the check of one is the check of
// the other's mechanism, on a value small enough for porcupine.

// clockIn is an operation on the clock: a read, or a reservation of count
// stamps after the clock at after.
type clockIn struct {
	read         bool
	after, count uint64
}

// clockOut is its outcome: for a read, the clock; for a reservation, ok
// (the new clock in value) or stale; unknown when the caller cannot tell
// (leadership lost after the entry was appended: it may commit later).
type clockOut struct {
	unknown, ok bool
	value       uint64
}

// clockModel is the register. A reservation of unknown outcome may or may
// not have happened: both next states.
func clockModel(init uint64) porcupine.Model {
	m := &porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(uint64), input.(clockIn), output.(clockOut)
			if in.read {
				if out.value == s {
					return []any{s}
				}
				return nil
			}
			applies := s == in.after
			switch {
			case out.unknown && applies:
				return []any{s, s + in.count}
			case out.unknown:
				return []any{s}
			case out.ok && applies && out.value == s+in.count:
				return []any{s + in.count}
			case !out.ok && !applies:
				return []any{s}
			}
			return nil
		},
	}
	return m.ToModel()
}

// Clients reserve stamps and read the clock through whichever node leads,
// while the leader is crashed and restarted, or cut off from its peers,
// again and again; porcupine finds a linearization of every operation
// (reads through a barrier on the leader).
func TestClockLinearizable(t *testing.T) {
	c := newTCluster(t)
	var mu sync.Mutex // guards the nodes' node fields against the faults
	n1 := c.start("n1", true)
	c.leader(5 * time.Second)
	for _, id := range []string{"n2", "n3"} {
		n := c.start(id, false)
		if err := c.join(n1, n); err != nil {
			t.Fatal(err)
		}
	}
	l := c.leader(5 * time.Second)
	if err := l.node.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	init := l.node.FSM.Clock()
	leaderNode := func() *Node {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range c.nodes {
			if n.node != nil && n.node.IsLeader() {
				return n.node
			}
		}
		return nil
	}

	const clients = 4
	run := 8 * time.Second
	start := time.Now()
	var (
		hmu     sync.Mutex
		history []porcupine.Operation
		seen    atomic.Uint64 // the highest clock any client saw
		unknown atomic.Int64
	)
	seen.Store(init)
	record := func(id int, in clockIn, call time.Time, out clockOut) {
		ret := time.Since(start).Nanoseconds()
		if out.unknown {
			ret = math.MaxInt64 // it may take effect any time after its call
			unknown.Add(1)
		}
		hmu.Lock()
		history = append(history, porcupine.Operation{ClientId: id, Input: in, Call: call.Sub(start).Nanoseconds(), Output: out, Return: ret})
		hmu.Unlock()
		if out.value > 0 {
			for v := seen.Load(); out.value > v && !seen.CompareAndSwap(v, out.value); v = seen.Load() {
			}
		}
	}
	var wg sync.WaitGroup
	for id := range clients {
		rng := rand.New(rand.NewPCG(uint64(id), 7))
		wg.Go(func() {
			for time.Since(start) < run {
				node := leaderNode()
				if node == nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				call := time.Now()
				if rng.IntN(10) < 3 {
					if err := node.Barrier(time.Second); err != nil {
						continue // no answer: a read changes nothing
					}
					record(id, clockIn{read: true}, call, clockOut{value: node.FSM.Clock()})
					continue
				}
				// Expect the newest clock seen, or sometimes an older one
				// (a deposed leader's view): both must be judged right.
				in := clockIn{after: seen.Load(), count: 1 + uint64(rng.IntN(9))}
				if rng.IntN(5) == 0 && in.after > init {
					in.after--
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				res, err := node.Propose(ctx, fsm.TypeReserveClock, 0, fsm.ReserveClock{After: in.after, Count: in.count})
				cancel()
				switch {
				case err == nil:
					record(id, in, call, clockOut{ok: true, value: res.(uint64)})
				case errors.Is(err, fsm.ErrStale):
					record(id, in, call, clockOut{})
				case err == ErrNotLeader: // refused before Raft saw it
				default:
					record(id, in, call, clockOut{unknown: true})
				}
			}
		})
	}
	// The faults: the leader crashed (no leadership transfer) and
	// restarted, or cut off from its peers for a second.
	faults := 0
	for rng := rand.New(rand.NewPCG(9, 9)); time.Since(start) < run-time.Second; {
		time.Sleep(time.Duration(600+rng.IntN(600)) * time.Millisecond)
		var lead *tnode
		mu.Lock()
		for _, n := range c.nodes {
			if n.node != nil && n.node.IsLeader() {
				lead = n
			}
		}
		if lead == nil {
			mu.Unlock()
			continue
		}
		faults++
		if rng.IntN(2) == 0 {
			c.crash(lead)
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
			mu.Lock()
			c.start(lead.id, false)
			mu.Unlock()
			continue
		}
		mu.Unlock()
		for _, n := range c.nodes {
			if n != lead {
				lead.blocked.Store(n.id, true)
				lead.blocked.Store(n.raftAddr, true)
			}
		}
		time.Sleep(time.Second)
		lead.blocked.Clear()
	}
	wg.Wait()

	ok, reserved := 0, 0
	for _, op := range history {
		if out := op.Output.(clockOut); out.ok {
			ok++
			reserved += int(op.Input.(clockIn).count)
		}
	}
	res, info := porcupine.CheckOperationsVerbose(clockModel(init), history, time.Minute)
	t.Logf("%d operations (%d reservations succeeded, %d stamps; %d of unknown outcome), %d faults; linearizable: %v",
		len(history), ok, reserved, unknown.Load(), faults, res)
	if res != porcupine.Ok {
		if res == porcupine.Illegal {
			path := t.TempDir() + "/history.html"
			porcupine.VisualizePath(clockModel(init), info, path)
			t.Logf("the history, drawn: %s", path)
		}
		t.Fatalf("the clock's history is %v", res)
	}
	if ok < 50 || faults < 3 {
		t.Fatalf("too little happened to judge: %d reservations, %d faults", ok, faults)
	}
}

// The model refuses what a register cannot do: two reservations after one
// clock both succeeding, a read of a value never written, a stale answer to
// a reservation that should have applied.
func TestClockModelRefuses(t *testing.T) {
	op := func(id int, in clockIn, call, ret int64, out clockOut) porcupine.Operation {
		return porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret}
	}
	good := []porcupine.Operation{
		op(0, clockIn{after: 10, count: 2}, 0, 10, clockOut{ok: true, value: 12}),
		op(1, clockIn{after: 10, count: 3}, 1, 11, clockOut{}),
		op(2, clockIn{after: 12, count: 1}, 2, math.MaxInt64, clockOut{unknown: true}),
		op(3, clockIn{read: true}, 20, 21, clockOut{value: 13}),
	}
	if !porcupine.CheckOperations(clockModel(10), good) {
		t.Fatal("a linearizable history refused")
	}
	for name, bad := range map[string][]porcupine.Operation{
		"two reservations after one clock": {
			op(0, clockIn{after: 10, count: 2}, 0, 10, clockOut{ok: true, value: 12}),
			op(1, clockIn{after: 10, count: 3}, 1, 11, clockOut{ok: true, value: 13}),
		},
		"a read of a value never written": {
			op(0, clockIn{after: 10, count: 2}, 0, 10, clockOut{ok: true, value: 12}),
			op(1, clockIn{read: true}, 20, 21, clockOut{value: 11}),
		},
		"a read going back": {
			op(0, clockIn{after: 10, count: 2}, 0, 10, clockOut{ok: true, value: 12}),
			op(1, clockIn{read: true}, 20, 21, clockOut{value: 10}),
		},
		"stale where it should apply": {
			op(0, clockIn{after: 10, count: 2}, 0, 10, clockOut{}),
		},
	} {
		if porcupine.CheckOperations(clockModel(10), bad) {
			t.Errorf("%s: judged linearizable", name)
		}
	}
}
