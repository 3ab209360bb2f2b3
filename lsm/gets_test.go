package lsm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

func gets(d objstore.Stats) int64 { return d.Get.Requests + d.GetRange.Requests }

// writeRuns writes nRuns delta runs; every run holds links to target (a
// popular target spanning several frames in the first run), and unrelated
// links; revocations go in separate flushes.
func writeRuns(t *testing.T, db *DB, target link.RecordID, nRuns int) {
	t.Helper()
	ctx := context.Background()
	stamp := uint64(1)
	for r := 0; r < nRuns; r++ {
		n := 50
		if r == 0 {
			n = 5000 // > one 128 KiB frame of 2048 links
		}
		for i := 0; i < n; i++ {
			stamp++
			src := link.RecordID{RKey: stamp, Collection: link.CollectionFirst, DID: uint64(1 + i%97)}
			l := link.Backlink{Target: target, Source: src, Location: 1, SourceRev: stamp}
			if err := db.AddBacklink(&l); err != nil {
				t.Fatal(err)
			}
			other := link.Backlink{Target: link.RecordID{RKey: stamp, Collection: link.CollectionFirst + 1, DID: 5}, Source: src, Location: 1, SourceRev: stamp}
			if err := db.AddBacklink(&other); err != nil {
				t.Fatal(err)
			}
		}
		// Revocations of unrelated sources.
		for i := 0; i < 20; i++ {
			v := link.Revocation{Source: link.RecordID{RKey: 1 << 40, Collection: link.CollectionFirst + 2, DID: uint64(1000 + i)}, Rev: stamp}
			if err := db.AddRevocation(&v); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueryGETs(t *testing.T) {
	ctx := context.Background()
	base, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := objstore.Counting(base)
	db, err := Open(ctx, Options{Store: store, Dir: t.TempDir(), NoGCGrace: true})
	if err != nil {
		t.Fatal(err)
	}
	target := link.RecordID{RKey: 7, Collection: link.CollectionFirst, DID: 3}
	const nRuns = 5
	writeRuns(t, db, target, nRuns)
	if n := len(db.View().Manifest.RunsOf(TreeLinks)); n != nRuns {
		t.Fatalf("%d link runs", n)
	}

	// Cold: round one makes at most one GET per run holding the target,
	// even for the target spanning several frames; round two makes none,
	// because no revocation filter matches these sources.
	before := store.Snapshot()
	res, err := db.Backlinks(ctx, Query{Target: target, Limit: LimitMax})
	if err != nil {
		t.Fatal(err)
	}
	d := store.Snapshot().Sub(before)
	if res.Stats.Round1MaxPerRun != 1 || res.Stats.Round1GETs != nRuns {
		t.Fatalf("round one: %+v", res.Stats)
	}
	if res.Stats.Round2GETs != 0 {
		t.Fatalf("round two made %d GETs with no filter match", res.Stats.Round2GETs)
	}
	if gets(d) != int64(res.Stats.Round1GETs) {
		t.Fatalf("store saw %d GETs, query counted %d", gets(d), res.Stats.Round1GETs)
	}
	if len(res.Links) != LimitMax {
		t.Fatalf("%d links", len(res.Links))
	}
	// Warm: no GETs at all.
	before = store.Snapshot()
	if _, err := db.Backlinks(ctx, Query{Target: target, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if g := gets(store.Snapshot().Sub(before)); g != 0 {
		t.Fatalf("warm query made %d GETs", g)
	}
	// A target no table holds: filters skip every table, no GET.
	before = store.Snapshot()
	res, err = db.Backlinks(ctx, Query{Target: link.RecordID{RKey: 123456789, Collection: link.CollectionFirst, DID: 77}})
	if err != nil {
		t.Fatal(err)
	}
	if g := gets(store.Snapshot().Sub(before)); g != 0 || len(res.Links) != 0 {
		t.Fatalf("absent target: %d GETs, %d links", g, len(res.Links))
	}

	// A revoked source: round two now fetches, one GET per revocation
	// table holding it.
	v := link.Revocation{Source: link.RecordID{RKey: 2, Collection: link.CollectionFirst, DID: 1}, Rev: 1 << 50}
	if err := db.AddRevocation(&v); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	db.reader.cache = NewFrameCache(0) // cold again
	res, err = db.Backlinks(ctx, Query{Target: target, Limit: LimitMax})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Round2GETs < 1 || res.Stats.Round2GETs > 1+nRuns || res.Stats.Revoked != 1 {
		t.Fatalf("round two after a revocation: %+v", res.Stats)
	}
	n, _, err := db.Count(ctx, target, Filter{})
	if err != nil || n != 5000+50*(nRuns-1)-1 {
		t.Fatalf("count %d %v", n, err)
	}
}

// Flipping any byte of a stored data object makes a query that reads it
// fail with ErrCorrupt; it never answers with other data.
func TestQueryCorruptFrame(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, Options{Store: store, Dir: t.TempDir(), NoGCGrace: true})
	if err != nil {
		t.Fatal(err)
	}
	target := link.RecordID{RKey: 7, Collection: link.CollectionFirst, DID: 3}
	writeRuns(t, db, target, 1)
	targets := []link.RecordID{target}
	for _, rk := range []uint64{3, 900, 2500, 4000, 4990} {
		targets = append(targets, link.RecordID{RKey: rk, Collection: link.CollectionFirst + 1, DID: 5})
	}
	want := map[link.RecordID][]link.Backlink{}
	for _, tg := range targets {
		res, err := db.Backlinks(ctx, Query{Target: tg, Limit: 10})
		if err != nil || len(res.Links) == 0 {
			t.Fatalf("%v: %v", tg, err)
		}
		want[tg] = res.Links
	}
	ref := db.View().Manifest.RunsOf(TreeLinks)[0].Tables[0]
	path := filepath.Join(dir, dataKey(TreeLinks, ref.ID))
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	step := max(1, len(orig)/300)
	for i := 0; i < len(orig); i += step {
		b := append([]byte(nil), orig...)
		b[i] ^= 0x40
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tg := range targets {
			db.reader.cache = NewFrameCache(0)
			res, err := db.Backlinks(ctx, Query{Target: tg, Limit: 10})
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("byte %d: error not ErrCorrupt: %v", i, err)
				}
				failed++
				continue
			}
			if !slices.Equal(res.Links, want[tg]) {
				t.Fatalf("byte %d flipped: target %v answered differently", i, tg)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no flip was detected")
	}
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	// Every frame of the table, read whole, with one byte flipped in it.
	meta := mustMeta(t, db.View().trees[TreeLinks][0].tables[0])
	for fi := range meta.NumFrames() {
		off, n := meta.ByteRange(fi, fi)
		for _, at := range []int64{off, off + n/2, off + n - 1} {
			b := append([]byte(nil), orig...)
			b[at] ^= 1
			if _, err := meta.DecodeFrame(fi, b[off:off+n], nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("frame %d byte %d: %v", fi, at, err)
			}
		}
	}
}
