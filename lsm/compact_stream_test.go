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
	// Every input table is read once, into a spill file of its own; with
	// open (> 0), at most that many spill files at once.
	check := func(name string, inputs []Run, want []byte, most uint64, open int64) {
		t.Helper()
		var tables int64
		var n uint64
		for _, r := range inputs {
			tables += int64(len(r.Tables))
			n += r.Records()
		}
		spills0 := spillsCreated.Load()
		spillsOpenPeak.Store(0)
		out, err := CompactRuns(ctx, store, cat, v, inputs, CompactOptions{ShardBytesMax: most, SpillDir: spillDir})
		if err != nil {
			t.Fatal(err)
		}
		wantBits := compactionBits(0, n*uint64(f.Width), CompactOptions{ShardBytesMax: most})
		if n := spillsCreated.Load() - spills0; n != tables {
			t.Fatalf("%s, shard bytes %d: %d spill files, want one a table, %d", name, most, n, tables)
		}
		if peak := spillsOpenPeak.Load(); open > 0 && peak > open {
			t.Fatalf("%s, shard bytes %d: %d spill files at once, want at most %d", name, most, peak, open)
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
			if owner := meta.DictTable(); owner != "" {
				om, err := cat.Load(ctx, TreeLinks, out.Tables[0])
				if err != nil {
					t.Fatal(err)
				}
				if err := meta.UseDictOf(om); err != nil {
					t.Fatal(err)
				}
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
		check("every run", v.Manifest.RunsOf(TreeLinks), want, most, 0)
	}
	wantCompacted := Fold(f, compacted)
	check("compacted runs", compactedRuns, wantCompacted, 1<<30, 0) // one output shard
	check("compacted runs", compactedRuns, wantCompacted, 4<<10, 0)

	// The compacted runs and a small delta run (the newest flush in a
	// full compaction), with the dictionary counted on the first output
	// shard alone: an input table's spill lives while its output shards
	// are built, so at most one spill file a run is open at once (the
	// output has more shard bits than any input), never the whole merge.
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
	defer func(n uint64) { dictSampleRecords = n }(dictSampleRecords)
	dictSampleRecords = 1
	check("compacted runs and a small delta run", mixed, wantMixed, 4<<10, int64(len(mixed)))
	if tables := int64(2 + 4 + 8 + 1); spillsOpenPeak.Load() >= tables {
		t.Fatalf("%d spill files at once of %d tables: the test shows nothing", spillsOpenPeak.Load(), tables)
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
