package lsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore/objstoretest"
)

// windowedMega is a DB of two runs whose mega target (~40,000 links) a
// count reads in several windows (countWindowLinks lowered until the test
// ends, nextWindowHook cleared then).
func windowedMega(t *testing.T) (*workload.Workload, *DB) {
	t.Helper()
	wl, err := workload.Generate(workload.Config{Links: 60_000, Seed: 9, MegaLinks: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	db := countWorkloadDB(t, wl, 2, 0)
	w := countWindowLinks
	t.Cleanup(func() { countWindowLinks, nextWindowHook = w, nil })
	countWindowLinks = 16_000
	return wl, db
}

// A panic while the next window is read (on the read's own goroutine,
// while the previous window's check runs on another with the other
// scratch) is the read's error, returned only once that check is done:
// the scratches go back to the pool, where another query takes them, when
// no one uses them.
func TestWindowPanicWaitsForTheCheck(t *testing.T) {
	ctx := context.Background()
	wl, db := windowedMega(t)
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
	wl, db := windowedMega(t)
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
	_, err := r.Each(ctx, v, mega, Filter{}, func([]link.Backlink) error {
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

// A failed read of the next window cancels the previous window's check,
// still reading on its goroutine: the read ends at once with the failure.
func TestNextWindowFailureCancelsTheCheck(t *testing.T) {
	ctx := context.Background()
	wl, db := windowedMega(t)
	// Its reads of the revocation tree (the checks') held until their
	// context ends, or 10 s.
	store := objstoretest.NewStalling(db.store, "tables/revocations/", 10*time.Second)
	store.Stall(true)
	nextWindowHook = func(_ context.Context, k int) {
		if k == 1 {
			<-store.Waiting() // window 0's check is reading
			panic("a bug reading window 1")
		}
	}
	start := time.Now()
	_, err := NewReader(store, nil).Each(ctx, db.View(), wl.Targets[wl.Mega].ID, Filter{}, func([]link.Backlink) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "panicked reading window 1") {
		t.Fatalf("%v; want the panic", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the read ended after %v: window 0's check was not cancelled", took)
	}
}

// A page whose filter passes few of a popular target's links reads at most
// pageScanMax of them, in windows of at most pageWindowMax a run, and ends
// short (even empty) with a cursor at what it read; paging on finds every
// link that passes, once.
func TestFilteredPageReadsBounded(t *testing.T) {
	ctx := context.Background()
	wl, db := windowedMega(t)
	defer func(w int) { pageWindowMax = w }(pageWindowMax)
	pageWindowMax = 1_000
	mega := wl.Targets[wl.Mega].ID
	r := NewReader(db.store, nil)
	r.PageScanMax = 3_000
	pageScanMax := r.PageScanMax
	v := db.View()
	all, _, err := r.All(ctx, v, mega, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// What one window of the largest reads (the runs' smallest read,
	// windowBytesMin a run, is past pageWindowMax's frames here).
	one, err := r.Backlinks(ctx, v, Query{Target: mega, Limit: 1, Filter: Filter{DIDs: []uint64{^uint64(0) >> 2}}})
	if err != nil {
		t.Fatal(err)
	}
	window := one.Stats.Scanned
	t.Logf("a page of a filter passing nothing read frames of %d links", window)
	// Two DIDs of one link each, one near the start and one near the
	// end, and a DID with none.
	n := map[uint64]int{}
	for _, l := range all {
		n[l.Source.DID]++
	}
	first, last := uint64(0), uint64(0)
	for i, l := range all {
		if n[l.Source.DID] == 1 && i < len(all)/10 && first == 0 {
			first = l.Source.DID
		}
		if n[l.Source.DID] == 1 && i > len(all)*9/10 {
			last = l.Source.DID
		}
	}
	if first == 0 || last == 0 {
		t.Fatal("no DID of one link near either end")
	}
	for _, c := range []struct {
		name string
		dids []uint64
	}{{"few", []uint64{min(first, last), max(first, last)}}, {"none", []uint64{^uint64(0) >> 2}}} {
		var want []link.Backlink
		for _, l := range all {
			if l.Source.DID == c.dids[0] || l.Source.DID == c.dids[len(c.dids)-1] {
				want = append(want, l)
			}
		}
		q := Query{Target: mega, Limit: 5, Filter: Filter{DIDs: c.dids}}
		var got []link.Backlink
		pages, short := 0, 0
		for {
			res, err := r.Backlinks(ctx, v, q)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if res.Stats.Scanned > pageScanMax+window {
				t.Fatalf("%s: a page read frames of %d links, past %d and a window", c.name, res.Stats.Scanned, pageScanMax)
			}
			got = append(got, res.Links...)
			if res.Next == nil {
				break
			}
			if len(res.Links) < q.Limit {
				short++
			}
			q.After = res.Next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: %d links paged, want %d", c.name, len(got), len(want))
		}
		if short == 0 || pages < len(all)/(2*pageScanMax) {
			t.Fatalf("%s: %d pages, %d short: the target of %d links was read in too few", c.name, pages, short, len(all))
		}
		t.Logf("%s: %d links of %d in %d pages (%d short)", c.name, len(got), len(all), pages, short)
	}
}

// Pages of a popular target in either order give every live link once, in
// order; a reverse page merges from its window's end down and stops there,
// as a forward one does from its start (it merged the whole window: eight
// thousand links a run for a page of a hundred).
func TestPagesOfAPopularTargetBothWays(t *testing.T) {
	ctx := context.Background()
	wl, db := windowedMega(t)
	mega := wl.Targets[wl.Mega].ID
	r := NewReader(db.store, nil)
	v := db.View()
	all, _, err := r.All(ctx, v, mega, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, reverse := range []bool{false, true} {
		for _, limit := range []int{7, 100, 1000} {
			want := slices.Clone(all)
			if reverse {
				slices.Reverse(want)
			}
			var got []link.Backlink
			q := Query{Target: mega, Limit: limit, Reverse: reverse}
			most := 0
			for {
				res, err := r.Backlinks(ctx, v, q)
				if err != nil {
					t.Fatal(err)
				}
				most = max(most, res.Stats.Candidates)
				got = append(got, res.Links...)
				if res.Next == nil {
					break
				}
				q.After = res.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("reverse %v, limit %d: %d links paged, want %d", reverse, limit, len(got), len(want))
			}
			if bound := 2*(limit+limit/2+16) + 64; most > bound {
				t.Fatalf("reverse %v, limit %d: a page merged %d candidates, past %d", reverse, limit, most, bound)
			}
		}
	}
}
