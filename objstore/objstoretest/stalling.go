package objstoretest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/objstore"
)

// Stalling is a real store whose reads (Get, GetRange) of keys under
// prefix wait, while it is stalled, until their context ends: a bucket
// that stopped answering, for tests of what bounds a read's wait.
type Stalling struct {
	objstore.Store
	prefix  string
	bound   time.Duration
	stalled atomic.Bool
	reads   atomic.Int64
	once    sync.Once
	waiting chan struct{}
}

// NewStalling wraps s: reads of keys under prefix ("" every key) stall
// while Stall(true) holds. A stalled read waits for its context to end, or
// bound to pass when bound > 0 (then it reads), so that a test of a
// missing cancellation fails instead of hanging.
func NewStalling(s objstore.Store, prefix string, bound time.Duration) *Stalling {
	return &Stalling{Store: s, prefix: prefix, bound: bound, waiting: make(chan struct{})}
}

// Stall starts (true) or ends (false) the stall of later reads.
func (s *Stalling) Stall(on bool) { s.stalled.Store(on) }

// Reads is how many reads of keys under the prefix the store saw.
func (s *Stalling) Reads() int64 { return s.reads.Load() }

// Waiting is closed when the first read stalls.
func (s *Stalling) Waiting() <-chan struct{} { return s.waiting }

func (s *Stalling) wait(ctx context.Context, key string) error {
	if !strings.HasPrefix(key, s.prefix) {
		return nil
	}
	s.reads.Add(1)
	if !s.stalled.Load() {
		return nil
	}
	s.once.Do(func() { close(s.waiting) })
	var timeout <-chan time.Time
	if s.bound > 0 {
		t := time.NewTimer(s.bound)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return nil
	}
}

func (s *Stalling) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.wait(ctx, key); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, key)
}

func (s *Stalling) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := s.wait(ctx, key); err != nil {
		return nil, err
	}
	return s.Store.GetRange(ctx, key, off, n)
}
