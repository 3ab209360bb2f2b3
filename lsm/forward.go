package lsm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/eddy-backlinks/eddy/link"
)

// forwardConcurrency bounds the sources Forward reads at once (each one
// round one: a ranged GET per run at most, under the reader's own bound
// on concurrent requests).
const forwardConcurrency = 16

// ForwardMax bounds the forward entries one Forward reads in all (each is
// held twice while it is judged: 2M entries, ~256 MB at most): a record
// may have up to 512 links, so 100,000 join records of getManyToManyCounts
// could otherwise hold gigabytes (a variable for the tests).
var ForwardMax int64 = 2 << 20

// Forward returns, for each source S (in the order given), the live links
// out of S, each as a normal Backlink {Target: T, Source: S, Location: L,
// SourceRev: rev}, sorted by (Target, Location). A source with no live
// forward entry gets an empty slice: by the writer's rule (forward entries
// only for records with two or more links) it has at most one live link,
// which the caller already knows (it found S through it).
//
// Round one reads each source's forward entries (the target
// link.ForwardKey(S)), forwardConcurrency sources at a time; round two
// judges them all at once by the revocations of S and of its repository
// (not of T, which the stored entry holds in its source field). More than
// ForwardMax entries in total is ErrTooBig.
func (r *Reader) Forward(ctx context.Context, v *View, sources []link.RecordID) ([][]link.Backlink, Stats, error) {
	var st Stats
	out := make([][]link.Backlink, len(sources))
	if len(sources) == 0 {
		return out, st, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Round one. Each worker keeps one scratch and copies every source's
	// candidates out of it (in the real orientation) before its next use.
	found := make([][]link.Backlink, len(sources))
	var (
		next, total atomic.Int64
		mu          sync.Mutex
		firstErr    error
		wg          sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	for range min(forwardConcurrency, len(sources)) {
		wg.Go(func() {
			s := getQueryScratch()
			defer putQueryScratch(s)
			var wst Stats
			defer func() {
				mu.Lock()
				addStats(&st, &wst)
				mu.Unlock()
			}()
			var none Filter
			for {
				i := int(next.Add(1) - 1)
				if i >= len(sources) {
					return
				}
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
				src := sources[i]
				cands, _, err := r.candidates(ctx, v, link.ForwardKey(src), &none, window{}, s, &wst)
				if err != nil {
					fail(fmt.Errorf("forward entries of %v: %w", src, err))
					return
				}
				if total.Add(int64(len(cands))) > ForwardMax {
					fail(fmt.Errorf("forward entries of %d sources: more than %d links: %w", len(sources), ForwardMax, ErrTooBig))
					return
				}
				if len(cands) == 0 {
					continue
				}
				ls := make([]link.Backlink, len(cands))
				for j := range cands {
					c := &cands[j]
					ls[j] = link.Backlink{Target: c.Source, Source: src, Location: c.Location, SourceRev: c.SourceRev}
				}
				found[i] = ls
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, st, firstErr
	}

	// Round two, once for every source's entries.
	if total.Load() == 0 {
		return out, st, nil
	}
	all := make([]link.Backlink, 0, total.Load())
	for _, ls := range found {
		all = append(all, ls...)
	}
	s := getQueryScratch()
	defer putQueryScratch(s)
	live, err := r.live(ctx, v, all, s, &st)
	if err != nil {
		return nil, st, err
	}
	// Keep the live ones in place (k never passes j); each source's links
	// stay a contiguous, sorted part of all.
	j, k := 0, 0
	for i, ls := range found {
		start := k
		for range ls {
			if live[j] {
				all[k] = all[j]
				k++
			}
			j++
		}
		out[i] = all[start:k:k]
	}
	return out, st, nil
}

// addStats adds the costs in b to a (the most GETs of a run: the larger).
func addStats(a, b *Stats) {
	a.TablesConsidered += b.TablesConsidered
	a.TablesFiltered += b.TablesFiltered
	a.Round1GETs += b.Round1GETs
	a.Round2GETs += b.Round2GETs
	a.Round2Passes += b.Round2Passes
	a.Round2Scans += b.Round2Scans
	a.Round1MaxPerRun = max(a.Round1MaxPerRun, b.Round1MaxPerRun)
	a.Candidates += b.Candidates
	a.Revoked += b.Revoked
	a.CountWindows += b.CountWindows
}
