package lsm

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
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
			recs = appendBacklink(recs, l)
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
	// tableRecs is a table's records, decoded (its run's dictionary from
	// owner, the run's first table, when it shares one).
	tableRecs := func(ref, owner TableRef) []byte {
		t.Helper()
		return linksTableRecords(t, store, cat, ref, owner)
	}
	countEvery := false
	check := func(name string, inputs []Run, want []byte, most uint64, open int64) Run {
		t.Helper()
		var n uint64
		for _, r := range inputs {
			n += r.Records()
		}
		wantBits := compactionBits(0, n*uint64(f.Width), CompactOptions{ShardBytesMax: most})
		// A table split over several output shards is spilled; one of
		// a single output shard (its run's shards as fine, or finer) is
		// merged as it is decoded.
		var tables int64
		for _, r := range inputs {
			if runShardBits(r) < wantBits {
				tables += int64(len(r.Tables))
			}
		}
		spills0 := spillsCreated.Load()
		spillsOpenPeak.Store(0)
		out, err := CompactRuns(ctx, store, cat, v, inputs, CompactOptions{ShardBytesMax: most, SpillDir: spillDir, CountEvery: countEvery})
		if err != nil {
			t.Fatal(err)
		}
		if n := spillsCreated.Load() - spills0; n != tables {
			t.Fatalf("%s, shard bytes %d: %d spill files, want one a table split by output shard, %d", name, most, n, tables)
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
			recs := tableRecs(ref, out.Tables[0])
			for o := 0; o < len(recs); o += f.Width {
				if ShardOf(recs[o:o+f.PrefixLen], ref.ShardBits) != ref.Shard {
					t.Fatalf("%s: a record of shard %d in table of shard %d", name, ShardOf(recs[o:o+f.PrefixLen], ref.ShardBits), ref.Shard)
				}
			}
			got = append(got, recs...)
		}
		SortRecords(got, f.Width)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s, shard bytes %d: %d records, want %d (or the same number, different)", name, most, len(got)/f.Width, len(want)/f.Width)
		}
		if left, _ := filepath.Glob(filepath.Join(spillDir, "*")); len(left) != 0 {
			t.Fatalf("spill files left: %v", left)
		}
		return out
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
		small = appendBacklink(small, l)
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
	out := check("compacted runs and a small delta run", mixed, wantMixed, 4<<10, int64(len(mixed)))
	if tables := int64(2 + 4 + 8 + 1); spillsOpenPeak.Load() >= tables {
		t.Fatalf("%d spill files at once of %d tables: the test shows nothing", spillsOpenPeak.Load(), tables)
	}
	// Its dictionary was counted on output shard 0's records alone, in
	// the inputs' order.
	l, _ := columnsLayout(f, TableFormatVersion)
	sample, every := newDictCounter(l), newDictCounter(l)
	bits := out.Tables[0].ShardBits
	for _, r := range mixed {
		for _, ref := range r.Tables {
			recs := tableRecs(ref, r.Tables[0])
			every.add(recs)
			for o := 0; o < len(recs); o += f.Width {
				if ShardOf(recs[o:o+f.PrefixLen], bits) == 0 {
					sample.add(recs[o : o+f.Width])
				}
			}
		}
	}
	// outDict is the dictionary stored in run out's first table.
	outDict := func(out Run) *accountDict {
		t.Helper()
		mb, err := store.Get(ctx, metaKey(TreeLinks, out.Tables[0].ID))
		if err != nil {
			t.Fatal(err)
		}
		om, err := DecodeMeta(mb)
		if err != nil {
			t.Fatal(err)
		}
		return om.dict
	}
	sameDict := func(a, b *accountDict) bool {
		if a.len() != b.len() || a.hasRevs() != b.hasRevs() {
			return false
		}
		for i := range a.len() {
			ad, ac := a.account(i)
			bd, bc := b.account(i)
			if ad != bd || ac != bc || (a.hasRevs() && a.rev(i) != b.rev(i)) {
				return false
			}
		}
		return true
	}
	if d := outDict(out); d == nil || !sameDict(d, sample.dict()) {
		t.Fatalf("the output's dictionary is not the one counted on output shard 0's records")
	}
	if sameDict(every.dict(), sample.dict()) {
		t.Fatalf("every record and output shard 0's give the same dictionary: the test shows nothing")
	}
	// A full compaction's (CountEvery) is counted on every record, in a
	// pass of its own: the same output records.
	countEvery = true
	out = check("compacted runs and a small delta run, every record counted", mixed, wantMixed, 4<<10, int64(len(mixed)))
	countEvery = false
	if d := outDict(out); d == nil || !sameDict(d, every.dict()) {
		t.Fatalf("with CountEvery, the output's dictionary is not the one counted on every record")
	}
	// Output shards so large that the compacted runs of 2 and 3 shard
	// bits are merged from their tables as they are decoded, the others
	// spilled: the dictionary is still counted on output shard 0's
	// records in the inputs' order (the direct tables in a pass of their
	// own), so it is the one counted from the tables above.
	var mixedBytes uint64
	for _, r := range mixed {
		mixedBytes += r.Records() * uint64(f.Width)
	}
	out = check("compacted runs and a small delta run, some tables direct", mixed, wantMixed, mixedBytes/3, 0)
	if bits := out.Tables[0].ShardBits; bits != 2 {
		t.Fatalf("%d output shard bits, want 2 (so that some tables are direct and some spilled)", bits)
	}
	sample = newDictCounter(l)
	for _, r := range mixed {
		for _, ref := range r.Tables {
			recs := tableRecs(ref, r.Tables[0])
			for o := 0; o < len(recs); o += f.Width {
				if ShardOf(recs[o:o+f.PrefixLen], 2) == 0 {
					sample.add(recs[o : o+f.Width])
				}
			}
		}
	}
	if d := outDict(out); d == nil || !sameDict(d, sample.dict()) {
		t.Fatalf("with direct tables, the output's dictionary is not the one counted on output shard 0's records")
	}
	// Pending blocks past their bound are written early, shorter: the
	// same output.
	defer func(n int) { spillPendMax = n }(spillPendMax)
	spillPendMax = 2 << 10
	check("compacted runs and a small delta run, small pending bound", mixed, wantMixed, 4<<10, int64(len(mixed)))
}

// appendBacklink appends l's record to recs.
func appendBacklink(recs []byte, l link.Backlink) []byte {
	var b [link.BacklinkSize]byte
	l.Put(b[:])
	return append(recs, b[:]...)
}

// failingStore fails the Get of a table's data object after ok of them.
type failingStore struct {
	objstore.Store
	ok atomic.Int64
}

var errInjected = errors.New("injected failure")

func (s *failingStore) Get(ctx context.Context, key string) ([]byte, error) {
	if strings.HasSuffix(key, ".data") {
		if s.ok.Add(-1) < 0 {
			return nil, errInjected
		}
	}
	return s.Store.Get(ctx, key)
}

// A compaction that fails part way (a table it cannot read), or whose
// context is cancelled, removes every spill file it made.
func TestCompactRunsRemovesSpillsOnError(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	f := BacklinkFormat
	var runs []Run
	for r := range 3 {
		var recs []byte
		for i := range 4000 {
			l := link.Backlink{
				Target: link.RecordID{RKey: uint64(i % 500), Collection: 3, DID: 9},
				Source: link.RecordID{RKey: uint64(i), Collection: 5, DID: uint64(r)}, SourceRev: 1,
			}
			recs = appendBacklink(recs, l)
		}
		SortRecords(recs, f.Width)
		run, err := WriteRun(ctx, store, cat, TreeLinks, RunCompacted, 2, recs)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	v := viewOfRuns(t, cat, runs)
	for _, ok := range []int64{0, 3, 7} {
		spillDir := t.TempDir()
		fs := &failingStore{Store: store}
		fs.ok.Store(ok)
		spills0 := spillsCreated.Load()
		_, err := CompactRuns(ctx, fs, cat, v, runs, CompactOptions{ShardBytesMax: 4 << 10, SpillDir: spillDir})
		if !errors.Is(err, errInjected) {
			t.Fatalf("after %d tables: %v, want the injected failure", ok, err)
		}
		if made := spillsCreated.Load() - spills0; made < ok {
			t.Fatalf("after %d tables: %d spill files made: the test shows nothing", ok, made)
		}
		if left, _ := filepath.Glob(filepath.Join(spillDir, "*")); len(left) != 0 {
			t.Fatalf("after %d tables: spill files left: %v", ok, left)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	spillDir := t.TempDir()
	if _, err := CompactRuns(cctx, store, cat, v, runs, CompactOptions{ShardBytesMax: 4 << 10, SpillDir: spillDir}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(spillDir, "*")); len(left) != 0 {
		t.Fatalf("cancelled: spill files left: %v", left)
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

// viewOfRuns opens the view of a manifest holding runs alone.
func viewOfRuns(t *testing.T, cat *Catalog, runs []Run) *View {
	t.Helper()
	m, _, err := (&Manifest{}).Apply(Edit{Base: 0, Add: runs})
	if err != nil {
		t.Fatal(err)
	}
	v, err := OpenView(context.Background(), cat, m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A merge of flushes aligned to the next merge (AlignFanIn) writes the
// shards that merge needs, so the merge of such runs splits nothing into
// a spill; without the alignment the same merge spills every table.
func TestAlignedMergeSpillsNothing(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	f := BacklinkFormat
	rng := rand.New(rand.NewPCG(5, 8))
	var flushes []Run
	var all []byte
	for r := range 4 {
		var recs []byte
		for i := range 3000 {
			l := link.Backlink{
				Target: link.RecordID{RKey: uint64(rng.IntN(2000)), Collection: 3, DID: 9},
				Source: link.RecordID{RKey: uint64(r*10000 + i), Collection: 5, DID: uint64(rng.IntN(50))},
			}
			recs = appendBacklink(recs, l)
		}
		SortRecords(recs, f.Width)
		all = append(all, recs...)
		run, err := WriteRun(ctx, store, cat, TreeLinks, RunDelta, 0, recs)
		if err != nil {
			t.Fatal(err)
		}
		flushes = append(flushes, run)
	}
	SortRecords(all, f.Width)
	all = Fold(f, all)
	const target = 16 << 10 // a shard per 16 KiB of input tables: several
	for _, aligned := range []bool{true, false} {
		m, _, err := (&Manifest{}).Apply(Edit{Base: 0, Add: flushes})
		if err != nil {
			t.Fatal(err)
		}
		// Two merges of two flushes each, then the merge of their outputs.
		var merged []Run
		for _, pair := range [][]Run{flushes[:2], flushes[2:]} {
			v, err := OpenView(ctx, cat, m)
			if err != nil {
				t.Fatal(err)
			}
			opt := CompactOptions{ShardTargetBytes: target}
			opt.ForMerge(pair, false, 2)
			if !opt.Fast || opt.AlignFanIn != MergedFanIn(2) {
				t.Fatalf("a merge of flushes: options %+v", opt)
			}
			if !aligned {
				opt.AlignFanIn = 0
			}
			out, err := CompactRuns(ctx, store, cat, v, pair, opt)
			if err != nil {
				t.Fatal(err)
			}
			merged = append(merged, out)
		}
		m, _, err = (&Manifest{}).Apply(Edit{Base: 0, Add: merged})
		if err != nil {
			t.Fatal(err)
		}
		v, err := OpenView(ctx, cat, m)
		if err != nil {
			t.Fatal(err)
		}
		opt := CompactOptions{ShardTargetBytes: target}
		opt.ForMerge(merged, false, 2)
		if opt.Fast || opt.AlignFanIn != 0 {
			t.Fatalf("a merge of merged runs: options %+v", opt)
		}
		spills := spillsCreated.Load()
		out, err := CompactRuns(ctx, store, cat, v, merged, opt)
		if err != nil {
			t.Fatal(err)
		}
		split := spillsCreated.Load() - spills
		if aligned && split != 0 {
			t.Fatalf("aligned: the merge of merged runs spilled %d tables", split)
		}
		if !aligned && split == 0 {
			t.Fatal("not aligned: the merge of merged runs spilled nothing, the test shows nothing")
		}
		var got []byte
		for _, ref := range out.Tables {
			got = append(got, linksTableRecords(t, store, cat, ref, out.Tables[0])...)
		}
		SortRecords(got, f.Width)
		if !bytes.Equal(got, all) {
			t.Fatalf("aligned %v: %d records, want %d (or different)", aligned, len(got)/f.Width, len(all)/f.Width)
		}
	}
}

// linksTableRecords is a links table's records, decoded (its run's
// dictionary from owner, the run's first table, when it shares one).
func linksTableRecords(t *testing.T, store objstore.Store, cat *Catalog, ref, owner TableRef) []byte {
	t.Helper()
	ctx := context.Background()
	data, err := store.Get(ctx, dataKey(TreeLinks, ref.ID))
	if err != nil {
		t.Fatal(err)
	}
	meta, err := cat.Load(ctx, TreeLinks, ref)
	if err != nil {
		t.Fatal(err)
	}
	if meta.DictTable() != "" {
		om, err := cat.Load(ctx, TreeLinks, owner)
		if err != nil {
			t.Fatal(err)
		}
		if err := meta.UseDictOf(om); err != nil {
			t.Fatal(err)
		}
	}
	return decodeFrames(t, meta, data)
}

// decodeFrames is the records of every frame of a table (meta, its data
// object data), decoded in order.
func decodeFrames(t *testing.T, meta *TableMeta, data []byte) []byte {
	t.Helper()
	var recs []byte
	for i := range meta.NumFrames() {
		off, n := meta.ByteRange(i, i)
		fr, err := meta.DecodeFrame(i, data[off:off+n], nil)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, fr...)
	}
	return recs
}
