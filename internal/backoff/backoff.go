// Package backoff is the one retry backoff of the tree: waits that start
// at a minimum and double after each failure, up to a maximum.
//
// Every retry loop keeps its own last wait and asks Next for the one to
// use now; a loop that resets (a connection that lasted, a run that was
// healthy) sets its last wait back to 0.
package backoff

import "time"

// Policy is an exponential backoff: the first wait is Min, each later one
// twice the one before, never more than Max.
type Policy struct {
	Min, Max time.Duration
}

// Next returns the wait after the wait prev (0: no wait yet, so Min):
// twice prev, at least Min and at most Max.
func (p Policy) Next(prev time.Duration) time.Duration {
	if prev > p.Max/2 { // 2*prev would pass Max (or overflow)
		return p.Max
	}
	return min(p.Max, max(p.Min, 2*prev))
}
