package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/zeebo/xxh3"
)

// A compaction's output run of several tables stores one account
// dictionary, in its first table; the others refer to it. Their frames
// decode through every kind of catalog (decoded, mapped from a fetch,
// mapped from local disk), the run's metas are smaller than with a
// dictionary each, and a reference to the wrong table is corruption.
func TestSharedDictionary(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	rng := rand.New(rand.NewPCG(3, 5))
	f := BacklinkFormat
	var recs []byte
	for range 40000 {
		acct := uint64(rng.IntN(2000))
		clock := acct % 7 // the account's host's, most of the time
		if rng.IntN(3) == 0 {
			clock = uint64(rng.IntN(32)) // before a restart of its host
		}
		l := link.Backlink{
			Target:   link.RecordID{RKey: uint64(rng.IntN(5000)), Collection: 3, DID: 9},
			Source:   link.RecordID{RKey: rng.Uint64()&^(1<<clockBits-1) | clock, Collection: 5, DID: acct},
			Location: link.Location(rng.IntN(4)), SourceRev: 1000 + acct, // a backfill: one rev an account
		}
		var b [link.BacklinkSize]byte
		l.Put(b[:])
		recs = append(recs, b[:]...)
	}
	SortRecords(recs, f.Width)
	recs = Fold(f, recs)
	out := writeAndCompact(t, store, cat, recs, 256<<10)
	if len(out.Tables) < 8 {
		t.Fatalf("%d output tables, want at least 8", len(out.Tables))
	}

	// The first table holds the dictionary, every other one names it.
	var sharedMeta, ownMeta int
	for i, ref := range out.Tables {
		tm, err := cat.Load(ctx, TreeLinks, ref)
		if err != nil {
			t.Fatal(err)
		}
		want := out.Tables[0].ID
		if i == 0 {
			want = ""
		}
		if got := tm.DictTable(); got != want {
			t.Fatalf("table %d refers to the dictionary of %q, want %q", i, got, want)
		}
		if tm.dict == nil || tm.dict.len() < 1000 {
			t.Fatalf("table %d: a dictionary of %d entries", i, tm.dict.len())
		}
		sharedMeta += tm.MetaBytes
		// The same records with a dictionary of their own.
		own, err := readTable(ctx, store, ref, tm)
		if err != nil {
			t.Fatal(err)
		}
		_, meta, err := BuildTable(f, own, TableOptions{ShardBits: ref.ShardBits, Shard: ref.Shard, FilterBits: filterBitsOf(TreeLinks)})
		if err != nil {
			t.Fatal(err)
		}
		ownMeta += len(meta)
	}
	if sharedMeta*2 > ownMeta {
		t.Fatalf("metas of %d bytes with a shared dictionary, %d with one a table: want less than half", sharedMeta, ownMeta)
	}
	t.Logf("%d tables: metas of %d bytes with a shared dictionary, %d with one a table", len(out.Tables), sharedMeta, ownMeta)

	// Every catalog decodes every table to the same records: mapped from
	// a fetch (a node that never saw the run), then mapped from its local
	// files (the node restarted), then decoded from the bucket.
	dir := t.TempDir()
	for _, c := range []*Catalog{NewCatalogMapped(dir, store), NewCatalogMapped(dir, store), NewCatalogBounded(t.TempDir(), store, 1)} {
		if got := readRunSorted(t, store, c, out); !bytes.Equal(got, recs) {
			t.Fatalf("the compacted run decodes to %d records, want %d", len(got)/f.Width, len(recs)/f.Width)
		}
	}

	// A reference to a table that is not the dictionary's (another
	// referring one) is corruption, not a crash or wrong records.
	meta, err := store.Get(ctx, metaKey(TreeLinks, out.Tables[1].ID))
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := hex.DecodeString(out.Tables[0].ID)
	other, _ := hex.DecodeString(out.Tables[2].ID)
	at := bytes.Index(meta, owner)
	if at < 4 || binary.LittleEndian.Uint32(meta[at-4:]) != dictRefMark {
		t.Fatal("no dictionary reference in a referring table's meta")
	}
	refer := func(to []byte) []byte {
		b := bytes.Clone(meta)
		copy(b[at:], to)
		binary.LittleEndian.PutUint64(b[len(b)-8:], xxh3.Hash(b[:len(b)-8]))
		return b
	}
	// Two tables that refer to each other (a loop), put in the store so
	// that each is fetched as the other's dictionary.
	idA, idB := NewID(), NewID()
	binA, _ := hex.DecodeString(idA)
	binB, _ := hex.DecodeString(idB)
	for id, b := range map[string][]byte{idA: refer(binB), idB: refer(binA)} {
		if err := store.Put(ctx, metaKey(TreeLinks, id), b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*Catalog{NewCatalog(t.TempDir(), store), NewCatalogMapped(t.TempDir(), store)} {
		for what, b := range map[string][]byte{"another referring table": refer(other), "a loop": refer(binB)} {
			_, err := c.Add(TreeLinks, idA, b)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a reference to %s: %v, want a *CorruptError", what, err)
			}
		}
	}
}

// readTable decodes every frame of a table.
// writeAndCompact writes recs (sorted backlinks) as a run of the links
// tree and compacts it alone into a run of shards of at most shardBytes,
// which share one account dictionary.
func writeAndCompact(t *testing.T, store objstore.Store, cat *Catalog, recs []byte, shardBytes uint64) Run {
	t.Helper()
	ctx := context.Background()
	in, err := WriteRun(ctx, store, cat, TreeLinks, RunDelta, 0, recs)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := (&Manifest{}).Apply(Edit{Base: 0, Add: []Run{in}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := OpenView(ctx, cat, m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := CompactRuns(ctx, store, cat, v, []Run{in}, CompactOptions{ShardBytesMax: shardBytes, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readRunSorted reads every table of a run of the links tree through
// cat, the referring tables before the one holding the dictionary, and
// returns their records sorted (the tables split the targets by hash).
func readRunSorted(t *testing.T, store objstore.Store, cat *Catalog, run Run) []byte {
	t.Helper()
	ctx := context.Background()
	var got []byte
	for i := len(run.Tables) - 1; i >= 0; i-- {
		ref := run.Tables[i]
		tm, err := cat.Load(ctx, TreeLinks, ref)
		if err != nil {
			t.Fatal(err)
		}
		part, err := readTable(ctx, store, ref, tm)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, part...)
	}
	SortRecords(got, BacklinkFormat.Width)
	return got
}

func readTable(ctx context.Context, store interface {
	Get(context.Context, string) ([]byte, error)
}, ref TableRef, tm *TableMeta) ([]byte, error) {
	data, err := store.Get(ctx, dataKey(TreeLinks, ref.ID))
	if err != nil {
		return nil, err
	}
	var out []byte
	for i := range tm.NumFrames() {
		off, n := tm.ByteRange(i, i)
		recs, err := tm.DecodeFrame(i, data[off:off+n], nil)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}
