package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// The chaos checker finds each anomaly it is meant to, and nothing in a
// clean history (it runs without a cluster: the schedules' own runs only
// show it passing).
func TestChaosChecker(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ans := func(node, epoch int, gen uint64, began, done int, srcs ...string) chaosAnswer {
		return chaosAnswer{node: node, epoch: epoch, target: "T", gen: gen, sources: srcs, began: at(began), at: at(done)}
	}
	appeared := map[chaosLink]int{{"T", "a"}: 1, {"T", "b"}: 1, {"T", "c"}: 2}
	names := []string{"n1", "n2", "n3"}
	clean := []chaosAnswer{
		ans(0, 0, 5, 0, 10, "a"),
		ans(1, 0, 5, 5, 12, "a"),
		ans(0, 0, 7, 20, 30, "a", "b", "c"),
		// Overlapping queries may finish out of generation order.
		ans(2, 0, 6, 30, 90, "a", "c"),
		ans(2, 0, 8, 40, 50, "a", "b"),
		// c went and came back: the network made it live twice.
		ans(1, 0, 9, 100, 110, "a", "b", "c"),
		// A restarted process may start from an older generation.
		ans(1, 1, 8, 200, 210, "a", "b"),
	}
	if bad := historyAnomalies(clean, appeared, names); len(bad) != 0 {
		t.Fatalf("a clean history: %v", bad)
	}
	for _, tc := range []struct {
		name string
		more chaosAnswer
		want string
	}{
		{"two answers at one generation", ans(2, 0, 7, 300, 310, "a", "b"), "at generation 7: "},
		{"a process going back a generation", ans(1, 0, 7, 300, 310, "a", "b", "c"), "n2 (process 0) answered generation 7 to a query asked at 12:00:00.300, after answering 9"},
		{"a link never made", ans(0, 0, 10, 300, 310, "a", "b", "c", "z"), "answered source z, which never linked to it"},
		{"links gone at a later generation", ans(0, 0, 10, 300, 310, "b"), ""},
		{"a link back once too often", ans(0, 0, 4, 0, 1, "a", "b", "c"), "source c appeared 3 times"},
	} {
		bad := historyAnomalies(append(slices.Clone(clean), tc.more), appeared, names)
		if tc.want == "" {
			if len(bad) != 0 {
				t.Errorf("%s: %v", tc.name, bad)
			}
			continue
		}
		if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), tc.want) {
			t.Errorf("%s: found %q, want one with %q", tc.name, bad, tc.want)
		}
	}
}

// A schedule is its seed's, and the twenty of make chaos go through every
// kind of fault.
func TestChaosSchedules(t *testing.T) {
	kinds := map[string]int{}
	for seed := uint64(1); seed <= 20; seed++ {
		a, b := chaosSchedule(seed, 8), chaosSchedule(seed, 8)
		if !slices.Equal(a, b) {
			t.Fatalf("seed %d drew two schedules:\n%v\n%v", seed, a, b)
		}
		for _, f := range a {
			kinds[f.Kind]++
			if f.Store != "" {
				kinds["+store "+f.Store]++
			}
		}
	}
	for _, k := range append(slices.Clone(chaosKinds), "+store errors", "+store down") {
		if kinds[k] == 0 {
			t.Errorf("no schedule has %s: %v", k, kinds)
		}
	}
	if seeds, err := parseSeeds("1-3,7"); err != nil || !slices.Equal(seeds, []uint64{1, 2, 3, 7}) {
		t.Errorf("parseSeeds(1-3,7) = %v, %v", seeds, err)
	}
	if _, err := parseSeeds("3-1"); err == nil {
		t.Error("parseSeeds(3-1): no error")
	}
}

// The network's appearances of each link agree with its final state:
// every live link appeared at least once, and a link the network made
// live, gone and live again counts twice.
func TestChaosWorldAppearances(t *testing.T) {
	world := simnet.NewWorld(simnet.Config{Seed: 3, Accounts: 60})
	world.Step(4000)
	model := world.LiveLinks()
	targets := map[string]bool{}
	for tg := range model {
		targets[tg] = true
	}
	appeared := worldAppearances(world, targets)
	live := 0
	for tg, refs := range model {
		for _, r := range refs {
			live++
			if appeared[chaosLink{tg, r.Source}] == 0 {
				t.Fatalf("%s -> %s is live but never appeared", r.Source, tg)
			}
		}
	}
	more := 0
	for _, n := range appeared {
		if n > 1 {
			more++
		}
	}
	t.Logf("%d live links, %d links of %d targets appeared, %d more than once", live, len(appeared), len(targets), more)
	if more == 0 {
		t.Error("no link appeared twice: the world's deactivations and edits are not counted")
	}
}
