package lsm

import (
	"context"
	"fmt"
	"sort"
)

// Compaction limits.
const (
	// tierBaseBytes is the size of the smallest tier of size-tiered
	// compaction; each tier is CompactionFanIn times the one below.
	tierBaseBytes = 1 << 20
	// DefaultCompactionShardBytes bounds the decoded bytes of one output
	// shard of a compaction: what a merge holds in memory at once (its
	// inputs wait in a spill file on local disk). A target's links are
	// never split, so a shard of one huge target holds all of it.
	DefaultCompactionShardBytes = 256 << 20
)

// tier returns a run's size tier.
func tier(bytes uint64, fanIn int) int {
	t := 0
	for b := uint64(tierBaseBytes); bytes > b; b *= uint64(fanIn) {
		t++
	}
	return t
}

// PickCompaction returns the runs of a tree to merge next: the oldest
// CompactionFanIn runs of the lowest tier that has that many, or nil.
func PickCompaction(m *Manifest, t Tree, fanIn int) []Run {
	byTier := map[int][]Run{}
	for _, r := range m.RunsOf(t) {
		k := tier(r.Bytes(), fanIn)
		byTier[k] = append(byTier[k], r)
	}
	tiers := make([]int, 0, len(byTier))
	for k := range byTier {
		tiers = append(tiers, k)
	}
	sort.Ints(tiers)
	for _, k := range tiers {
		if rs := byTier[k]; len(rs) >= fanIn {
			return rs[:fanIn]
		}
	}
	return nil
}

// Compact merges one set of runs of each tree if any tier is full, and
// reports whether it did anything. Identical records keep the newest rev.
func (db *DB) Compact(ctx context.Context) (bool, error) {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	did := false
	for _, t := range []Tree{TreeLinks, TreeRevocations} {
		v := db.View()
		inputs := PickCompaction(v.Manifest, t, db.opts.CompactionFanIn)
		if inputs == nil {
			continue
		}
		out, err := CompactRuns(ctx, db.store, db.cat, v, inputs, CompactOptions{
			ShardTargetBytes: db.opts.ShardTargetBytes, BytesPerSec: db.opts.CompactionBytesPerSec, SpillDir: db.opts.Dir,
		})
		if err != nil {
			return did, fmt.Errorf("compact %s: %w", t, err)
		}
		ids := make([]string, len(inputs))
		for i, r := range inputs {
			ids[i] = r.ID
		}
		if err := db.apply(ctx, func(base uint64) Edit { return Edit{Base: base, Add: []Run{out}, Remove: ids} }); err != nil {
			return did, err
		}
		did = true
	}
	return did, nil
}
