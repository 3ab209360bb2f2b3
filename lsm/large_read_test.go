package lsm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
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
