package lsm

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
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
		if n := spillsCreated.Load() - spills0; n != groups {
			t.Fatalf("%s, shard bytes %d: %d spill groups, want %d", name, most, n, groups)
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
		check("every run", v.Manifest.RunsOf(TreeLinks), want, most, 1) // a delta run among the inputs: one group
	}
	// Only the compacted runs (1 to 3 shard bits): with many output
	// shards, two groups, each reading only its own input tables.
	wantCompacted := Fold(f, compacted)
	check("compacted runs", compactedRuns, wantCompacted, 1<<30, 1) // one output shard: one group
	check("compacted runs", compactedRuns, wantCompacted, 4<<10, 2) // the coarsest input has 1 shard bit
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
