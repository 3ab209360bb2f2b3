package bench

import (
	mrand "math/rand/v2"
	"time"

	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// generate makes the run's workload (package lsm/workload: deterministic
// for a seed) and records its shape.
func (b *bench) generate() error {
	res := b.res
	b.logf("generating %d links (seed %d)", b.cfg.Links, b.cfg.Seed)
	t0 := time.Now()
	wl, err := workload.Generate(workload.Config{Links: b.cfg.Links, Seed: b.cfg.Seed})
	if err != nil {
		return err
	}
	b.wl = wl
	res.GenerateS = time.Since(t0).Seconds()
	res.Links, res.LinksWritten, res.LinksRevoked = wl.LiveLinks(), len(wl.Links), wl.RevokedLinks()
	res.Revocations, res.Records, res.Accounts, res.Targets = len(wl.Revocations), wl.Records, wl.Accounts, len(wl.Targets)
	b.logf("generated in %.1fs: %d links (%d live), %d revocations, %d targets, %d accounts",
		res.GenerateS, len(wl.Links), wl.LiveLinks(), len(wl.Revocations), len(wl.Targets), wl.Accounts)
	return nil
}

// modelTargets picks the targets the answers are checked on: the mega
// target, half uniformly over targets, half weighted by links.
func (b *bench) modelTargets() []int32 {
	wl := b.wl
	r := mrand.New(mrand.NewPCG(b.cfg.Seed, 0x6d6f64656c))
	seen := map[int32]bool{wl.Mega: true}
	out := []int32{wl.Mega}
	for len(out) < modelTargetCount+1 {
		var t int32
		if len(out)%2 == 0 {
			t = int32(r.IntN(len(wl.Targets)))
		} else {
			t = wl.LinkTarget[r.IntN(len(wl.LinkTarget))]
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// queryTargets draws the query set: targets weighted by their links (a
// popular target is asked more), with 1 to 1,000 live links.
func (b *bench) queryTargets() []int32 {
	wl := b.wl
	r := mrand.New(mrand.NewPCG(b.cfg.Seed, 0x7175657279))
	out := make([]int32, 0, b.cfg.Queries)
	for tries := 0; len(out) < b.cfg.Queries && tries < 100*b.cfg.Queries; tries++ {
		t := wl.LinkTarget[r.IntN(len(wl.LinkTarget))]
		if n := wl.LiveCount(t); t == wl.Mega || n == 0 || n > queryLinksMax {
			continue
		}
		out = append(out, t)
	}
	return out
}
