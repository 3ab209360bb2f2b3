package lsm

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// Compaction limits.
const (
	// tierBaseBytes: runs of the links tree up to this size make one
	// tier, its oldest CompactionFanIn runs merged together; larger runs
	// are merged in windows of similar size (PickCompactionAtLeast).
	tierBaseBytes = 1 << 20
	// DefaultCompactionShardBytes bounds the decoded bytes of one output
	// shard of a compaction: what a merge that holds a shard's records
	// holds in memory at once (its inputs wait in a spill file on local
	// disk; a merge into columns writes its tables a record at a time).
	// A target's links are never split, so a shard of one huge target
	// holds all of it.
	DefaultCompactionShardBytes = 256 << 20
)

// Compaction of the revocation tree.
const (
	// revocationMergeRatio: the newest revocation runs are merged into
	// the next older one as soon as together they hold at least
	// 1/revocationMergeRatio of its bytes, so each run is more than
	// revocationMergeRatio times the size of the newer ones together
	// and the tree keeps about log2 of its size over a flush's in runs.
	// Round two asks every revocation run about every source a query
	// renders, so the tree's run count multiplies the cost of every
	// query, while the tree itself is a small part of the index (0.07
	// B/link at 1B links): merging it more often is cheap. Size-tiered
	// compaction kept 13 runs there and made a warm query spend half its
	// time in their filters.
	revocationMergeRatio = 2
	// revocationMergeMaxRuns bounds the runs of one such merge.
	revocationMergeMaxRuns = 64
)

// PickCompaction returns the runs of a tree to merge next, or nil. The
// links tree (and the PLC and names trees) are size-tiered: the oldest
// fanIn runs of the lowest tier (runs up to tierBaseBytes) if it has that
// many, else the smallest merge of similar larger runs (pickSimilar):
// fanIn flushes (delta runs), or MergedFanIn(fanIn) runs of any kind,
// within the spread of fanIn (a merge of flushes, about fanIn times a
// flush, is outside it, so the two generations do not mix). The
// revocation tree merges its newest runs into an older one by size ratio
// (pickRatio).
func PickCompaction(m *Manifest, t Tree, fanIn int) []Run {
	return PickCompactionAtLeast(m, t, fanIn, 0)
}

// PickCompactionAtLeast is PickCompaction among the merges whose inputs
// hold at least minBytes: the smallest such window of similar runs, or
// the pick PickCompaction would make if it is that large. A writer that
// merges in two lanes by size asks it for the large lane while the small
// one is busy, so a large merge does not wait behind small ones.
func PickCompactionAtLeast(m *Manifest, t Tree, fanIn int, minBytes uint64) []Run {
	if t == TreeRevocations {
		return atLeast(pickRatio(largestFirst(m.RunsOf(t)), revocationMergeRatio, revocationMergeMaxRuns), minBytes)
	}
	var small, flushes, large []Run
	for _, r := range m.RunsOf(t) {
		switch {
		case r.Bytes() <= tierBaseBytes:
			small = append(small, r)
		default:
			large = append(large, r)
			if r.Kind == RunDelta {
				flushes = append(flushes, r)
			}
		}
	}
	if len(small) >= fanIn {
		if p := atLeast(small[:fanIn], minBytes); p != nil {
			return p
		}
	}
	// fanIn flushes, or MergedFanIn(fanIn) runs of any kind, within the
	// same spread: a flush whose size no other flush shares (the last of
	// a backfill's large flushes, once the live tail's are small) still
	// joins merged runs of its size.
	a := pickSimilar(flushes, fanIn, minBytes)
	b := pickWindow(large, MergedFanIn(fanIn), similarSpread(fanIn), minBytes)
	if a == nil || (b != nil && runsRecords(b) < runsRecords(a)) {
		return b
	}
	return a
}

// MergedFanIn is how many runs above the lowest tier one merge takes
// when they are not all flushes, for a tree whose flushes merge fanIn at
// a time: twice as many.
// A flush is read once and rewritten in the fast form (FastMerge); a
// merged run is decoded and written again in columns, the costliest work
// of the write path, so it is merged half as often per record: at 1B
// links of 1M-link flushes, fan-in 8 throughout merges a record 2.47
// times (and keeps at most 21 runs), 8 then 16 1.94 times (at most 28;
// at 100B, 4.67 and 36 against 3.67 and 53), simulated with equal
// flushes that do not shrink in a merge. The price is paid by reads and
// bytes at rest: a target in every run (a popular one) has a frame to
// read in each, and up to fifteen merges of flushes, in the fast form at
// about twice the columns' bytes, wait for the sixteenth instead of
// seven for the eighth (docs/scale.md, "Merged runs sixteen at a
// time", has the figures).
func MergedFanIn(fanIn int) int {
	return 2 * fanIn
}

// FanInOrDefault is fanIn, or DefaultCompactionFanIn if it is below 2.
func FanInOrDefault(fanIn int) int {
	if fanIn >= 2 {
		return fanIn
	}
	return DefaultCompactionFanIn
}

// runsRecords is the records of runs together.
func runsRecords(runs []Run) uint64 {
	var n uint64
	for _, r := range runs {
		n += r.Records()
	}
	return n
}

// atLeast returns runs if they hold at least minBytes, else nil.
func atLeast(runs []Run, minBytes uint64) []Run {
	if RunsBytes(runs) < minBytes {
		return nil
	}
	return runs
}

// RunsBytes is the data bytes of runs together (Run.Bytes: their tables'
// data objects, the metadata not counted), the size compaction picks by.
func RunsBytes(runs []Run) uint64 {
	var n uint64
	for _, r := range runs {
		n += r.Bytes()
	}
	return n
}

// pickSimilar returns the fanIn runs of runs that are smallest among
// those whose largest is at most similarSpread(fanIn) times their
// smallest and that hold at least minBytes together, or nil. Size here
// is a run's records, not its bytes: a flush's table (TableOptions.Fast,
// S2) takes about twice the bytes of the same records in columns, so by
// bytes a flush is about a quarter of the merge of eight, within the
// spread of fan-in 8, and flushes would be merged again with the merges
// of their peers; by records, what a merge rewrites, the merge of eight
// is eight times a flush whatever the forms. The tiers
// of size-tiered compaction are thus set by the runs' sizes themselves,
// not by fixed bounds: with fixed bounds (1 MiB times a power of fanIn)
// the merge of fanIn runs just above a bound, a few percent smaller than
// their sum (a merge folds groups and shares a dictionary), could fall
// under the next bound and stay in its inputs' tier, to be merged again
// with the next fanIn-1 (in the simulation of
// TestPickCompactionWritesLogFanIn, 1,000 flushes of 9 MiB were written
// 4.1 times a link, 3.3 now; the bench's backfills of 1M-link flushes
// made the same merges under both rules up to 1B links, except that at
// 100M eight runs fixed bounds had split between two tiers now merge
// after the last flush). From a fan-in of 3 on, merged outputs (about
// fanIn times their inputs) are more than the spread apart from them, so
// a window does not mix two generations of merges unless flushes differ
// in size that much; at fan-in 2 the spread is 2 and an output (a little
// under twice its inputs) may join its inputs' peers. Either way each
// band of sizes within the spread holds fewer than fanIn runs after the
// merges, so the tree keeps O(fanIn log(size)) runs.
func pickSimilar(runs []Run, fanIn int, minBytes uint64) []Run {
	return pickWindow(runs, fanIn, similarSpread(fanIn), minBytes)
}

// pickWindow returns the n runs of runs that are smallest among those
// whose largest is at most spread times their smallest and that hold at
// least minBytes together, or nil.
func pickWindow(runs []Run, n int, spread, minBytes uint64) []Run {
	if len(runs) < n {
		return nil
	}
	s := slices.Clone(runs)
	slices.SortStableFunc(s, func(a, b Run) int { return cmp.Compare(a.Records(), b.Records()) })
	for i := 0; i+n <= len(s); i++ {
		if s[i+n-1].Records() <= spread*s[i].Records() && RunsBytes(s[i:i+n]) >= minBytes {
			return s[i : i+n]
		}
	}
	return nil
}

// similarSpread is the largest ratio of the largest to the smallest run
// of one merge of pickSimilar: half the fan-in, at least 2.
func similarSpread(fanIn int) uint64 {
	return uint64(max(2, fanIn/2))
}

// largestFirst returns runs ordered by bytes, largest first (runs of
// equal bytes in their order), the order pickRatio reads as oldest first.
// Not by Seq: in a cluster a merge's output is published with a later
// flush, after its own runs, so it gets a newer Seq than runs flushed while
// it ran; read by Seq, the whole tree would look newer than those small
// runs and be merged again with them at every merge. A revocation's
// effect does not depend on the runs it is merged with (a link is live
// while its stamp is above every revocation of its record), so any runs
// may merge together.
func largestFirst(runs []Run) []Run {
	s := slices.Clone(runs)
	slices.SortStableFunc(s, func(a, b Run) int { return cmp.Compare(b.Bytes(), a.Bytes()) })
	return s
}

// pickRatio returns the newest runs of runs (oldest first) up to and
// including the oldest run r such that the runs newer than r hold at
// least 1/ratio of r's bytes, at most maxRuns of them; nil if no run
// qualifies. After each merge the runs' sizes grow by more than ratio
// from newest to oldest.
func pickRatio(runs []Run, ratio uint64, maxRuns int) []Run {
	n := len(runs)
	best := -1 // index, newest first, of the oldest run the merge reaches
	var newer uint64
	for j := 0; j < n && j < maxRuns; j++ {
		r := runs[n-1-j]
		if j > 0 && newer*ratio >= r.Bytes() {
			best = j
		}
		newer += r.Bytes()
	}
	if best < 0 {
		return nil
	}
	return slices.Clone(runs[n-1-best:])
}

// Compact merges one set of runs of each tree if any tier is full, and
// reports whether it did anything. Identical records keep the newest rev.
func (db *DB) Compact(ctx context.Context) (bool, error) {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	did := false
	for _, t := range []Tree{TreeLinks, TreeRevocations} {
		inputs := PickCompaction(db.View().Manifest, t, db.opts.CompactionFanIn)
		if inputs == nil {
			continue
		}
		if err := db.compactLocked(ctx, t, inputs, false); err != nil {
			return did, err
		}
		did = true
	}
	return did, nil
}

// CompactFull merges every run of each tree into one run in columns,
// rewriting a tree's only run too if it is in the fast form
// (RunInFastForm), and reports whether it did anything: a major
// compaction, what an index is given after a backfill, when nothing will
// be written for a while that a smaller merge would rewrite again. One
// target's links then sit in one run: fewer groups, fewer runs for a
// query to ask. It holds what any compaction holds: one output shard at
// a time, its inputs spilled to local disk.
func (db *DB) CompactFull(ctx context.Context) (bool, error) {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	did := false
	for _, t := range []Tree{TreeLinks, TreeRevocations} {
		inputs := db.View().Manifest.RunsOf(t)
		if need, err := FullCompactionNeeded(ctx, db.cat, inputs); err != nil || !need {
			if err != nil {
				return did, err
			}
			continue
		}
		if err := db.compactLocked(ctx, t, inputs, true); err != nil {
			return did, err
		}
		did = true
	}
	return did, nil
}

// FullCompactionNeeded reports whether a full compaction of a tree whose
// runs are runs has work: two runs or more, or a lone run in the fast
// form (RunInFastForm: it is rewritten in columns); an error if that
// run's form cannot be read.
func FullCompactionNeeded(ctx context.Context, cat *Catalog, runs []Run) (bool, error) {
	switch len(runs) {
	case 0:
		return false, nil
	case 1:
		return RunInFastForm(ctx, cat, runs[0])
	}
	return true, nil
}

// compactLocked merges inputs (runs of tree t) into one run and swaps it
// in; db.writeMu is held. full: every run of the tree (CountEvery).
func (db *DB) compactLocked(ctx context.Context, t Tree, inputs []Run, full bool) error {
	opt := CompactOptions{ShardTargetBytes: db.opts.ShardTargetBytes, BytesPerSec: db.opts.CompactionBytesPerSec, SpillDir: db.opts.Dir}
	opt.ForMerge(inputs, full, db.opts.CompactionFanIn)
	out, err := CompactRuns(ctx, db.store, db.cat, db.View(), inputs, opt)
	if err != nil {
		return fmt.Errorf("compact %s: %w", t, err)
	}
	ids := make([]string, len(inputs))
	for i, r := range inputs {
		ids[i] = r.ID
	}
	return db.apply(ctx, func(base uint64) Edit { return Edit{Base: base, Add: []Run{out}, Remove: ids} })
}
