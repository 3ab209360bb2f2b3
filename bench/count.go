package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// timeCounts counts target n times on db (a whole garbage collection
// before each when quiesce), checking each answer against want, and
// returns the latencies and CPU times, sorted.
func timeCounts(ctx context.Context, db *lsm.DB, target link.RecordID, n int, want uint64, quiesce bool) (lat, cpu []time.Duration, err error) {
	for range n {
		if quiesce {
			quiesceGC()
		}
		c0, t0 := cpuTime(), time.Now()
		got, _, err := db.Count(ctx, target, lsm.Filter{})
		lat, cpu = append(lat, time.Since(t0)), append(cpu, cpuTime()-c0)
		if err != nil {
			return nil, nil, err
		}
		if got != want {
			return nil, nil, fmt.Errorf("count %d, want %d", got, want)
		}
	}
	slices.Sort(lat)
	slices.Sort(cpu)
	return lat, cpu, nil
}

// count times Count of the mega target (id, with written links of which
// live are live), warm (median of five) and cold.
func (b *bench) count(ctx context.Context, id link.RecordID, written, live int) error {
	db, res := b.db, b.res
	quiesceGC()
	if err := b.profileStart("count"); err != nil {
		return err
	}
	defer b.profileStop("count")
	res.CountTargetLinks, res.CountTargetLive = written, live

	r := lsm.NewReader(b.counting, lsm.NewFrameCache(0))
	s0 := b.counting.Snapshot()
	t0 := time.Now()
	n, st, err := r.Count(ctx, db.View(), id, lsm.Filter{})
	if err != nil {
		return err
	}
	res.CountColdMs = float64(time.Since(t0)) / float64(time.Millisecond)
	s := b.counting.Snapshot().Sub(s0)
	res.CountColdGets = s.Get.Requests + s.GetRange.Requests
	res.CountCandidates = st.Candidates
	if n != uint64(res.CountTargetLive) {
		return fmt.Errorf("cold count %d, want %d", n, res.CountTargetLive)
	}

	if _, _, err := db.Count(ctx, id, lsm.Filter{}); err != nil { // warm
		return err
	}
	lat, cpu, err := timeCounts(ctx, db, id, 5, uint64(res.CountTargetLive), false)
	if err != nil {
		return err
	}
	res.Count1MCPUMs = float64(cpu[len(cpu)/2]) / float64(time.Millisecond)
	res.Count1MMs = float64(lat[len(lat)/2]) / float64(time.Millisecond)
	res.Count1MMinMs = float64(lat[0]) / float64(time.Millisecond)

	t0 = time.Now()
	if _, err := db.Backlinks(ctx, lsm.Query{Target: id, Limit: queryLimit}); err != nil {
		return err
	}
	res.MegaPage100Ms = float64(time.Since(t0)) / float64(time.Millisecond)
	b.logf("count of the mega target (%d links, %d live): %.0f ms warm (%.0f ms CPU), %.0f ms cold (%d GETs)",
		res.CountTargetLinks, res.CountTargetLive, res.Count1MMs, res.Count1MCPUMs, res.CountColdMs, res.CountColdGets)
	return nil
}
