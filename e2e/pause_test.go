package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// A leader paused (SIGSTOP) for 10 s while the network goes on: the other
// two elect a new leader and keep ingesting; queries through eddy-ctl
// query, the paused node listed last, all succeed meanwhile; the old
// leader, resumed, follows the new one and catches up; at the end every
// node answers exactly the model: nothing lost, nothing revived.
func TestPausedLeader(t *testing.T) {
	lc, world := simCluster(t, t.TempDir(), 16)
	world.Step(10000)
	caughtUp := func(what string, timeout time.Duration) { lc.caughtUpWith(t, world, what, timeout) }
	caughtUp("every node caught up", 2*time.Minute)

	// The world goes on while the leader is paused.
	stopStepping := keepStepping(world)
	old, err := lc.leader(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(old.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			syscall.Kill(old.PID, syscall.SIGCONT)
		}
	}()
	var newLead string
	lc.waitFor(t, "a new leader among the others", 30*time.Second, func() error {
		l, err := lc.leader(map[string]bool{old.ID: true})
		if err != nil {
			return err
		}
		if l.ID == old.ID {
			return fmt.Errorf("still %s", old.ID)
		}
		newLead = l.ID
		return nil
	})
	elected := time.Since(paused)
	// Queries meanwhile, the paused node last: none fails.
	var addrs []string
	for _, n := range lc.Nodes {
		if n.ID != old.ID {
			addrs = append(addrs, "http://"+n.HTTP)
		}
	}
	addrs = append(addrs, "http://"+old.HTTP)
	model := world.LiveLinks() // the links so far: every answer has at least these sources' targets
	targets := sampleTargets(model, 60)
	asked := 0
	for time.Since(paused) < 10*time.Second {
		for _, tg := range targets[:20] {
			out, err := ctlQuery(addrs, tg)
			asked++
			if err != nil {
				t.Fatalf("query %s with the leader paused: %v %s", tg, err, out)
			}
		}
	}
	stopStepping()
	if err := syscall.Kill(old.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	pausedFor := time.Since(paused)

	// The old leader follows; everyone catches up; the model holds.
	caughtUp("every node caught up after the pause, the old leader too", 2*time.Minute)
	model = world.LiveLinks()
	targets = sampleTargets(model, 120)
	for _, n := range lc.Nodes {
		res := ctlCompare(t, []string{"http://" + n.HTTP}, targets, model)
		if res.failed != 0 || res.short != 0 {
			t.Fatalf("%s after the pause: %d failed, %d differ from the model of %d targets (first: %s)", n.ID, res.failed, res.short, len(targets), res.firstBad)
		}
	}
	t.Logf("leader %s paused %v: %s elected after %v; %d queries meanwhile, 0 failed; %d targets equal the model on every node",
		old.ID, pausedFor.Round(time.Millisecond), newLead, elected.Round(time.Millisecond), asked, len(targets))
	fmt.Printf("e2e: leader paused %v: new leader in %v, %d queries 0 failed, every node equals the model after\n", pausedFor.Round(time.Second), elected.Round(time.Millisecond), asked)
}
