package objstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// GuardProbeKey is the key a Guard's probe asks the size of: an object
// that never exists, so a healthy store answers ErrNotFound at once.
const GuardProbeKey = "health/probe"

// GuardFailures is how many probes in a row must fail before a Guard
// calls its store down.
const GuardFailures = 3

// Guard is a Store that knows whether its store answers. Its Probe (the
// node calls it every second or so) asks the store for the size of an
// object that does not exist; after GuardFailures failed probes in a row
// the store is down, and the Guard answers reads (Get, GetRange, Size,
// List) at once with an error wrapping ErrUnavailable instead of sending
// them, until a probe succeeds again. So while the bucket is unreachable
// a query that needs it fails in microseconds with an error a server can
// turn into 503 Retry-After, rather than waiting out the client's retries
// (seconds) to fail the same way. Writes (Put, Delete) always go through:
// their callers retry and report on their own.
type Guard struct {
	Store

	mu struct {
		sync.Mutex
		failing   int       // probes failed in a row
		downSince time.Time // zero while up
		lastErr   error
		up        chan struct{} // closed by the probe that finds the store up again (WhenUp); nil while up
		answered  bool          // the last probe was answered (Answering)
	}
}

// Answering reports whether the last probe was answered: false before the
// first, and after any failed one (a node that says its store answers it
// must have seen it do so, not merely not yet called it down).
func (g *Guard) Answering() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.answered
}

// closedChan is WhenUp's answer while the store is up.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// WhenUp returns a channel closed once the store is up: at once while it
// is, else by the first probe that finds it answering again (a write path
// waiting out a backoff starts again then, not seconds later).
func (g *Guard) WhenUp() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.downSince.IsZero() {
		return closedChan
	}
	if g.mu.up == nil {
		g.mu.up = make(chan struct{})
	}
	return g.mu.up
}

// NewGuard guards s; it starts up.
func NewGuard(s Store) *Guard { return &Guard{Store: s} }

// Probe asks the store once, allowing it timeout to answer, and records
// the answer; it returns the probe's error (nil when the store answered,
// even "not found"). A store that does not answer within timeout failed
// the probe; a probe that ctx ended (the caller stopping) does not count.
func (g *Guard) Probe(ctx context.Context, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	_, err := g.Store.Size(pctx, GuardProbeKey)
	cancel()
	if err == nil || errors.Is(err, ErrNotFound) {
		g.mu.Lock()
		g.mu.failing, g.mu.downSince, g.mu.lastErr, g.mu.answered = 0, time.Time{}, nil, true
		if g.mu.up != nil {
			close(g.mu.up)
			g.mu.up = nil
		}
		g.mu.Unlock()
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.failing++
	g.mu.lastErr, g.mu.answered = err, false
	if g.mu.failing >= GuardFailures && g.mu.downSince.IsZero() {
		g.mu.downSince = time.Now()
	}
	return err
}

// Down reports whether the store is down, since when, and the last
// probe's error.
func (g *Guard) Down() (down bool, since time.Time, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.mu.downSince.IsZero(), g.mu.downSince, g.mu.lastErr
}

// refuse returns the error reads get while the store is down, or nil.
func (g *Guard) refuse(op, key string) error {
	down, since, err := g.Down()
	if !down {
		return nil
	}
	return fmt.Errorf("objstore: %s %q: %w: unreachable for %v (last probe: %v)", op, key, ErrUnavailable, time.Since(since).Round(time.Millisecond), err)
}

// Get implements Store.
func (g *Guard) Get(ctx context.Context, key string) ([]byte, error) {
	if err := g.refuse("get", key); err != nil {
		return nil, err
	}
	return g.Store.Get(ctx, key)
}

// GetRange implements Store.
func (g *Guard) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := g.refuse("get range", key); err != nil {
		return nil, err
	}
	return g.Store.GetRange(ctx, key, off, n)
}

// Size implements Store.
func (g *Guard) Size(ctx context.Context, key string) (int64, error) {
	if err := g.refuse("size", key); err != nil {
		return 0, err
	}
	return g.Store.Size(ctx, key)
}

// List implements Store.
func (g *Guard) List(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	if err := g.refuse("list", prefix); err != nil {
		return err
	}
	return g.Store.List(ctx, prefix, fn)
}
