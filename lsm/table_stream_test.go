package lsm

import (
	"bytes"
	"context"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
)

// TestTableWriterMatchesBuildTable: a fast-form table written a record
// at a time is BuildTable's to the byte (data and meta), for one frame and
// many, frames cut at a prefix boundary and at perFrame, sharded or not,
// both filter widths; and the writer refuses what BuildTable refuses.
func TestTableWriterMatchesBuildTable(t *testing.T) {
	w := BacklinkFormat.Width
	recs := synthBacklinks(11, 20000)
	SortRecords(recs, w)
	recs = Fold(BacklinkFormat, recs)
	shardOf := func(bits uint8, shard uint32) []byte {
		var out []byte
		for o := 0; o < len(recs); o += w {
			if ShardOf(recs[o:o+BacklinkFormat.PrefixLen], bits) == shard {
				out = append(out, recs[o:o+w]...)
			}
		}
		return out
	}
	layout, _ := columnsLayout(BacklinkFormat, TableFormatVersion)
	counter := newDictCounter(layout)
	counter.add(recs)
	dict := counter.dict()
	owner := bytes.Repeat([]byte{0xab}, 16)
	cases := []struct {
		name string
		recs []byte
		opt  TableOptions
	}{
		{"one record", recs[:w], TableOptions{Fast: true}},
		{"default frames", recs, TableOptions{Fast: true}},
		{"frames of 64", recs, TableOptions{Fast: true, frameMax: 64}},
		{"frames of 7", recs[:300*w], TableOptions{Fast: true, frameMax: 7, FilterBits: FilterBits16}},
		{"shard 3 of 2 bits", shardOf(2, 3), TableOptions{Fast: true, ShardBits: 2, Shard: 3, frameMax: 100, FilterBits: FilterBits8}},
		{"a seed", recs[:5000*w], TableOptions{Fast: true, FilterSeed: 99, frameMax: 333}},
		{"blocked filter", recs[:5000*w], TableOptions{Fast: true, FilterSeed: 7, frameMax: 200, FilterBits: FilterBlocked}},
		{"blocked filter, shard 1 of 2 bits", shardOf(2, 1), TableOptions{Fast: true, ShardBits: 2, Shard: 1, FilterBits: FilterBlocked}},
		// Columns with a run's shared dictionary (a merge into columns):
		// the run's first table holds it, the others name that table.
		{"columns, the dictionary's table", shardOf(2, 3), TableOptions{ShardBits: 2, Shard: 3, sharedDict: dict, frameMax: 100}},
		{"columns, another table of the run", shardOf(2, 1), TableOptions{ShardBits: 2, Shard: 1, sharedDict: dict, dictOwner: owner, FilterBits: FilterBits8}},
		{"columns, default frames", recs, TableOptions{sharedDict: dict, dictOwner: owner}},
		{"columns, frames of 5", recs[:200*w], TableOptions{sharedDict: dict, frameMax: 5}},
	}
	// One writer for every case: after the first, each starts from the
	// last one's buffers and state (reset), as a merge's writers do.
	tw := &tableWriter{}
	for _, c := range cases {
		data, meta, err := BuildTable(BacklinkFormat, c.recs, c.opt)
		if err != nil {
			t.Fatalf("%s: BuildTable: %v", c.name, err)
		}
		if err := tw.reset(BacklinkFormat, c.opt, len(c.recs)/w/3); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for o := 0; o < len(c.recs); o += w {
			if err := tw.add(c.recs[o : o+w]); err != nil {
				t.Fatalf("%s: add: %v", c.name, err)
			}
		}
		if tw.records() != len(c.recs)/w {
			t.Fatalf("%s: %d records, want %d", c.name, tw.records(), len(c.recs)/w)
		}
		d2, m2, err := tw.finish()
		if err != nil {
			t.Fatalf("%s: finish: %v", c.name, err)
		}
		if !bytes.Equal(d2, data) || !bytes.Equal(m2, meta) {
			t.Fatalf("%s: written a record at a time: data %d bytes, meta %d; BuildTable's %d, %d (equal: %v, %v)",
				c.name, len(d2), len(m2), len(data), len(meta), bytes.Equal(d2, data), bytes.Equal(m2, meta))
		}
		m, err := DecodeMeta(m2)
		if err != nil {
			t.Fatal(err)
		}
		if c.opt.frameMax > 0 && len(c.recs)/w > 2*c.opt.frameMax && m.NumFrames() < 2 {
			t.Fatalf("%s: %d frames: the case does not test frame cuts", c.name, m.NumFrames())
		}
	}

	refuse := func(what string, recs []byte, opt TableOptions, want string) {
		t.Helper()
		tw, err := newTableWriter(BacklinkFormat, opt, 0)
		if err == nil {
			for o := 0; o < len(recs) && err == nil; o += w {
				err = tw.add(recs[o : o+w])
			}
			if err == nil {
				_, _, err = tw.finish()
			}
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want an error with %q", what, err, want)
		}
	}
	swapped := bytes.Clone(recs[:10*w])
	copy(swapped[4*w:5*w], recs[5*w:6*w])
	copy(swapped[5*w:6*w], recs[4*w:5*w])
	refuse("out of order", swapped, TableOptions{Fast: true}, "out of order")
	dup := append(bytes.Clone(recs[:3*w]), recs[2*w:3*w]...)
	refuse("duplicated", dup, TableOptions{Fast: true}, "duplicated")
	refuse("wrong shard", shardOf(2, 1), TableOptions{Fast: true, ShardBits: 2, Shard: 3}, "is in shard 1")
	refuse("neither fast nor columns", recs[:w], TableOptions{}, "neither Fast nor with a shared dictionary")
	refuse("old version", recs[:w], TableOptions{Fast: true, version: 10}, "format version 10")
	refuse("no records", nil, TableOptions{Fast: true}, "no records")
}

// TestTableWriterCatchesMismatch: the writer's self-check fails on a
// frame that decodes to other records than its own (a bit flipped between
// the shuffle and S2, as a faulty transform would), on a filter key that
// is not its prefix's (recomputed from the decoded frame), and, at the
// end, on a meta that differs from what was built: a frame's entry or
// fence, a key the filter lacks, another seed, keys not all checked.
func TestTableWriterCatchesMismatch(t *testing.T) {
	w := BacklinkFormat.Width
	recs := synthBacklinks(3, 500)
	SortRecords(recs, w)
	recs = Fold(BacklinkFormat, recs)
	start := func() *tableWriter {
		t.Helper()
		tw, err := newTableWriter(BacklinkFormat, TableOptions{Fast: true, frameMax: 50}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for o := 0; o < 20*w; o += w {
			if err := tw.add(recs[o : o+w]); err != nil {
				t.Fatal(err)
			}
		}
		return tw
	}
	tw := start()
	fastEncodeHook = func(shuffled []byte) { shuffled[len(shuffled)/2] ^= 1 }
	err := tw.cut(len(tw.pend) / w)
	fastEncodeHook = nil
	if err == nil || !strings.Contains(err.Error(), "decodes to different records") {
		t.Fatalf("a frame encoded wrong: %v", err)
	}
	tw = start()
	tw.b.keys[len(tw.b.keys)/2] ^= 1 << 40
	if err := tw.cut(len(tw.pend) / w); err == nil || !strings.Contains(err.Error(), "not the one collected") {
		t.Fatalf("a filter key not its prefix's: %v", err)
	}

	// The meta: a table finished, then the writer's record of it changed.
	tw, data, meta := writeWith(t, TableOptions{Fast: true, frameMax: 50}, recs)
	if err := tw.verifyMeta(data, meta); err != nil {
		t.Fatalf("the table as built: %v", err)
	}
	for _, c := range []struct {
		what   string
		change func(b *tableBuild) func()
		want   string
	}{
		{"a frame's checksum", func(b *tableBuild) func() { b.frames[1].sum ^= 1; return func() { b.frames[1].sum ^= 1 } }, "entry differs"},
		{"a frame's records", func(b *tableBuild) func() { b.frames[2].n++; return func() { b.frames[2].n-- } }, "entry differs"},
		{"a fence", func(b *tableBuild) func() { b.fences[3*w+5] ^= 1; return func() { b.fences[3*w+5] ^= 1 } }, "entry differs"},
		{"the seed", func(b *tableBuild) func() { b.seed++; return func() { b.seed-- } }, "filter's seed"},
		{"a key the filter lacks", func(b *tableBuild) func() {
			k := b.keys[4]
			b.keys[4] = 0x0123456789abcdef
			return func() { b.keys[4] = k }
		}, "filter misses key"},
		{"one key more", func(b *tableBuild) func() {
			b.keys = append(b.keys, 7)
			return func() { b.keys = b.keys[:len(b.keys)-1] }
		}, "decoded meta differs"},
		{"a key not checked", func(*tableBuild) func() { tw.checked--; return func() { tw.checked++ } }, "prefixes in the frames"},
	} {
		undo := c.change(&tw.b)
		err := tw.verifyMeta(data, meta)
		undo()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want an error with %q", c.what, err, c.want)
		}
	}
}

// TestRoutedMergeMatchesSpilled: a merge of flushes into the fast form in
// several shards (mergeRouted: one pass, each record routed to its shard's
// table) writes the same tables to the byte as splitting the flushes into
// spills and merging shard by shard, spills nothing, and folds a link
// repeated with a newer rev in a later flush, as Fold does.
func TestRoutedMergeMatchesSpilled(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	rng := rand.New(rand.NewPCG(21, 4))
	flushes := repeatingFlushes(t, store, cat, rng, 5, func(r, i int) link.Backlink {
		return link.Backlink{
			Target:    link.RecordID{RKey: uint64(rng.IntN(1500)), Collection: 3, DID: 9},
			Source:    link.RecordID{RKey: uint64(r*10000 + i), Collection: 5, DID: uint64(rng.IntN(50))},
			SourceRev: uint64(r*10 + 1),
		}
	})
	m, _, err := (&Manifest{}).Apply(Edit{Base: 0, Add: flushes})
	if err != nil {
		t.Fatal(err)
	}
	v, err := OpenView(ctx, cat, m)
	if err != nil {
		t.Fatal(err)
	}
	var total, data uint64
	for _, r := range flushes {
		total += r.Records()
		data += r.Bytes()
	}
	// Above its memory bound, the same merge is split into spills.
	defer func(m uint64) { routedMergeBytesMax = m }(routedMergeBytesMax)
	routedMergeBytesMax = 2*data - 1
	opt := CompactOptions{ShardTargetBytes: 8 << 10}
	opt.ForMerge(flushes, false, 4)
	spills := spillsCreated.Load()
	if _, err := CompactRuns(ctx, store, cat, v, flushes, opt); err != nil {
		t.Fatal(err)
	}
	if n := spillsCreated.Load() - spills; n != int64(len(flushes)) {
		t.Fatalf("a merge above routedMergeBytesMax: %d spills, want %d", n, len(flushes))
	}
	routedMergeBytesMax = 2 * data
	// One shard (a control: nothing to route, both read the flushes as
	// they are), some and many.
	for _, target := range []uint64{1 << 62, 64 << 10, 8 << 10} {
		var outs [2]Run
		for k, noRoute := range []bool{false, true} {
			opt := CompactOptions{ShardTargetBytes: target, noRoute: noRoute}
			opt.ForMerge(flushes, false, 4)
			if !opt.Fast {
				t.Fatalf("a merge of flushes: options %+v", opt)
			}
			spills := spillsCreated.Load()
			out, err := CompactRuns(ctx, store, cat, v, flushes, opt)
			if err != nil {
				t.Fatal(err)
			}
			split := spillsCreated.Load() - spills
			bits := out.Tables[0].ShardBits
			if want := int64(0); noRoute && bits > 0 {
				want = int64(len(flushes))
				if split != want {
					t.Fatalf("shard target %d, spilled: %d spills, want %d", target, split, want)
				}
			} else if split != 0 {
				t.Fatalf("shard target %d, routed (%d bits): %d spills", target, bits, split)
			}
			outs[k] = out
		}
		a, b := outs[0], outs[1]
		if bits := a.Tables[0].ShardBits; (target == 1<<62) != (bits == 0) {
			t.Fatalf("shard target %d: %d shard bits", target, bits)
		}
		if a.Records() >= total || a.Records() != b.Records() {
			t.Fatalf("shard target %d: %d records routed, %d spilled, of %d: the repeated links not folded", target, a.Records(), b.Records(), total)
		}
		if len(a.Tables) != len(b.Tables) || (target == 8<<10 && a.Tables[0].ShardBits < 3) {
			t.Fatalf("shard target %d: %d tables routed, %d spilled (%d bits)", target, len(a.Tables), len(b.Tables), a.Tables[0].ShardBits)
		}
		for i := range a.Tables {
			x, y := a.Tables[i], b.Tables[i]
			if x.Shard != y.Shard || x.ShardBits != y.ShardBits || x.Records != y.Records {
				t.Fatalf("shard target %d, table %d: %+v routed, %+v spilled", target, i, x, y)
			}
			for _, key := range []func(Tree, string) string{dataKey, metaKey} {
				dx, dy := getPair(t, store, key(TreeLinks, x.ID), key(TreeLinks, y.ID))
				if !bytes.Equal(dx, dy) {
					t.Fatalf("shard target %d, table %d (shard %d): %s differs", target, i, x.Shard, key(TreeLinks, "…"))
				}
			}
			// A merge of flushes writes the fast form's blocked filter.
			mb, err := store.Get(ctx, metaKey(TreeLinks, x.ID))
			if err != nil {
				t.Fatal(err)
			}
			if m, err := DecodeMeta(mb); err != nil || m.filterBits != FilterBlocked || m.transform != transformShuffleS2 {
				t.Fatalf("shard target %d, table %d: %v, %v", target, i, m, err)
			}
		}
	}
}

// repeatingFlushes writes n flushes of 4000 links each, link i of flush
// r made by mk(r, i), but for about one in six of a later flush's, which
// repeats a link of the flush before it at a newer rev (a merge folds
// those to the newest).
func repeatingFlushes(t *testing.T, store objstore.Store, cat *Catalog, rng *rand.Rand, n int, mk func(r, i int) link.Backlink) []Run {
	t.Helper()
	var flushes []Run
	var prev []link.Backlink
	for r := range n {
		var recs []byte
		var ls []link.Backlink
		for i := range 4000 {
			var l link.Backlink
			if len(prev) > 0 && rng.IntN(6) == 0 {
				l = prev[rng.IntN(len(prev))]
				l.SourceRev += uint64(1 + rng.IntN(3))
			} else {
				l = mk(r, i)
			}
			ls = append(ls, l)
			recs = appendBacklink(recs, l)
		}
		prev = ls
		flushes = append(flushes, writeFlush(t, store, cat, recs))
	}
	return flushes
}

// writeFlush writes recs (backlinks in any order), sorted and folded as a
// memtable's, as a flush of the links tree.
func writeFlush(tb testing.TB, store objstore.Store, cat *Catalog, recs []byte) Run {
	tb.Helper()
	SortRecords(recs, BacklinkFormat.Width)
	recs = Fold(BacklinkFormat, recs)
	run, err := WriteRun(context.Background(), store, cat, TreeLinks, RunDelta, 0, recs)
	if err != nil {
		tb.Fatal(err)
	}
	return run
}

// buildFastTable (a flush's table, through a kept writer) makes
// BuildTable's bytes, table after table with the writer reused, and
// refuses what BuildTable refuses.
func TestBuildFastTableMatchesBuildTable(t *testing.T) {
	for i, n := range []int{20000, 3, 7000, 1} {
		recs := synthBacklinks(uint64(40+i), n)
		SortRecords(recs, BacklinkFormat.Width)
		recs = Fold(BacklinkFormat, recs)
		opt := TableOptions{Fast: true, FilterBits: FilterBits8}
		wantData, wantMeta, err := BuildTable(BacklinkFormat, recs, opt)
		if err != nil {
			t.Fatal(err)
		}
		data, meta, done, err := buildFastTable(BacklinkFormat, recs, opt)
		if err != nil {
			t.Fatalf("table %d (%d records): %v", i, n, err)
		}
		if !bytes.Equal(data, wantData) || !bytes.Equal(meta, wantMeta) {
			t.Fatalf("table %d (%d records): bytes differ from BuildTable's", i, n)
		}
		done()
	}
	recs := synthBacklinks(9, 100)
	SortRecords(recs, BacklinkFormat.Width)
	for _, bad := range [][]byte{nil, recs[:100], append(slices.Clone(recs[64:128]), recs[:64]...)} {
		if _, _, _, err := buildFastTable(BacklinkFormat, bad, TableOptions{Fast: true}); err == nil {
			t.Fatalf("%d bytes of records (empty, partial or out of order): no error", len(bad))
		}
	}
}

// A merge into columns writes each output shard's table a record at a
// time (writeShard): the same tables, to the byte, as merging the shard
// into a buffer first (noStream), from flushes (split into spills) and
// from runs already sharded as the output (read directly), with the
// dictionary counted on all the records or on a sample of the first
// shards, and links repeated at newer revs folded.
func TestColumnMergeStreamedMatchesBuffered(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	rng := rand.New(rand.NewPCG(7, 9))
	flushes := repeatingFlushes(t, store, cat, rng, 6, func(r, i int) link.Backlink {
		return link.Backlink{
			Target:    link.RecordID{RKey: uint64(rng.IntN(1500)), Collection: 3, DID: uint64(rng.IntN(40))},
			Source:    link.RecordID{RKey: uint64(r*10000+i) << 10, Collection: 5, DID: uint64(rng.IntN(60))},
			SourceRev: uint64(r*10 + 1),
		}
	})
	var total uint64
	for _, r := range flushes {
		total += r.Records()
	}
	// Two merges of flushes in the fast form, sharded as the merge into
	// columns below will be (its inputs then read directly).
	const target = 8 << 10
	var merged []Run
	for _, in := range [][]Run{flushes[:3], flushes[3:]} {
		m, _, err := (&Manifest{}).Apply(Edit{Base: 0, Add: in})
		if err != nil {
			t.Fatal(err)
		}
		v, err := OpenView(ctx, cat, m)
		if err != nil {
			t.Fatal(err)
		}
		out, err := CompactRuns(ctx, store, cat, v, in, CompactOptions{ShardTargetBytes: target, Fast: true})
		if err != nil {
			t.Fatal(err)
		}
		merged = append(merged, out)
	}
	defer func(n uint64) { dictSampleRecords = n }(dictSampleRecords)
	for _, c := range []struct {
		name   string
		inputs []Run
		sample uint64
	}{
		{"flushes, every record counted", flushes, 1 << 25},
		{"flushes, a sample counted", flushes, 3000},
		{"merged runs, every record counted", merged, 1 << 25},
		{"merged runs, a sample counted", merged, 3000},
	} {
		dictSampleRecords = c.sample
		m, _, err := (&Manifest{}).Apply(Edit{Base: 0, Add: c.inputs})
		if err != nil {
			t.Fatal(err)
		}
		v, err := OpenView(ctx, cat, m)
		if err != nil {
			t.Fatal(err)
		}
		var outs [2]Run
		for k, noStream := range []bool{false, true} {
			written := shardsWritten.Load()
			out, err := CompactRuns(ctx, store, cat, v, c.inputs, CompactOptions{ShardTargetBytes: target, noStream: noStream})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			bits := out.Tables[0].ShardBits
			if n := shardsWritten.Load() - written; (n == int64(1)<<bits) == noStream || bits < 2 {
				t.Fatalf("%s (noStream %v): %d of %d shards written record by record", c.name, noStream, n, 1<<bits)
			}
			outs[k] = out
		}
		a, b := outs[0], outs[1]
		if a.Records() >= total || a.Records() != b.Records() || len(a.Tables) != len(b.Tables) {
			t.Fatalf("%s: %d records in %d tables streamed, %d in %d buffered, of %d", c.name, a.Records(), len(a.Tables), b.Records(), len(b.Tables), total)
		}
		for i := range a.Tables {
			x, y := a.Tables[i], b.Tables[i]
			if x.Shard != y.Shard || x.ShardBits != y.ShardBits || x.Records != y.Records {
				t.Fatalf("%s, table %d: %+v streamed, %+v buffered", c.name, i, x, y)
			}
			for _, key := range []func(Tree, string) string{dataKey, metaKey} {
				dx, dy := getPair(t, store, key(TreeLinks, x.ID), key(TreeLinks, y.ID))
				if i > 0 && key(TreeLinks, "x") == metaKey(TreeLinks, "x") {
					// A table's meta names the run's first table (the
					// dictionary's), whose ID differs between the two,
					// and ends with its checksum.
					if !bytes.Contains(dx, mustHex(t, a.Tables[0].ID)) {
						t.Fatalf("%s, table %d: its meta does not name the run's first table", c.name, i)
					}
					dx = bytes.ReplaceAll(dx, mustHex(t, a.Tables[0].ID), mustHex(t, b.Tables[0].ID))
					dx, dy = dx[:len(dx)-metaTrailerSize], dy[:len(dy)-metaTrailerSize]
				}
				if !bytes.Equal(dx, dy) {
					t.Fatalf("%s, table %d (shard %d): %s differs", c.name, i, x.Shard, key(TreeLinks, "…"))
				}
			}
		}
	}
}

func mustHex(t *testing.T, id string) []byte {
	t.Helper()
	b, err := hex.DecodeString(id)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The column writer's meta check fails when the meta's dictionary, or its
// reference to the run's first table, or its format version, is not what
// the frames were encoded with.
func TestTableWriterCatchesDictionaryMismatch(t *testing.T) {
	w := BacklinkFormat.Width
	recs := synthBacklinks(5, 3000)
	SortRecords(recs, w)
	recs = Fold(BacklinkFormat, recs)
	layout, _ := columnsLayout(BacklinkFormat, TableFormatVersion)
	counter := newDictCounter(layout)
	counter.add(recs)
	dict := counter.dict()
	owner := bytes.Repeat([]byte{0xcd}, 16)
	fewer := &accountDict{dids: dict.dids[:dict.len()-1], clocks: dict.clocks[:dict.len()-1], revs: dict.revs[:dict.len()-1]}
	changed := &accountDict{dids: slices.Clone(dict.dids), clocks: dict.clocks, revs: dict.revs}
	changed.dids[0]++
	for _, c := range []struct {
		name  string
		owner []byte // the table built names it (nil: holds the dictionary)
		bend  func(tw *tableWriter)
		want  string
	}{
		{"another table named", owner, func(tw *tableWriter) { tw.b.opt.dictOwner = bytes.Repeat([]byte{1}, 16) }, "dictionary reference"},
		{"a reference of another length", owner, func(tw *tableWriter) { tw.b.dict = fewer }, "entries"},
		{"a dictionary where a reference was meant", nil, func(tw *tableWriter) { tw.b.opt.dictOwner = owner }, "holds a dictionary"},
		{"another dictionary", nil, func(tw *tableWriter) { tw.b.dict = changed }, "dictionary differs"},
		{"another version", nil, func(tw *tableWriter) { tw.b.opt.version = 10 }, "format version"},
	} {
		tw, data, meta := writeWith(t, TableOptions{sharedDict: dict, dictOwner: c.owner}, recs)
		if err := tw.verifyMeta(data, meta); err != nil {
			t.Fatalf("%s: the table as built fails: %v", c.name, err)
		}
		c.bend(tw)
		if err := tw.verifyMeta(data, meta); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// writeWith writes recs (backlinks, sorted) as one table through a new
// tableWriter with options opt, and returns the writer (finished: its
// record of the table is kept) and the table's data (a copy) and meta.
func writeWith(t *testing.T, opt TableOptions, recs []byte) (*tableWriter, []byte, []byte) {
	t.Helper()
	w := BacklinkFormat.Width
	tw, err := newTableWriter(BacklinkFormat, opt, 0)
	if err != nil {
		t.Fatal(err)
	}
	for o := 0; o < len(recs); o += w {
		if err := tw.add(recs[o : o+w]); err != nil {
			t.Fatal(err)
		}
	}
	data, meta, err := tw.finish()
	if err != nil {
		t.Fatal(err)
	}
	return tw, bytes.Clone(data), meta
}

// getPair gets two objects from store, to compare them.
func getPair(t *testing.T, store objstore.Store, kx, ky string) ([]byte, []byte) {
	t.Helper()
	dx, err := store.Get(context.Background(), kx)
	if err != nil {
		t.Fatal(err)
	}
	dy, err := store.Get(context.Background(), ky)
	if err != nil {
		t.Fatal(err)
	}
	return dx, dy
}
