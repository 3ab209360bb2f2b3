package ingest

import (
	"context"

	"golang.org/x/sync/semaphore"
)

// The repositories in flight share a bound on their memory. A repository
// being backfilled holds its CAR, the CAR's index and a batch of decoded
// records: about 2.7 times the CAR's bytes at its peak
// (BenchmarkBackfillRepositoryMemory, the collector kept tight). Sixteen
// fetches of the network's largest repositories (hundreds of MB each)
// would take gigabytes at once, so each takes a share of the bound,
// repoMemoryFactor times its CAR's bytes, as its CAR is read; a
// repository whose share does not fit waits (holding none: no two can
// each hold part of what the other waits for, and none waits for a host's
// slot or its next try while it holds one) until the ones in flight
// finish, in the order they asked. One larger than the whole bound takes
// all of it and runs alone. The bound is of shares: a repository waiting
// for room keeps the part of its CAR it has read (a sixth of what it
// asks: three times the buffer it doubles to), so the memory can pass the
// bound by as much.

// DefaultBackfillMemory is the default bound (&memory_mb= on a backfill
// source): a repository of up to ~170 MB of CAR runs beside others.
const DefaultBackfillMemory = 512 << 20

// repoMemoryFactor is a repository's share per byte of its CAR.
const repoMemoryFactor = 3

// repoMemory is the bound the repositories in flight share.
type repoMemory struct {
	sem *semaphore.Weighted
	max int64
}

func newRepoMemory(max int64) *repoMemory {
	return &repoMemory{sem: semaphore.NewWeighted(max), max: max}
}

// memShare is one repository's share of a repoMemory.
type memShare struct {
	m    *repoMemory
	held int64
}

// grow makes the share cover a CAR of carBytes (at most the whole
// bound). When the bound has no room, the share held is given back before
// waiting for the whole of the new one; the wait ends with ctx.
func (s *memShare) grow(ctx context.Context, carBytes int) error {
	n := min(int64(carBytes)*repoMemoryFactor, s.m.max)
	if n <= s.held {
		return nil
	}
	if s.m.sem.TryAcquire(n - s.held) {
		s.held = n
		return nil
	}
	s.release()
	if err := s.m.sem.Acquire(ctx, n); err != nil {
		return err
	}
	s.held = n
	return nil
}

// release gives the share back.
func (s *memShare) release() {
	if s.held > 0 {
		s.m.sem.Release(s.held)
		s.held = 0
	}
}
