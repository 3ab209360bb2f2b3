package workload

// The streaming workload (Stream): the network's history written as a
// backfill, then a live tail, in memory O(accounts + targets' pools'
// sizes in bits + sample), never O(links). See NewStream.

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// The history a backfill replays: from the network's opening to its end
// (fixed, so a seed gives the same bytes whenever it runs); the live tail
// starts at HistoryEnd.
var (
	HistoryStart = time.Date(2023, 2, 1, 0, 0, 0, 0, time.UTC)
	HistoryEnd   = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
)

// growth is the network's account count over time (millions), an
// approximation of Bluesky's public milestones (invite-only beta in 2023;
// ~3M when sign-ups opened in February 2024; ~10M in September 2024; ~20M
// after the November 2024 surge; ~30M in early 2025; ~40M by late 2025).
// Accounts are created along it, and posts (the targets) too: the
// network's volume follows its size. Linear between knots.
var growth = []struct {
	t time.Time
	m float64
}{
	{HistoryStart, 0},
	{time.Date(2023, 9, 15, 0, 0, 0, 0, time.UTC), 1},
	{time.Date(2024, 2, 6, 0, 0, 0, 0, time.UTC), 3},
	{time.Date(2024, 8, 1, 0, 0, 0, 0, time.UTC), 6},
	{time.Date(2024, 9, 15, 0, 0, 0, 0, time.UTC), 10},
	{time.Date(2024, 11, 10, 0, 0, 0, 0, time.UTC), 15},
	{time.Date(2024, 11, 25, 0, 0, 0, 0, time.UTC), 21},
	{time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC), 30},
	{time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC), 35},
	{time.Date(2025, 11, 1, 0, 0, 0, 0, time.UTC), 40},
	{HistoryEnd, 44},
}

// timeline maps a fraction of the network's growth to a time and back.
type timeline struct {
	us []float64 // knot times, µs
	f  []float64 // knot fractions in [0, 1]
}

// accountsTimeline: accounts are created along the growth curve.
func accountsTimeline() *timeline {
	tl := &timeline{}
	last := growth[len(growth)-1].m
	for _, g := range growth {
		tl.us = append(tl.us, float64(g.t.UnixMicro()))
		tl.f = append(tl.f, g.m/last)
	}
	return tl
}

// activityTimeline: records (and so the posts links point to) are written
// at a rate proportional to the accounts existing then (the integral of the
// growth curve, sampled daily).
func activityTimeline() *timeline {
	acc := accountsTimeline()
	t0, t1 := acc.us[0], acc.us[len(acc.us)-1]
	const day = float64(24 * time.Hour / time.Microsecond)
	tl := &timeline{us: []float64{t0}, f: []float64{0}}
	sum := 0.0
	for t := t0; t < t1; {
		next := math.Min(t+day, t1)
		// accounts at the middle of the day, as a fraction of the end's
		mid := (t + next) / 2
		sum += acc.valueAt(mid) * (next - t)
		tl.us = append(tl.us, next)
		tl.f = append(tl.f, sum)
		t = next
	}
	for i := range tl.f {
		tl.f[i] /= sum
	}
	return tl
}

// valueAt is the fraction reached at time us (frac for float times).
func (tl *timeline) valueAt(us float64) float64 { return tl.frac(int64(us)) }

// at returns the time (µs) by which a fraction u of the growth happened.
func (tl *timeline) at(u float64) int64 {
	i, _ := slices.BinarySearch(tl.f, u)
	i = max(1, min(i, len(tl.f)-1))
	f0, f1 := tl.f[i-1], tl.f[i]
	x := 0.0
	if f1 > f0 {
		x = (u - f0) / (f1 - f0)
	}
	return int64(tl.us[i-1] + x*(tl.us[i]-tl.us[i-1]))
}

// frac is the inverse of at.
func (tl *timeline) frac(us int64) float64 {
	t := float64(us)
	if t <= tl.us[0] {
		return 0
	}
	if t >= tl.us[len(tl.us)-1] {
		return 1
	}
	i, _ := slices.BinarySearch(tl.us, t)
	i = max(1, min(i, len(tl.us)-1))
	x := (t - tl.us[i-1]) / (tl.us[i] - tl.us[i-1])
	return tl.f[i-1] + x*(tl.f[i]-tl.f[i-1])
}

// mix is a 64-bit finaliser (splitmix64).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func hash3(a, b, c uint64) uint64 {
	return mix(mix(mix(a^0x9e3779b97f4a7c15)+b) + c)
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// perm is a bijection of [0, n) (a 4-round Feistel network over the next
// even power of two, cycle-walking into range): the i-th element of a
// shuffled [0, n) without storing it.
type perm struct {
	n    uint64
	half uint
	key  uint64
}

func newPerm(n, key uint64) perm {
	b := uint(bits.Len64(max(n-1, 1)))
	b += b & 1
	return perm{n: n, half: b / 2, key: key}
}

func (p perm) at(x uint64) uint64 {
	mask := uint64(1)<<p.half - 1
	for {
		l, r := x>>p.half, x&mask
		for round := range uint64(4) {
			l, r = r, l^(mix(r^p.key+round)&mask)
		}
		x = l<<p.half | r
		if x < p.n {
			return x
		}
	}
}

// zipfRank draws a rank in [0, n) with P(k) ∝ (k+1)^-s (s > 1), by
// inverting the continuous approximation: O(1), no state.
func zipfRank(u float64, n uint64, s float64) uint64 { return zipfRankQ(u, n, s, 1) }

// zipfRankQ draws a rank in [0, n) with P(k) ∝ (k+q)^-s: q > 1 flattens
// the head (the most popular of n gets a smaller share).
func zipfRankQ(u float64, n uint64, s, q float64) uint64 {
	// CDF of x^-s on [q, n+q]: (q^a - x^a) / (q^a - (n+q)^a), a = 1-s.
	a := 1 - s
	base := math.Pow(q, a)
	x := math.Pow(base-u*(base-math.Pow(float64(n)+q, a)), 1/a) - q
	k := uint64(max(x, 0))
	return min(k, n-1)
}
