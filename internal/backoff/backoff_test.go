package backoff

import (
	"math"
	"slices"
	"testing"
	"time"
)

// waits returns the first n waits of p from a reset.
func waits(p Policy, n int) []time.Duration {
	var out []time.Duration
	d := time.Duration(0)
	for range n {
		d = p.Next(d)
		out = append(out, d)
	}
	return out
}

func TestNext(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		name string
		p    Policy
		want []time.Duration
	}{
		// the sources' reconnects and the backfill's restarts (ingest)
		{"ingest", Policy{500 * ms, 30 * time.Second}, []time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		// the write path's restarts while leading (ingest.Supervisor)
		{"write path", Policy{time.Second, 30 * time.Second}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		// eddy-node --join
		{"join", Policy{200 * ms, 5 * time.Second}, []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}},
		// eddy-ctl's admin calls while no leader is known
		{"ctl", Policy{200 * ms, 2 * time.Second}, []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2 * time.Second, 2 * time.Second}},
	} {
		if got := waits(c.p, len(c.want)); !slices.Equal(got, c.want) {
			t.Errorf("%s: waits %v, want %v", c.name, got, c.want)
		}
	}
}

// The write path's old formula, min(30s, 1s << min(failures-1, 5)),
// gives the same waits as Next from a reset.
func TestNextMatchesShiftFormula(t *testing.T) {
	p := Policy{time.Second, 30 * time.Second}
	d := time.Duration(0)
	for failures := 1; failures <= 20; failures++ {
		d = p.Next(d)
		if want := min(30*time.Second, time.Second<<min(failures-1, 5)); d != want {
			t.Fatalf("failure %d: wait %v, want %v", failures, d, want)
		}
	}
}

// A wait past Max (a policy changed, a caller's own value) comes back to
// Max, and doubling never overflows.
func TestNextBounds(t *testing.T) {
	p := Policy{time.Second, 30 * time.Second}
	if got := p.Next(time.Hour); got != 30*time.Second {
		t.Errorf("after an hour: %v", got)
	}
	huge := Policy{time.Second, math.MaxInt64}
	if got := huge.Next(math.MaxInt64/2 + 1); got != math.MaxInt64 {
		t.Errorf("near the overflow: %v", got)
	}
	if got := p.Next(-time.Second); got != time.Second {
		t.Errorf("after a negative wait: %v", got)
	}
}
