package lsm

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// simulateLinksTree flushes n runs of sizes from size into a links tree
// and merges what PickCompaction picks after each, a merge's output a
// twentieth of its smaller inputs smaller than their sum (a merge folds
// groups and shares one dictionary; the largest input, merged before, does
// not shrink again). It returns the write amplification (bytes flushed and
// merged over bytes flushed), the most runs the tree held after a flush's
// merges, and the most runs of at most tierBaseBytes.
func simulateLinksTree(t *testing.T, n int, size func() uint64) (amp float64, maxRuns, maxSmall int) {
	t.Helper()
	m := &Manifest{}
	id := 0
	add := func(bytes uint64, kind RunKind) {
		id++
		// A record a byte: these runs' records shrink in a merge as
		// their bytes do.
		m.Runs = append(m.Runs, Run{ID: strconv.Itoa(id), Tree: TreeLinks, Seq: uint64(id), Kind: kind, Tables: []TableRef{{ID: strconv.Itoa(id), DataBytes: bytes, Records: bytes}}})
	}
	var flushed, merged uint64
	for range n {
		b := size()
		add(b, RunDelta)
		flushed += b
		for {
			in := PickCompaction(m, TreeLinks, DefaultCompactionFanIn)
			if in == nil {
				break
			}
			if want := DefaultCompactionFanIn; len(in) != want && len(in) != MergedFanIn(want) {
				t.Fatalf("a merge of %d runs", len(in))
			}
			drop := map[string]bool{}
			var sum, largest uint64
			for _, r := range in {
				drop[r.ID] = true
				sum += r.Bytes()
				largest = max(largest, r.Bytes())
			}
			var keep []Run
			for _, r := range m.Runs {
				if !drop[r.ID] {
					keep = append(keep, r)
				}
			}
			m.Runs = keep
			out := sum - (sum-largest)/20
			add(out, RunCompacted)
			merged += out
		}
		small := 0
		for _, r := range m.Runs {
			if r.Bytes() <= tierBaseBytes {
				small++
			}
		}
		maxRuns = max(maxRuns, len(m.Runs))
		maxSmall = max(maxSmall, small)
	}
	return float64(flushed+merged) / float64(flushed), maxRuns, maxSmall
}

// TestPickCompactionWritesLogFanIn: the links tree writes a link at most
// 2 + floor(log16(flushes/8)) times whatever the flushes' size (a flush,
// the merge of eight flushes, then merges of sixteen merged runs: 2.77 for
// 1,000 flushes of 9 MiB, where fan-in 8 throughout wrote 3.3), and keeps
// at most seven flushes and fifteen runs of each generation of merges
// (flushes that differ in size twentyfold blur one more of each). With
// tiers of fixed bounds (1 MiB times a power of 8), flushes of 9 MiB were
// written 4.1 times over 1,000 flushes: the merge of eight runs just above
// a bound fell under the next bound and was merged again in its inputs'
// tier.
func TestPickCompactionWritesLogFanIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f, mf := DefaultCompactionFanIn, MergedFanIn(DefaultCompactionFanIn)
	for _, c := range []struct {
		name string
		n    int
		size func() uint64
		// blur: generations of runs the size of one, where flushes
		// differ in size by more than the spread of a merge
		blur int
	}{
		{"9 MiB", 1000, func() uint64 { return 9 << 20 }, 0},
		{"1.05 MiB", 1000, func() uint64 { return 1100 << 10 }, 0},
		{"1.2-3 MiB", 1000, func() uint64 { return 1200<<10 + uint64(rng.Int64N(2<<20)) }, 0},
		{"0.5-10 MiB", 1000, func() uint64 { return 512<<10 + uint64(rng.Int64N(10<<20)) }, 1},
	} {
		amp, maxRuns, _ := simulateLinksTree(t, c.n, c.size)
		gens := math.Log(float64(c.n)/float64(f)) / math.Log(float64(mf))
		t.Logf("flushes of %s: write amplification %.2f (2 + log%d(%d/%d) = %.2f), at most %d runs", c.name, amp, mf, c.n, f, 2+gens, maxRuns)
		if want := 2 + math.Floor(gens); amp > want {
			t.Errorf("flushes of %s: write amplification %.2f, want <= %.0f", c.name, amp, want)
		}
		if limit := (f-1)*(1+c.blur) + (mf-1)*(int(math.Ceil(gens))+c.blur) + 1; maxRuns > limit {
			t.Errorf("flushes of %s: %d runs at most, want <= %d", c.name, maxRuns, limit)
		}
	}
	// A node's flushes of a few KB: runs up to 1 MiB are one tier, its
	// oldest eight merged together, so the oldest run of the tier takes in
	// seven flushes at each merge until it passes 1 MiB: 256 flushes of 4
	// KiB, 36 merges, a byte rewritten about half as often on average,
	// then the generations of merged runs above (80 MiB in runs of ~1 MiB:
	// log16(80) = 1.6, so at most two of fifteen runs). A few hundred
	// bytes a second of merging at the network's rate.
	amp, maxRuns, maxSmall := simulateLinksTree(t, 20000, func() uint64 { return 4 << 10 })
	t.Logf("flushes of 4 KiB: write amplification %.1f, at most %d runs, %d of them up to 1 MiB", amp, maxRuns, maxSmall)
	if want := 1 + 36.0/2 + 2; amp > want {
		t.Errorf("flushes of 4 KiB: write amplification %.1f, want <= %.0f", amp, want)
	}
	if limit := (f - 1) + 2*(mf-1) + 1; maxRuns > limit || maxSmall > f-1 {
		t.Errorf("flushes of 4 KiB: %d runs at most, %d of them small, want <= %d and %d", maxRuns, maxSmall, limit, f-1)
	}
}

// TestPickSimilar: the smallest window of fan-in runs within the spread.
func TestPickSimilar(t *testing.T) {
	runs := func(sizes ...uint64) []Run {
		var rs []Run
		for i, b := range sizes {
			rs = append(rs, Run{ID: strconv.Itoa(i), Tables: []TableRef{{DataBytes: b, Records: b}}})
		}
		return rs
	}
	ids := func(rs []Run) string {
		s := ""
		for _, r := range rs {
			s += r.ID
		}
		return s
	}
	for _, c := range []struct {
		sizes []uint64
		fanIn int
		want  string
	}{
		{[]uint64{10, 100, 11, 12}, 3, "023"},      // spread 2 at fan-in 3: 10, 11, 12
		{[]uint64{100, 10, 45, 12}, 3, ""},         // 10, 12, 45 and 12, 45, 100 span more than 2x
		{[]uint64{100, 10, 50, 400, 90}, 3, "240"}, // 50, 90, 100, smallest first
		{[]uint64{10, 100, 1000}, 3, ""},
		{[]uint64{10, 20}, 3, ""},
		{[]uint64{5, 5, 5, 5, 5, 5, 5, 5}, 8, "01234567"},
		{[]uint64{5, 5, 5, 5, 5, 5, 5, 21}, 8, ""}, // 21 > 4 x 5
		{[]uint64{5, 5, 5, 5, 5, 5, 5, 20}, 8, "01234567"},
	} {
		got := ids(pickSimilar(runs(c.sizes...), c.fanIn, 0))
		if got != c.want {
			t.Errorf("pickSimilar(%v, %d) = %q, want %q", c.sizes, c.fanIn, got, c.want)
		}
	}
	// Sizes are records, not bytes: seven flushes of 8 records in twice
	// the bytes a record (S2) and the columnar merge of eight such are
	// not one window (by bytes, 64 <= 4 x 16, they would be), while eight
	// flushes are.
	flushes := func(n int) []Run {
		var rs []Run
		for i := range n {
			rs = append(rs, Run{ID: strconv.Itoa(i), Tables: []TableRef{{DataBytes: 16, Records: 8}}})
		}
		return rs
	}
	merged := Run{ID: "m", Tables: []TableRef{{DataBytes: 64, Records: 64}}}
	if got := ids(pickSimilar(append(flushes(7), merged), 8, 0)); got != "" {
		t.Errorf("seven flushes and a merge of eight: picked %q, want nothing", got)
	}
	if got := ids(pickSimilar(append(flushes(8), merged), 8, 0)); got != "01234567" {
		t.Errorf("eight flushes and a merge of eight: picked %q, want the flushes", got)
	}
	// With a floor on the inputs' bytes: the smallest window that holds
	// that much.
	for _, c := range []struct {
		sizes    []uint64
		minBytes uint64
		want     string
	}{
		{[]uint64{10, 11, 12, 100, 110, 120}, 0, "012"},
		{[]uint64{10, 11, 12, 100, 110, 120}, 33, "012"},
		{[]uint64{10, 11, 12, 100, 110, 120}, 34, "345"},
		{[]uint64{10, 11, 12, 100, 110, 120}, 331, ""},
	} {
		got := ids(pickSimilar(runs(c.sizes...), 3, c.minBytes))
		if got != c.want {
			t.Errorf("pickSimilar(%v, 3, %d) = %q, want %q", c.sizes, c.minBytes, got, c.want)
		}
	}
}

// TestPickCompactionAtLeast: a writer whose small lane is busy asks for a
// merge of at least a size; it gets one of the larger runs' windows even
// while the lowest tier or a smaller window waits, and nothing where no
// merge that large is due. The revocation tree's pick is given only if
// it is that large.
func TestPickCompactionAtLeast(t *testing.T) {
	m := &Manifest{}
	add := func(tree Tree, sizes ...uint64) {
		for _, b := range sizes {
			id := strconv.Itoa(len(m.Runs))
			m.Runs = append(m.Runs, Run{ID: id, Tree: tree, Seq: uint64(len(m.Runs)), Kind: RunDelta, Tables: []TableRef{{ID: id, DataBytes: b, Records: b}}})
		}
	}
	add(TreeLinks, 1<<10, 1<<10, 1<<10)       // 0-2: the lowest tier
	add(TreeLinks, 2<<20, 2<<20, 3<<20)       // 3-5: a window of 7 MiB
	add(TreeLinks, 100<<20, 120<<20, 130<<20) // 6-8: a window of 350 MiB
	add(TreeRevocations, 8<<20, 2<<20, 1<<20) // 9-11: 10 and 11 merge by ratio
	ids := func(rs []Run) string {
		s := ""
		for _, r := range rs {
			s += r.ID + " "
		}
		return s
	}
	for _, c := range []struct {
		tree     Tree
		minBytes uint64
		want     string
	}{
		{TreeLinks, 0, "0 1 2 "},
		{TreeLinks, 4 << 10, "3 4 5 "},
		{TreeLinks, 256 << 20, "6 7 8 "},
		{TreeLinks, 351 << 20, ""},
		{TreeRevocations, 0, "10 11 "},
		{TreeRevocations, 3 << 20, "10 11 "},
		{TreeRevocations, 3<<20 + 1, ""},
	} {
		if got := ids(PickCompactionAtLeast(m, c.tree, 3, c.minBytes)); got != c.want {
			t.Errorf("PickCompactionAtLeast(%s, %d) = %q, want %q", c.tree, c.minBytes, got, c.want)
		}
	}
	if got, want := ids(PickCompaction(m, TreeLinks, 3)), "0 1 2 "; got != want {
		t.Errorf("PickCompaction = %q, want %q", got, want)
	}
}

// TestPickFlushesAndMergedRuns: eight similar flushes merge together,
// sixteen similar runs of any kind together, the smaller merge first; a
// flush no other flush is similar to (a backfill's last large flush, once
// the live tail's are small) joins merged runs of its size.
func TestPickFlushesAndMergedRuns(t *testing.T) {
	const mi = 1 << 20
	type spec struct {
		kind    RunKind
		records uint64
		n       int
	}
	build := func(specs ...spec) *Manifest {
		m := &Manifest{}
		for _, s := range specs {
			for range s.n {
				id := strconv.Itoa(len(m.Runs))
				m.Runs = append(m.Runs, Run{ID: id, Tree: TreeLinks, Seq: uint64(len(m.Runs)), Kind: s.kind,
					Tables: []TableRef{{ID: id, DataBytes: 2 * mi * s.records / mi, Records: s.records}}})
			}
		}
		return m
	}
	kinds := func(rs []Run) (flushes, merged int) {
		for _, r := range rs {
			if r.Kind == RunDelta {
				flushes++
			} else {
				merged++
			}
		}
		return flushes, merged
	}
	for _, c := range []struct {
		name            string
		m               *Manifest
		flushes, merged int
	}{
		{"seven flushes, fifteen merged runs: none", build(spec{RunDelta, mi, 7}, spec{RunCompacted, 8 * mi, 15}), 0, 0},
		{"eight flushes", build(spec{RunDelta, mi, 8}, spec{RunCompacted, 8 * mi, 15}), 8, 0},
		{"sixteen merged runs", build(spec{RunDelta, mi, 7}, spec{RunCompacted, 8 * mi, 16}), 0, 16},
		{"the smaller first", build(spec{RunDelta, mi, 8}, spec{RunCompacted, 8 * mi, 16}), 8, 0},
		{"a lone large flush joins fifteen merged runs", build(spec{RunDelta, 32 * mi, 1}, spec{RunCompacted, 40 * mi, 15}), 1, 15},
		{"but not runs more than the spread apart", build(spec{RunDelta, 4 * mi, 1}, spec{RunCompacted, 40 * mi, 15}), 0, 0},
	} {
		got := PickCompaction(c.m, TreeLinks, 8)
		if f, m := kinds(got); f != c.flushes || m != c.merged {
			t.Errorf("%s: picked %d flushes and %d merged runs, want %d and %d", c.name, f, m, c.flushes, c.merged)
		}
	}
}
