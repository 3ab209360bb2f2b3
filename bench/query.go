package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eddy-backlinks/eddy/lsm"
)

// queries times the query set warm (every frame in the cache), then every
// distinct target of it and the mega target cold, counting GETs.
func (b *bench) queries(ctx context.Context, targets []int32) error {
	wl, res := b.wl, b.res
	res.Queries = len(targets)
	distinct := map[int32]bool{}
	var links float64
	for _, t := range targets {
		distinct[t] = true
		links += float64(wl.LiveCount(t))
	}
	res.QueryTargets = len(distinct)
	res.QueryLinksMean = links / float64(len(targets))
	if err := b.warmQueries(ctx, targets); err != nil {
		return err
	}
	return b.coldQueries(ctx, distinct)
}

// warmQueries runs the query set once to fill the frame cache, then again
// timed: latency and the process's CPU time per query.
func (b *bench) warmQueries(ctx context.Context, targets []int32) error {
	wl, db, res := b.wl, b.db, b.res
	run := func(t int32) (*lsm.Result, error) {
		return db.Backlinks(ctx, lsm.Query{Target: wl.Targets[t].ID, Limit: queryLimit})
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
	if err := b.profileStart("query"); err != nil {
		return err
	}
	warm0 := b.counting.Snapshot()
	for i, t := range targets {
		c0, t0 := cpuTime(), time.Now()
		r, err := run(t)
		lat[i], cpu[i] = time.Since(t0), cpuTime()-c0
		if err != nil {
			return err
		}
		total += lat[i]
		if len(r.Links) != min(queryLimit, wl.LiveCount(t)) {
			return fmt.Errorf("target %d: %d links, want %d", t, len(r.Links), min(queryLimit, wl.LiveCount(t)))
		}
	}
	b.profileStop("query")
	warm := b.counting.Snapshot().Sub(warm0)
	res.WarmGETs = warm.Get.Requests + warm.GetRange.Requests
	slices.Sort(lat)
	slices.Sort(cpu)
	res.QueryCPUP50us, res.QueryCPUP99us = percentile(cpu, 0.5), percentile(cpu, 0.99)
	res.QueryP50us, res.QueryP90us, res.QueryP99us = percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99)
	res.QueryMaxUs = percentile(lat, 1)
	res.QueryMeanUs = float64(total) / float64(len(lat)) / float64(time.Microsecond)
	b.logf("warm queries: p50 %.0fµs p99 %.0fµs (CPU time: p50 %.0fµs p99 %.0fµs) over %d queries of %d targets (mean %.0f links)",
		res.QueryP50us, res.QueryP99us, res.QueryCPUP50us, res.QueryCPUP99us, len(targets), res.QueryTargets, res.QueryLinksMean)
	return nil
}

// coldQueries runs every distinct target (and the mega target) once, with
// an empty frame cache (table metas are local, as on a node).
func (b *bench) coldQueries(ctx context.Context, distinct map[int32]bool) error {
	wl, db, res := b.wl, b.db, b.res
	if err := b.profileStart("cold"); err != nil {
		return err
	}
	defer b.profileStop("cold")
	cold := make([]int32, 0, len(distinct)+1)
	for t := range distinct {
		cold = append(cold, t)
	}
	slices.Sort(cold)
	cold = append(cold, wl.Mega)
	var coldLat []time.Duration
	var gets int64
	for _, t := range cold {
		r := lsm.NewReader(b.counting, lsm.NewFrameCache(0))
		s0 := b.counting.Snapshot()
		t0 := time.Now()
		qr, err := r.Backlinks(ctx, db.View(), lsm.Query{Target: wl.Targets[t].ID, Limit: queryLimit})
		d := time.Since(t0)
		if err != nil {
			return err
		}
		res.Round1GETsMax = max(res.Round1GETsMax, qr.Stats.Round1GETs)
		res.Round2GETsMax = max(res.Round2GETsMax, qr.Stats.Round2GETs)
		trips := 0
		if qr.Stats.Round1GETs > 0 {
			trips++
		}
		if qr.Stats.Round2GETs > 0 {
			trips += qr.Stats.Round2Passes
		}
		res.RoundTripsMax = max(res.RoundTripsMax, trips)
		s := b.counting.Snapshot().Sub(s0)
		g := s.Get.Requests + s.GetRange.Requests
		gets += g
		if g > res.GetsPerQueryMax {
			res.GetsPerQueryMax = g
			res.GetsMaxTarget = wl.LiveCount(t)
		}
		if t == wl.Mega {
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
