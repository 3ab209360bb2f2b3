package lsm

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// The streaming compaction gives what sorting and folding every input in
// memory gives, whatever the inputs' shard bits and however small the
// output shards are made (many shards, sequences of several blocks, equal
// links in several runs keeping the newest rev), and leaves no spill
// file behind.
func TestCompactRunsStreaming(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	rng := rand.New(rand.NewPCG(7, 13))
	f := BacklinkFormat
	// Six runs over 300 targets: delta runs and compacted runs of 0 to 3
	// shard bits; a fifth of the links are repeated in a later run with a
	// newer rev.
	var all, compacted []byte // every run's records, the compacted runs'
	var runs, compactedRuns []Run
	var prev []link.Backlink
	for r := range 6 {
		var recs []byte
		var ls []link.Backlink
		for range 3000 + rng.IntN(3000) {
			var l link.Backlink
			if len(prev) > 0 && rng.IntN(5) == 0 {
				l = prev[rng.IntN(len(prev))]
				l.SourceRev += uint64(1 + rng.IntN(3))
			} else {
				l = link.Backlink{
					Target:   link.RecordID{RKey: uint64(rng.IntN(300)), Collection: 3, DID: 9},
					Source:   link.RecordID{RKey: rng.Uint64(), Collection: 5, DID: uint64(rng.IntN(50))},
					Location: link.Location(rng.IntN(4)), SourceRev: uint64(r*10 + 1),
				}
			}
			ls = append(ls, l)
			var b [link.BacklinkSize]byte
			l.Put(b[:])
			recs = append(recs, b[:]...)
		}
		prev = ls
		all = append(all, recs...)
		SortRecords(recs, f.Width)
		recs = Fold(f, recs)
		kind, bits := RunDelta, uint8(0)
		if r%2 == 1 {
			kind, bits = RunCompacted, uint8(r/2+1)
		}
		run, err := WriteRun(ctx, store, cat, TreeLinks, kind, bits, recs)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
		if kind == RunCompacted {
			compacted = append(compacted, recs...)
			compactedRuns = append(compactedRuns, run)
		}
	}
	m := &Manifest{}
	m, _, err := m.Apply(Edit{Base: 0, Add: runs})
	if err != nil {
		t.Fatal(err)
	}
	v, err := OpenView(ctx, cat, m)
	if err != nil {
		t.Fatal(err)
	}
	SortRecords(all, f.Width)
	SortRecords(compacted, f.Width)
	spillDir := t.TempDir()
	// groups is the spill files the compaction makes: one a group, and
	// one more for the coarse inputs when it has any (-1: as groupPlan
	// says, TestGroupPlan checks it).
	check := func(name string, inputs []Run, want []byte, most uint64, groups int64) {
		t.Helper()
		spills0 := spillsCreated.Load()
		out, err := CompactRuns(ctx, store, cat, v, inputs, CompactOptions{ShardBytesMax: most, SpillDir: spillDir})
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, r := range inputs {
			n += r.Records()
		}
		wantBits := compactionBits(0, n*uint64(f.Width), CompactOptions{ShardBytesMax: most})
		if groups < 0 {
			g := groupPlan(inputs, wantBits)
			groups = 1 << g
			for _, r := range inputs {
				if runShardBits(r) < g {
					groups++ // the coarse spill
					break
				}
			}
		}
		if n := spillsCreated.Load() - spills0; n != groups {
			t.Fatalf("%s, shard bytes %d: %d spill files, want %d", name, most, n, groups)
		}
		if len(out.Tables) == 0 || out.Tables[0].ShardBits != wantBits {
			t.Fatalf("%s, shard bytes %d: %d tables of %d bits, want %d bits", name, most, len(out.Tables), out.Tables[0].ShardBits, wantBits)
		}
		if most == 4<<10 && len(out.Tables) < 64 {
			t.Fatalf("%s, shard bytes %d: only %d tables", name, most, len(out.Tables))
		}
		// Every record, once, in its shard; in order once re-sorted
		// together (BuildTable checked each table's own order).
		var got []byte
		for _, ref := range out.Tables {
			data, err := store.Get(ctx, dataKey(TreeLinks, ref.ID))
			if err != nil {
				t.Fatal(err)
			}
			meta, err := cat.Load(ctx, TreeLinks, ref)
			if err != nil {
				t.Fatal(err)
			}
			for i := range meta.NumFrames() {
				off, n := meta.ByteRange(i, i)
				recs, err := meta.DecodeFrame(i, data[off:off+n], nil)
				if err != nil {
					t.Fatal(err)
				}
				for o := 0; o < len(recs); o += f.Width {
					if ShardOf(recs[o:o+f.PrefixLen], ref.ShardBits) != ref.Shard {
						t.Fatalf("%s: a record of shard %d in table of shard %d", name, ShardOf(recs[o:o+f.PrefixLen], ref.ShardBits), ref.Shard)
					}
				}
				got = append(got, recs...)
			}
		}
		SortRecords(got, f.Width)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s, shard bytes %d: %d records, want %d (or the same number, different)", name, most, len(got)/f.Width, len(want)/f.Width)
		}
		if left, _ := filepath.Glob(filepath.Join(spillDir, "*")); len(left) != 0 {
			t.Fatalf("spill files left: %v", left)
		}
	}
	want := Fold(f, all)
	for _, most := range []uint64{1 << 30, 64 << 10, 4 << 10} {
		// Half the records in delta runs: one group.
		check("every run", v.Manifest.RunsOf(TreeLinks), want, most, 1)
	}
	// Only the compacted runs (1 to 3 shard bits): with many output
	// shards, groups that each read only their own input tables, the
	// coarser inputs spilled ahead by group when they are few enough.
	wantCompacted := Fold(f, compacted)
	check("compacted runs", compactedRuns, wantCompacted, 1<<30, 1) // one output shard: one group
	check("compacted runs", compactedRuns, wantCompacted, 4<<10, -1)
	// The compacted runs and a small delta run (the newest flush in a
	// full compaction): several groups, the delta run's records spilled
	// once ahead and each group taking its part, instead of one group of
	// everything.
	var small []byte
	for i := range 200 {
		l := link.Backlink{
			Target:    link.RecordID{RKey: uint64(rng.IntN(300)), Collection: 3, DID: 9},
			Source:    link.RecordID{RKey: uint64(i), Collection: 5, DID: 77},
			SourceRev: 99,
		}
		var b [link.BacklinkSize]byte
		l.Put(b[:])
		small = append(small, b[:]...)
	}
	SortRecords(small, f.Width)
	smallRun, err := WriteRun(ctx, store, cat, TreeLinks, RunDelta, 0, small)
	if err != nil {
		t.Fatal(err)
	}
	m2, _, err := v.Manifest.Apply(Edit{Base: v.Manifest.Generation, Add: []Run{smallRun}})
	if err != nil {
		t.Fatal(err)
	}
	if v, err = OpenView(ctx, cat, m2); err != nil {
		t.Fatal(err)
	}
	mixed := append(slices.Clone(compactedRuns), smallRun)
	wantMixed := append(slices.Clone(compacted), small...)
	SortRecords(wantMixed, f.Width)
	wantMixed = Fold(f, wantMixed)
	if g := groupPlan(mixed, 8); g < 1 {
		t.Fatalf("a delta run of 200 records beside %d compacted records makes %d group bits", len(compacted)/f.Width, g)
	}
	check("compacted runs and a small delta run", mixed, wantMixed, 4<<10, -1)
}

// groupPlan gives the most group bits for which the inputs split more
// coarsely than the groups hold less than a group's share of the records.
func TestGroupPlan(t *testing.T) {
	run := func(records uint64, bits uint8) Run {
		if bits == 0 {
			return Run{Kind: RunDelta, Tables: []TableRef{{Records: records}}}
		}
		r := Run{Kind: RunCompacted}
		for s := range uint32(1) << bits {
			r.Tables = append(r.Tables, TableRef{Records: records >> bits, ShardBits: bits, Shard: s})
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		inputs []Run
		bits   uint8
		want   uint8
	}{
		{"delta runs only", []Run{run(1000, 0), run(1000, 0)}, 3, 0},
		{"similar compacted runs", []Run{run(8<<10, 2), run(8<<10, 2), run(8<<10, 2)}, 5, 2},
		{"no output shards", []Run{run(8<<10, 4), run(1000, 0)}, 0, 0},
		// 1M records in 4 bits and a delta of 1,000: the delta is at most
		// a group's share up to 4 bits (and the output's bits bound it).
		{"a full compaction's newest flush", []Run{run(1<<20, 4), run(1000, 0)}, 8, 4},
		{"a full compaction's newest flush, fewer output bits", []Run{run(1<<20, 4), run(1000, 0)}, 2, 2},
		// Runs of 4 and 2 bits and a delta: at 3 bits the 2-bit run
		// (1/5 of the records) is more than a group's share (1/8).
		{"runs of several sizes", []Run{run(4<<20, 4), run(1<<20, 2), run(1000, 0)}, 8, 2},
		// A delta run of half the records: one group.
		{"a large delta run", []Run{run(1<<20, 4), run(1<<20, 0)}, 8, 0},
		// A delta run of a quarter of the records: less than a group's
		// share at 1 bit, not at 2.
		{"a delta run of a quarter", []Run{run(3<<20, 4), run(1<<20, 0)}, 8, 1},
	} {
		if got := groupPlan(tc.inputs, tc.bits); got != tc.want {
			t.Errorf("%s: %d group bits, want %d", tc.name, got, tc.want)
		}
	}
}

// RemoveSpills removes what a crashed compaction left, and nothing else.
func TestRemoveSpills(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"compaction-1.spill", "compaction-2.spill", "MANIFEST", "other.spill"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := RemoveSpills(dir)
	if err != nil || n != 2 {
		t.Fatalf("removed %d (%v), want 2", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 2 {
		t.Fatalf("left %v", left)
	}
}
