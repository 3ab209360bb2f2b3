package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// qtarget is a queried target and its number of live links.
type qtarget struct {
	id   link.RecordID
	live int
}

// memQueryTargets turns the in-memory workload's target indexes into
// qtargets.
func (b *bench) memQueryTargets(ts []int32) []qtarget {
	out := make([]qtarget, len(ts))
	for i, t := range ts {
		out[i] = qtarget{b.wl.Targets[t].ID, b.wl.LiveCount(t)}
	}
	return out
}

// queries times the query set warm (every frame in the cache), then every
// distinct target of it and the mega target cold, counting GETs.
func (b *bench) queries(ctx context.Context, targets []qtarget, mega qtarget) error {
	res := b.res
	res.Queries = len(targets)
	distinct := map[qtarget]bool{}
	var links float64
	for _, t := range targets {
		distinct[t] = true
		links += float64(t.live)
	}
	res.QueryTargets = len(distinct)
	res.QueryLinksMean = links / float64(len(targets))
	if err := b.warmQueries(ctx, targets); err != nil {
		return err
	}
	return b.coldQueries(ctx, distinct, mega)
}

// warmQueries runs the query set once to fill the frame cache, then again
// timed: latency and the process's CPU time per query.
func (b *bench) warmQueries(ctx context.Context, targets []qtarget) error {
	db, res := b.db, b.res
	run := func(t qtarget) (*lsm.Result, error) {
		return db.Backlinks(ctx, lsm.Query{Target: t.id, Limit: queryLimit})
	}
	// Warm the cache, then measure.
	for _, t := range targets {
		if _, err := run(t); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, len(targets))
	cpu := make([]time.Duration, len(targets))
	var total time.Duration
	quiesceGC()
	if err := b.profileStart("query"); err != nil {
		return err
	}
	warm0 := b.counting.Snapshot()
	min0, maj0 := pageFaults()
	for i, t := range targets {
		c0, t0 := cpuTime(), time.Now()
		r, err := run(t)
		lat[i], cpu[i] = time.Since(t0), cpuTime()-c0
		if err != nil {
			return err
		}
		total += lat[i]
		if len(r.Links) != min(queryLimit, t.live) {
			return fmt.Errorf("target %v: %d links, want %d", t.id, len(r.Links), min(queryLimit, t.live))
		}
	}
	b.profileStop("query")
	min1, maj1 := pageFaults()
	res.QueryMinorFaults, res.QueryMajorFaults = min1-min0, maj1-maj0
	warm := b.counting.Snapshot().Sub(warm0)
	res.WarmGETs = warm.Get.Requests + warm.GetRange.Requests
	slices.Sort(lat)
	slices.Sort(cpu)
	res.QueryCPUP50us, res.QueryCPUP99us = percentile(cpu, 0.5), percentile(cpu, 0.99)
	res.QueryP50us, res.QueryP90us, res.QueryP99us = percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99)
	res.QueryMaxUs = percentile(lat, 1)
	res.QueryMeanUs = float64(total) / float64(len(lat)) / float64(time.Microsecond)
	b.logf("warm queries: p50 %.0fµs p99 %.0fµs (CPU time: p50 %.0fµs p99 %.0fµs) over %d queries of %d targets (mean %.0f links); page faults %d minor, %d major",
		res.QueryP50us, res.QueryP99us, res.QueryCPUP50us, res.QueryCPUP99us, len(targets), res.QueryTargets, res.QueryLinksMean, res.QueryMinorFaults, res.QueryMajorFaults)
	return nil
}

// coldQueries runs every distinct target (and the mega target) once, with
// an empty frame cache (table metas are local, as on a node).
func (b *bench) coldQueries(ctx context.Context, distinct map[qtarget]bool, mega qtarget) error {
	db, res := b.db, b.res
	quiesceGC()
	if err := b.profileStart("cold"); err != nil {
		return err
	}
	defer b.profileStop("cold")
	cold := make([]qtarget, 0, len(distinct)+1)
	for t := range distinct {
		cold = append(cold, t)
	}
	slices.SortFunc(cold, func(a, b qtarget) int { return a.id.Compare(b.id) })
	cold = append(cold, mega)
	var coldLat []time.Duration
	var gets int64
	for _, t := range cold {
		r := lsm.NewReader(b.counting, lsm.NewFrameCache(0))
		s0 := b.counting.Snapshot()
		t0 := time.Now()
		qr, err := r.Backlinks(ctx, db.View(), lsm.Query{Target: t.id, Limit: queryLimit})
		d := time.Since(t0)
		if err != nil {
			return err
		}
		res.Round1GETsMax = max(res.Round1GETsMax, qr.Stats.Round1GETs)
		res.Round2GETsMax = max(res.Round2GETsMax, qr.Stats.Round2GETs)
		res.RoundTripsMax = max(res.RoundTripsMax, roundTrips(&qr.Stats))
		s := b.counting.Snapshot().Sub(s0)
		g := s.Get.Requests + s.GetRange.Requests
		gets += g
		if g > res.GetsPerQueryMax {
			res.GetsPerQueryMax = g
			res.GetsMaxTarget = t.live
		}
		if t == mega {
			res.MegaPage100ColdGs = g
		} else {
			coldLat = append(coldLat, d)
		}
	}
	slices.Sort(coldLat)
	res.ColdQueries = len(cold)
	res.GetsPerQueryMean = float64(gets) / float64(len(cold))
	res.ColdQueryP50us, res.ColdQueryP99us = percentile(coldLat, 0.5), percentile(coldLat, 0.99)
	b.logf("cold queries: at most %d GETs (mean %.2f), p50 %.0fµs p99 %.0fµs", res.GetsPerQueryMax, res.GetsPerQueryMean, res.ColdQueryP50us, res.ColdQueryP99us)
	return nil
}

// roundTrips is how many serial waves of requests to the store a query
// made: round one if it read frames, then each pass of round two that
// did.
func roundTrips(st *lsm.Stats) int {
	trips := 0
	if st.Round1GETs > 0 {
		trips++
	}
	if st.Round2GETs > 0 {
		trips += st.Round2Passes
	}
	return trips
}
