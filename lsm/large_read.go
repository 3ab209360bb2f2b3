package lsm

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/semaphore"
)

// Reads of large targets share a bound on their memory. A count, or an
// answer folding every link of a target (Reader.Each), reads it a window
// of about countWindowLinks links at a time, two windows in flight, about
// 250 MB for a target of millions of links (TestMeasureEachMemory); the
// query slots let sixteen run at once on a node of two cores, which
// measured 7 GB of heap for sixteen counts of a 10M-link target. A read
// whose first window plans more than largeReadMin links takes its share
// of the reader's bound (SetLargeReadMemory) before it fetches anything
// and holds it to its end; the next one waits its turn, first come first
// served, until its context ends (ErrBusy); a server gives back the
// query's execution slot while it waits (WaitHooks). A read of a small
// target, and a page, never waits.

// ErrBusy is the error of a read of a large target whose context ended
// while it waited for the memory that such reads share: the node is busy
// reading others; ask again, or ask another node.
var ErrBusy = errors.New("lsm: busy reading other large targets")

// largeReadMin is the planned links of a first window above which a read
// counts as large: its buffers outgrow the scratch pool's
// (queryScratchLinksMax, 4 MiB of candidates). A variable for the tests.
var largeReadMin = queryScratchLinksMax

// largeReadBytesPerLink is a window's memory a link planned: its
// candidate (64 bytes), its share of the frames decoded and of the
// revocation check's keys (TestMeasureEachMemory: ~250 MB for two windows
// of ~1M links, the frame cache aside).
const largeReadBytesPerLink = 128

// DefaultLargeReadMemory is a node's bound (--large-read-memory): one
// read of a target of millions of links, or several of smaller ones.
const DefaultLargeReadMemory = 256 << 20

// largeRead is one read's share of the bound, taken at its first window.
type largeRead struct {
	decided bool
	sem     *semaphore.Weighted // the one the share came from
	held    int64
}

// WaitHooks let a server give back what a query holds while its read of
// a large target waits for its share (WithWaitHooks): Leave is called
// before the wait, Back after it (with the share, or without it once the
// context ended); Back's error fails the read (wrapped as it is: not
// ErrBusy, which is the wait's). They are called from the goroutine that
// made the read, one read of a query at a time (a server that runs a
// query's reads at once serializes them).
type WaitHooks struct {
	Leave func()
	Back  func(ctx context.Context) error
}

type waitHooksKey struct{}

// WithWaitHooks returns ctx carrying h for the reads of large targets
// made with it.
func WithWaitHooks(ctx context.Context, h WaitHooks) context.Context {
	return context.WithValue(ctx, waitHooksKey{}, h)
}

// SetLargeReadMemory bounds the memory that reads of large targets hold
// at once to n bytes (<= 0: unbounded, the default). A read never takes
// more than n, so one can always run. Set it before the reader is used.
func (r *Reader) SetLargeReadMemory(n int64) {
	if n <= 0 {
		r.large, r.largeCap = nil, 0
		return
	}
	r.large, r.largeCap = semaphore.NewWeighted(n), n
}

// admitLarge decides, once a read's first window is planned (s.groups),
// whether it is large (more than largeReadMin links planned), and if so
// takes its share of the bound: two windows' worth when the window is
// full (more may follow, and the next is read while this one is
// checked), else this one's.
func (r *Reader) admitLarge(ctx context.Context, lr *largeRead, w window, s *queryScratch) error {
	if lr == nil || lr.decided {
		return nil
	}
	lr.decided = true
	if r.large == nil {
		return nil
	}
	// The target's links planned: the frames between a group's first and
	// last (which the target may share with its neighbours: a small
	// target's one or two frames a run count nothing).
	links := 0
	for i := range s.groups {
		g := &s.groups[i]
		for f := g.first + 1; f < g.last; f++ {
			links += int(g.meta.frameEntry(f).Records)
		}
	}
	if links <= largeReadMin {
		return nil
	}
	n := int64(links) * largeReadBytesPerLink
	if links >= w.want/2 {
		n *= 2
	}
	n = min(n, r.largeCap)
	sem := r.large
	if !sem.TryAcquire(n) {
		h, hooked := ctx.Value(waitHooksKey{}).(WaitHooks)
		if hooked && h.Leave != nil {
			h.Leave()
		}
		r.largeWaiting.Add(1)
		err := sem.Acquire(ctx, n)
		r.largeWaiting.Add(-1)
		if hooked && h.Back != nil {
			if berr := h.Back(ctx); berr != nil {
				if err == nil {
					sem.Release(n)
				}
				return fmt.Errorf("lsm: a read of a large target (%d links planned), after waiting for its share: %w", links, berr)
			}
		}
		if err != nil {
			return fmt.Errorf("%w (%d links planned): %w", ErrBusy, links, err)
		}
	}
	lr.sem, lr.held = sem, n
	r.largeHeld.Add(n)
	return nil
}

// releaseLarge gives back what a read took.
func (r *Reader) releaseLarge(lr *largeRead) {
	if lr.held > 0 {
		r.largeHeld.Add(-lr.held)
		lr.sem.Release(lr.held)
		lr.held = 0
	}
}

// LargeReadStats is the bound on large reads' memory (0: none), the bytes
// reads hold of it, and the reads waiting for their share.
func (r *Reader) LargeReadStats() (bound, held, waiting int64) {
	return r.largeCap, r.largeHeld.Load(), r.largeWaiting.Load()
}
