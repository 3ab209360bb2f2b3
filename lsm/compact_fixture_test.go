package lsm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compactionDigestFile holds the digests of TestCompactionBytes, written
// by the code of commit 2c5f544 (before the account dictionary's one-slot
// tables) with EDDY_REWRITE_COMPACTION_DIGESTS=1.
const compactionDigestFile = "testdata/compaction-digests.txt"

// A compaction writes the same bytes as the code that wrote the digests:
// the output's data objects (every frame: the records' ranks in the shared
// dictionary, its columns) and its shared dictionary (entries, their
// order, revs and clock ids), with the dictionary counted on a sample of
// the first output shards and on every record (CountEvery). A change of
// the compaction's code that is to keep its bytes (a faster table, a
// different order of work) is checked here; one that changes them
// rewrites the digests on purpose.
func TestCompactionBytes(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	var runs []Run
	for i := range 4 {
		run, err := WriteRun(ctx, store, cat, TreeLinks, RunDelta, 0, synthBackfillBacklinks(uint64(40+i), 4000))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	v := viewOfRuns(t, cat, runs)
	defer func(n uint64) { dictSampleRecords = n }(dictSampleRecords)
	var got []string
	for _, c := range []struct {
		name       string
		sample     uint64
		countEvery bool
	}{{"sample", 3000, false}, {"every", 3000, true}} {
		dictSampleRecords = c.sample
		out, err := CompactRuns(ctx, store, cat, v, runs, CompactOptions{ShardBytesMax: 128 << 10, SpillDir: t.TempDir(), CountEvery: c.countEvery})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Tables) < 4 {
			t.Fatalf("%s: %d output tables, want several (a shared dictionary)", c.name, len(out.Tables))
		}
		h := sha256.New()
		for _, ref := range out.Tables {
			data, err := store.Get(ctx, dataKey(TreeLinks, ref.ID))
			if err != nil {
				t.Fatal(err)
			}
			h.Write(data)
		}
		om, err := cat.Load(ctx, TreeLinks, out.Tables[0])
		if err != nil {
			t.Fatal(err)
		}
		d := om.dict
		if d.len() < 100 {
			t.Fatalf("%s: a dictionary of %d entries", c.name, d.len())
		}
		var b [8]byte
		for i := range d.len() {
			did, clock := d.account(i)
			for _, x := range []uint64{did, clock, d.rev(i)} {
				binary.LittleEndian.PutUint64(b[:], x)
				h.Write(b[:])
			}
		}
		got = append(got, fmt.Sprintf("%s %d tables, %d entries, %s", c.name, len(out.Tables), d.len(), hex.EncodeToString(h.Sum(nil))))
	}
	text := strings.Join(got, "\n") + "\n"
	path := filepath.FromSlash(compactionDigestFile)
	if os.Getenv("EDDY_REWRITE_COMPACTION_DIGESTS") != "" {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != text {
		t.Fatalf("the compaction's bytes changed:\n got %s\nwant %s", text, want)
	}
}
