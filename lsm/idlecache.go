package lsm

import (
	"sync"
	"time"
)

// idleCache keeps one value holding scratch memory (a sort's, a merge's
// buffer, a merge's table writers) for its next user, and lets it go after
// sortCacheIdle without one. The users come every few seconds, and fresh
// memory costs a page fault every 4 KiB: on the 2-vCPU VM of the
// measurements, faulting in 160 MB took longer than the sort it was for.
// (A sync.Pool would not do: it is emptied by every other GC.)
type idleCache[T any] struct {
	mu    sync.Mutex
	v     T
	timer *time.Timer
}

// take returns the value kept (the zero value if none) and keeps none.
func (c *idleCache[T]) take() T {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.v
	var zero T
	c.v = zero
	return v
}

// keep keeps v instead of the value kept if better(kept, v) (the zero
// value when none is kept), and starts the idle time again.
func (c *idleCache[T]) keep(v T, better func(kept, v T) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if better(c.v, v) {
		c.v = v
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(sortCacheIdle, func() {
			c.mu.Lock()
			var zero T
			c.v = zero
			c.mu.Unlock()
		})
	} else {
		c.timer.Reset(sortCacheIdle)
	}
}
