//go:build race

package lsm

// raceEnabled: the race detector is on (sync.Pool then drops what it is
// given at random, so a pooled decoder allocates).
const raceEnabled = true
