package lsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore"
)

// Reads of large targets share the reader's bound: while one holds it
// (an Each whose callback waits), another large read waits and, its
// context ending, fails with ErrBusy; a small target's count and a page
// never wait; once the first read ends the second runs; without a bound
// nothing waits. The share is given back however the read ends.
func TestLargeReadMemory(t *testing.T) {
	ctx := context.Background()
	wl, err := workload.Generate(workload.Config{Links: 60_000, Seed: 9, MegaLinks: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	db := countWorkloadDB(t, wl, 2, 0) // two runs: the mega target spans many frames of each
	defer func(n, w int) { largeReadMin, countWindowLinks = n, w }(largeReadMin, countWindowLinks)
	largeReadMin, countWindowLinks = 5_000, 16_000 // several windows a large read
	mega := wl.Targets[wl.Mega].ID
	small := wl.Targets[queryBenchTargets(wl, 1)[0]].ID
	r := NewReader(db.store, nil)
	v := db.View()
	busy := func(what string) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, _, err := r.Count(c, v, mega, Filter{}); !errors.Is(err, ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: a second large count: %v, want ErrBusy", what, err)
		}
	}
	free := func(what string) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if n, _, err := r.Count(c, v, mega, Filter{}); err != nil || n != uint64(wl.LiveCount(wl.Mega)) {
			t.Fatalf("%s: a large count: %d, %v; want %d", what, n, err, wl.LiveCount(wl.Mega))
		}
	}
	// Unbounded: two at once.
	hold := func() (release func(), done chan error) {
		entered, leave := make(chan struct{}), make(chan struct{})
		done = make(chan error, 1)
		go func() {
			calls := 0
			_, err := r.Each(ctx, v, mega, Filter{}, func([]link.Backlink) error {
				if calls++; calls == 2 { // past the first window
					close(entered)
					<-leave
				}
				return nil
			})
			if calls < 3 {
				err = errors.Join(err, errors.New("the large read took fewer than three windows"))
			}
			done <- err
		}()
		<-entered
		return func() { close(leave) }, done
	}
	release, done := hold()
	free("unbounded, beside another")
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.SetLargeReadMemory(1 << 20) // less than one large read's share: one at a time
	release, done = hold()
	if bound, held, waiting := r.LargeReadStats(); bound != 1<<20 || held != 1<<20 || waiting != 0 {
		t.Fatalf("one large read holding the bound: stats %d %d %d", bound, held, waiting)
	}
	busy("bounded, beside another")
	// A server's hooks: the slot left while the read waits, taken back
	// after, whether the wait ends with the share or without it.
	var left, back int
	hooked := WithWaitHooks(ctx, WaitHooks{Leave: func() { left++ }, Back: func(context.Context) error { back++; return nil }})
	hc, hcancel := context.WithTimeout(hooked, 50*time.Millisecond)
	if _, _, err := r.Count(hc, v, mega, Filter{}); !errors.Is(err, ErrBusy) || left != 1 || back != 1 {
		t.Fatalf("a waiting read with hooks: %v, left %d, back %d; want ErrBusy, 1, 1", err, left, back)
	}
	hcancel()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, _, err := r.Count(c, v, small, Filter{}); err != nil || n == 0 {
		t.Fatalf("a small target's count beside a large read: %d, %v", n, err)
	}
	if res, err := r.Backlinks(ctx, v, Query{Target: mega, Limit: 100}); err != nil || len(res.Links) != 100 {
		t.Fatalf("a page of the large target beside a large read: %v", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, held, waiting := r.LargeReadStats(); held != 0 || waiting != 0 {
		t.Fatalf("no read: %d bytes held, %d waiting", held, waiting)
	}
	free("bounded, alone")
	// A read that fails gives its share back.
	stop := errors.New("stop")
	if _, err := r.Each(ctx, v, mega, Filter{}, func([]link.Backlink) error { return stop }); !errors.Is(err, stop) {
		t.Fatal(err)
	}
	free("bounded, after a failed read")
	// A read whose Back fails after it got its share gives the share back
	// and fails with Back's error, not ErrBusy.
	release, done = hold()
	noSlot := errors.New("no slot")
	backFails := WithWaitHooks(ctx, WaitHooks{Leave: func() {}, Back: func(context.Context) error { return noSlot }})
	failed := make(chan error, 1)
	go func() { _, _, err := r.Count(backFails, v, mega, Filter{}); failed <- err }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, _, w := r.LargeReadStats(); w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second read never waited")
		}
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-failed; !errors.Is(err, noSlot) || errors.Is(err, ErrBusy) {
		t.Fatalf("a read whose Back failed: %v, want Back's error", err)
	}
	if _, held, _ := r.LargeReadStats(); held != 0 {
		t.Fatalf("%d bytes held after a read whose Back failed", held)
	}
	free("bounded, after a read whose Back failed")
	// A panic in fn (on the goroutine of a window not the last) is the
	// read's error, not the process's end; its share is given back.
	if _, err := r.Each(ctx, v, mega, Filter{}, func([]link.Backlink) error { panic("a callback's bug") }); err == nil || !strings.Contains(err.Error(), "a callback's bug") {
		t.Fatalf("a panicking callback: %v", err)
	}
	free("bounded, after a panicking read")
	// Without hooks the read waits with what it holds; with them and
	// the share free, no hook is called.
	left, back = 0, 0
	if _, _, err := r.Count(hooked, v, mega, Filter{}); err != nil || left != 0 || back != 0 {
		t.Fatalf("a read with hooks and the share free: %v, left %d, back %d", err, left, back)
	}
	// Two may run at once under a bound that holds two shares.
	r.SetLargeReadMemory(1 << 30)
	release, done = hold()
	free("a bound of two, beside another")
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A panic while the next window is read (on the read's own goroutine,
// while the previous window's check runs on another with the other
// scratch) is the read's error, returned only once that check is done:
// the scratches go back to the pool, where another query takes them, when
// no one uses them.
func TestWindowPanicWaitsForTheCheck(t *testing.T) {
	ctx := context.Background()
	wl, err := workload.Generate(workload.Config{Links: 60_000, Seed: 9, MegaLinks: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	db := countWorkloadDB(t, wl, 2, 0)
	defer func(w int) { countWindowLinks, nextWindowHook = w, nil }(countWindowLinks)
	countWindowLinks = 16_000 // several windows
	mega := wl.Targets[wl.Mega].ID
	r := NewReader(db.store, nil)
	v := db.View()
	inFn, leave := make(chan struct{}), make(chan struct{})
	nextWindowHook = func(_ context.Context, k int) {
		if k == 1 {
			<-inFn // window 0's callback is running
			panic("a bug reading window 1")
		}
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("the read panicked: %v", p)
			}
		}()
		first := true
		_, err := r.Each(ctx, v, mega, Filter{}, func([]link.Backlink) error {
			if first {
				first = false
				close(inFn)
				<-leave
			}
			return nil
		})
		done <- err
	}()
	<-inFn
	select {
	case err := <-done:
		t.Fatalf("the read ended while window 0's callback ran: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(leave)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "panicked reading window 1") {
		t.Fatalf("a panic reading window 1: %v; want it as the read's error", err)
	}
	// The panic while window 0's check still reads (a cold reader): the
	// check, cancelled, fails for that alone; the read's error is the
	// panic, not the cancellation.
	nextWindowHook = func(_ context.Context, k int) {
		if k == 1 {
			panic("a bug reading window 1")
		}
	}
	for i := range 5 {
		cold := NewReader(db.store, nil)
		if _, err := cold.Each(ctx, v, mega, Filter{}, func([]link.Backlink) error { return nil }); err == nil || !strings.Contains(err.Error(), "panicked reading window 1") {
			t.Fatalf("try %d: a panic reading window 1 beside a cold check: %v; want the panic", i, err)
		}
	}
	nextWindowHook = nil
	if n, _, err := r.Count(ctx, v, mega, Filter{}); err != nil || n != uint64(wl.LiveCount(wl.Mega)) {
		t.Fatalf("a count after: %d, %v; want %d", n, err, wl.LiveCount(wl.Mega))
	}
}

// A window whose callback fails cancels the reads of the next window,
// which go on meanwhile on the read's own goroutine: the read ends with
// the callback's error, at once.
func TestWindowFailureCancelsTheNext(t *testing.T) {
	ctx := context.Background()
	wl, err := workload.Generate(workload.Config{Links: 60_000, Seed: 9, MegaLinks: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	db := countWorkloadDB(t, wl, 2, 0)
	defer func(w int) { countWindowLinks, nextWindowHook = w, nil }(countWindowLinks)
	countWindowLinks = 16_000 // several windows
	mega := wl.Targets[wl.Mega].ID
	r := NewReader(db.store, nil)
	v := db.View()
	failed := make(chan struct{})
	var cancelled bool
	nextWindowHook = func(wctx context.Context, k int) {
		if k != 1 {
			return
		}
		<-failed
		select {
		case <-wctx.Done():
			cancelled = true
		case <-time.After(10 * time.Second):
		}
	}
	bug := errors.New("a callback's error")
	start := time.Now()
	_, err = r.Each(ctx, v, mega, Filter{}, func([]link.Backlink) error {
		close(failed)
		return bug
	})
	if !errors.Is(err, bug) {
		t.Fatalf("a failing callback: %v; want its error", err)
	}
	if !cancelled {
		t.Fatalf("window 1 was read on after window 0's callback failed (%v)", time.Since(start))
	}
}

// heldRevocations is a real store whose reads of the revocation tree's
// tables wait, once held, until their context ends (or 10 s pass).
type heldRevocations struct {
	objstore.Store
	held    atomic.Bool
	waiting chan struct{} // closed at the first read held
	once    sync.Once
}

func (s *heldRevocations) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if s.held.Load() && strings.HasPrefix(key, "tables/revocations/") {
		s.once.Do(func() { close(s.waiting) })
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Second):
		}
	}
	return s.Store.GetRange(ctx, key, off, n)
}

// A failed read of the next window cancels the previous window's check,
// still reading on its goroutine: the read ends at once with the failure.
func TestNextWindowFailureCancelsTheCheck(t *testing.T) {
	ctx := context.Background()
	wl, err := workload.Generate(workload.Config{Links: 60_000, Seed: 9, MegaLinks: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	db := countWorkloadDB(t, wl, 2, 0)
	defer func(w int) { countWindowLinks, nextWindowHook = w, nil }(countWindowLinks)
	countWindowLinks = 16_000 // several windows
	store := &heldRevocations{Store: db.store, waiting: make(chan struct{})}
	store.held.Store(true)
	nextWindowHook = func(_ context.Context, k int) {
		if k == 1 {
			<-store.waiting // window 0's check is reading
			panic("a bug reading window 1")
		}
	}
	start := time.Now()
	_, err = NewReader(store, nil).Each(ctx, db.View(), wl.Targets[wl.Mega].ID, Filter{}, func([]link.Backlink) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "panicked reading window 1") {
		t.Fatalf("%v; want the panic", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the read ended after %v: window 0's check was not cancelled", took)
	}
}
