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
	var all []byte
	var runs []Run
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
	want := Fold(f, all)
	spillDir := t.TempDir()
	for _, most := range []uint64{1 << 30, 64 << 10, 4 << 10} {
		out, err := CompactRuns(ctx, store, cat, v, v.Manifest.RunsOf(TreeLinks), CompactOptions{ShardBytesMax: most, SpillDir: spillDir})
		if err != nil {
			t.Fatal(err)
		}
		wantBits := compactionBits(0, uint64(len(all)), CompactOptions{ShardBytesMax: most})
		if len(out.Tables) == 0 || out.Tables[0].ShardBits != wantBits {
			t.Fatalf("shard bytes %d: %d tables of %d bits, want %d bits", most, len(out.Tables), out.Tables[0].ShardBits, wantBits)
		}
		if most == 4<<10 && len(out.Tables) < 64 {
			t.Fatalf("shard bytes %d: only %d tables", most, len(out.Tables))
		}
		// Every record, in order across the shards once each shard's are
		// re-sorted together.
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
			for i := range meta.Frames {
				off, n := meta.ByteRange(i, i)
				recs, err := meta.DecodeFrame(i, data[off:off+n], nil)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, recs...)
			}
		}
		SortRecords(got, f.Width)
		if !bytes.Equal(got, want) {
			t.Fatalf("shard bytes %d: %d records, want %d (or the same number, different)", most, len(got)/f.Width, len(want)/f.Width)
		}
		if left, _ := filepath.Glob(filepath.Join(spillDir, "*")); len(left) != 0 {
			t.Fatalf("spill files left: %v", left)
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
