package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/eddy-backlinks/eddy/lsm"
)

// check compares the DB's counts and first pages with the workload's own
// bookkeeping of live links.
func (b *bench) check(ctx context.Context, targets []int32) error {
	wl := b.wl
	for _, t := range targets {
		id := wl.Targets[t].ID
		n, _, err := b.db.Count(ctx, id, lsm.Filter{})
		if err != nil {
			return err
		}
		if want := wl.LiveCount(t); n != uint64(want) {
			return fmt.Errorf("target %d (%s): Count %d, the workload has %d live links", t, wl.Targets[t].Text, n, want)
		}
		r, err := b.db.Backlinks(ctx, lsm.Query{Target: id, Limit: queryLimit})
		if err != nil {
			return err
		}
		want := wl.Expected(t, queryLimit)
		if !slices.Equal(r.Links, want) {
			return fmt.Errorf("target %d (%s): first page of %d links differs from the workload's %d", t, wl.Targets[t].Text, len(r.Links), len(want))
		}
		if (r.Next != nil) != (wl.LiveCount(t) > queryLimit) {
			return fmt.Errorf("target %d: next cursor %v with %d live links", t, r.Next, wl.LiveCount(t))
		}
	}
	b.logf("model check: %d targets agree", len(targets))
	return nil
}
