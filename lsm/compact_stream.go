package lsm

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/eddy-backlinks/eddy/objstore"
)

// CompactOptions configure CompactRuns.
type CompactOptions struct {
	// ShardTargetBytes: the output gets one shard per this many input
	// data bytes (rounded up to a power of two); DefaultShardTargetBytes
	// when 0.
	ShardTargetBytes uint64
	// ShardBytesMax bounds each output shard's decoded bytes, and so the
	// memory of a merge that holds a shard's records (more shards when
	// the inputs are bigger; a merge into columns writes its tables a
	// record at a time instead); DefaultCompactionShardBytes when 0.
	ShardBytesMax uint64
	// BytesPerSec paces the reads of the inputs (<= 0: unpaced).
	BytesPerSec int64
	// SpillDir is where the input tables split by output shard (those
	// holding records of several) wait until their output shards are
	// built (a temporary file a table, removed after its last output
	// shard, and all of them when CompactRuns returns); os.TempDir() when
	// "".
	SpillDir string
	// CountEvery counts the output's account dictionary on every input
	// record, in a pass of its own over the inputs before the merge (a
	// second decode of each frame, no spill), instead of on a sample of
	// about dictSampleRecords: for a full compaction, whose run holds the
	// whole index for long (at 1B links the sample's dictionary made it
	// 0.08 bytes a link larger).
	CountEvery bool
	// Fast writes the output's tables in the fast form of a flush
	// (TableOptions.Fast: S2, no dictionary) instead of the columns: for
	// a merge of flushes only (FastMerge), whose output the next tier
	// merges again soon.
	Fast bool
	// AlignFanIn (> 1) gives the output at least as many shards as a
	// merge of this many runs of its size would under the default shard
	// bound (ShardBytesMax 0: a node's big lane): that merge then finds
	// each of its tables within one of its output shards and merges it as
	// it is decoded, instead of splitting it into a spill first. For a
	// merge of flushes (Fast), whose output the next tier merges soon,
	// with MergedFanIn others like it (ForMerge sets it). The estimate
	// assumes runs alike: a next merge that needs a shard bit more
	// splits every table again, as before.
	AlignFanIn int

	noRoute  bool // test hook: split into spills where mergeRouted would merge in one pass
	noStream bool // test hook: merge each shard of columns into a buffer where writeShard would write it record by record
}

// ForMerge sets the options a merge of inputs takes under compaction
// fan-in fanIn: a full compaction (full) counts its dictionary on every
// record (its run holds the index for long); a merge of flushes only
// writes the fast form (FastMerge), in the shards the merge of
// MergedFanIn such runs will need (AlignFanIn); any other writes the
// columns in the shards its own size needs.
func (o *CompactOptions) ForMerge(inputs []Run, full bool, fanIn int) {
	o.CountEvery = full
	o.Fast = !full && FastMerge(inputs)
	o.AlignFanIn = 0
	if o.Fast {
		o.AlignFanIn = MergedFanIn(FanInOrDefault(fanIn))
	}
}

// FastMerge reports whether a merge of inputs writes the fast form
// (CompactOptions.Fast): when every input is a flush (a delta run), and
// the merge is not a full compaction (whose run is the index for long;
// its caller decides). Its output is then the lowest tier of merged
// runs, read again by the merge of eight such; the columns are written
// from the second tier on, so a record is coded in columns once less
// than it is merged, and a merged index is in columns as before.
func FastMerge(inputs []Run) bool {
	if len(inputs) == 0 || !fastTree(inputs[0].Tree) {
		return false
	}
	for _, r := range inputs {
		if r.Kind != RunDelta {
			return false
		}
	}
	return true
}

// fastTree reports whether tree t's flushes and merges of flushes take
// the fast form: the trees the columnar codec stores (links,
// revocations). The others' tables are zstd frames, whose bytes S2 would
// only grow for less CPU saved.
func fastTree(t Tree) bool {
	f, err := FormatOf(t)
	if err != nil {
		return false
	}
	_, ok := columnsLayout(f, TableFormatVersion)
	return ok
}

// RunInFastForm reports whether run r is in the fast form (a flush's, or
// a merge of flushes only; its first table says): a full compaction
// rewrites such a run in columns even when it is its tree's only run.
func RunInFastForm(ctx context.Context, cat *Catalog, r Run) (bool, error) {
	if len(r.Tables) == 0 {
		return false, nil
	}
	m, err := cat.Load(ctx, r.Tree, r.Tables[0])
	if err != nil {
		return false, err
	}
	return m.transform == transformShuffleS2, nil
}

// CompactRuns merges runs of one tree into one compacted run, in bounded
// memory and local disk. A merge of flushes into the fast form in several
// shards is one pass over its inputs, each record routed to its shard's
// table (mergeRouted); any other merge builds the output shard by shard,
// in order.
// An input table that holds records of several output shards (a table of
// k shard bits holds those of 2^(bits-k) consecutive ones; a delta run's
// one table, all of them when bits > 0) is read once, when the first of
// them comes up: frame by frame, its records are split by output shard
// into a spill file of its own on local disk (compressed blocks; its
// records of a shard are one sorted sequence), removed once its last
// output shard is built. A table that holds records of one output shard
// only (its run's shards as fine as the output's, or finer; every table
// when the output has one shard) is not split: it is read when that
// shard comes up and its frames decoded one at a time as the merge asks
// (tableSource). An output shard is the merge of its sequences in every
// open spill and of its unsplit tables (a heap over one block or frame of
// each), identical records folded to the newest rev, written as a table:
// a table of columns (a run with a shared dictionary) a record at a time
// as the merge produces them (writeShard), another from the shard merged
// into a buffer first.
// Memory: the output shard's table (its frames, compressed) or, for a
// shard merged into a buffer, its records (bounded by ShardBytesMax but
// for a single target bigger than that) and its table; while a table
// is split, its data object and about spillPendMax of pending blocks (at
// least a few KiB a shard it covers); while a shard is merged, three
// block buffers (up to spillBlockBytes each) per spilled sequence, and
// the data object of each of its unsplit tables (compressed: together
// about the shard's share of the inputs, under ShardBytesMax) and one
// decoded frame of each. Local disk: the split tables of each input run
// that hold the current output shard (with the defaults one table a run:
// a flush's memtable, 64 MiB of records, or a compacted table of about
// 256 MiB of records, more for a shard with a huge target), compressed,
// and the dictionary's sample (below); never the whole merge, however the
// inputs are split. A merge in one pass (mergeRouted) holds instead every
// input's data object and its output's frames, both compressed, up to
// routedMergeBytesMax, and no local disk.
//
// A run of several tables shares one account dictionary, stored in its
// first table: counted on the records of the first output shards, about
// dictSampleRecords of them or more (all, for a smaller merge), which are
// all read before the first table is written: the split tables into
// their spills, the unsplit ones counted in a pass of their own (decoded
// and read again when their shard is merged: a second GET and decode,
// cheaper than spilling them); with CountEvery, on every record, in a
// pass of its own before the merge.
func CompactRuns(ctx context.Context, store objstore.Store, cat *Catalog, v *View, inputs []Run, opt CompactOptions) (Run, error) {
	if len(inputs) == 0 {
		return Run{}, errors.New("compaction of no runs")
	}
	tree := inputs[0].Tree
	f, err := FormatOf(tree)
	if err != nil {
		return Run{}, err
	}
	var total, records uint64
	for _, r := range inputs {
		if r.Tree != tree {
			return Run{}, fmt.Errorf("compaction mixes trees %s and %s", tree, r.Tree)
		}
		total += r.Bytes()
		records += r.Records()
	}
	bits := compactionBits(total, records*uint64(f.Width), opt)
	if k := uint64(opt.AlignFanIn); k > 1 {
		// That merge is large: sized by the default shard bound (a
		// node's big lane), not this merge's.
		next := CompactOptions{ShardTargetBytes: opt.ShardTargetBytes}
		bits = max(bits, compactionBits(total*k, records*uint64(f.Width)*k, next))
	}
	tables := map[string]*viewTable{}
	for _, vr := range v.trees[tree] {
		for _, t := range vr.tables {
			if t != nil {
				tables[t.ref.ID] = t
			}
		}
	}
	plan, err := planRanges(inputs, tables, bits)
	if err != nil {
		return Run{}, err
	}
	in := compactionInput{store: store, tree: tree, f: f, bits: bits, start: time.Now(), bytesPerSec: opt.BytesPerSec}
	shards := uint32(1) << bits
	// The output shards the dictionary is counted on: [0, counted).
	counted := shards
	if l, ok := columnsLayout(f, TableFormatVersion); ok && bits > 0 && !opt.Fast {
		in.counter = newDictCounter(l)
		if records > dictSampleRecords {
			counted = uint32((uint64(shards)*dictSampleRecords + records - 1) / records)
		}
	}
	in.counted = counted
	if in.counter != nil && opt.CountEvery && counted < shards {
		for _, rt := range plan { // in the inputs' order: plan is not sorted yet
			if err := in.count(ctx, rt.t); err != nil {
				return Run{}, err
			}
		}
		in.shared, in.counter = in.counter.dict(), nil
	}
	if routable(opt, bits, plan) && !opt.noRoute {
		return in.mergeRouted(ctx, cat, plan)
	}
	slices.SortStableFunc(plan, func(a, b rangeTable) int { return cmp.Compare(a.lo, b.lo) })
	var open []*rangeSpill
	var direct []rangeTable // read, not spilled: merged as they are decoded
	defer func() {
		for _, o := range open {
			o.sp.close()
		}
	}()
	next := 0 // the next table of plan to read
	// readUpTo reads every table whose first output shard is below end
	// into its spill, or queues it in direct if it is not split (counted
	// first if the dictionary is counted on it), in the inputs' order
	// (the dictionary's rev votes depend on the order records are counted
	// in: oldest run first, as one pass over the inputs would).
	readUpTo := func(end uint32) error {
		k := next
		for k < len(plan) && plan[k].lo < end {
			k++
		}
		batch := plan[next:k]
		slices.SortFunc(batch, func(a, b rangeTable) int { return cmp.Compare(a.seq, b.seq) })
		for _, rt := range batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			if rt.direct() {
				// Read when its shard is merged; counted now, in the
				// inputs' order, if the dictionary is counted on it.
				if in.counter != nil && rt.lo < in.counted {
					if err := in.count(ctx, rt.t); err != nil {
						return err
					}
				}
				direct = append(direct, rt)
				continue
			}
			rs, err := in.readRange(ctx, rt, opt.SpillDir)
			if err != nil {
				return err
			}
			open = append(open, rs)
		}
		next = k
		var n int64
		for _, o := range open {
			n += o.sp.off
		}
		noteSpillBytes(n)
		storeMax(&spillsOpenPeak, int64(len(open)))
		return nil
	}
	run := Run{ID: NewID(), Tree: tree, Kind: RunCompacted}
	// A merge into columns writes each shard's table as its records come
	// (writeShard); another merges the shard into buf first. Shards split
	// the records by hash, so about evenly: room for the mean and a
	// sixteenth, grown if a shard needs more.
	var buf []byte
	defer func() {
		if buf != nil {
			putMergeBuf(buf)
		}
	}()
	var tw *tableWriter
	defer func() {
		if tw != nil {
			tw.dropDict()
			columnWriters.keep(tw, func(kept, _ *tableWriter) bool { return kept == nil })
		}
	}()
	for o := range shards {
		if ctx.Err() != nil {
			return Run{}, ctx.Err()
		}
		end := o + 1
		if in.counter != nil {
			end = counted // the dictionary's sample, read first
		}
		if err := readUpTo(end); err != nil {
			return Run{}, err
		}
		if in.counter != nil {
			in.shared, in.counter = in.counter.dict(), nil
		}
		if in.shared != nil && !opt.Fast && !opt.noStream {
			if tw == nil {
				if tw = columnWriters.take(); tw == nil {
					tw = &tableWriter{}
				}
			}
			ref, ok, err := in.writeShard(ctx, cat, open, direct, o, tw)
			if err != nil {
				return Run{}, err
			}
			if ok {
				run.Tables = append(run.Tables, ref)
			}
		}
		var part []byte
		if in.shared == nil || opt.Fast || opt.noStream {
			if buf == nil {
				buf = getMergeBuf(int(records/uint64(shards)+records/uint64(shards)/16) * f.Width)
			}
			if part, err = in.mergeShard(ctx, open, direct, o, buf[:0]); err != nil {
				return Run{}, fmt.Errorf("compaction: %w", err)
			}
			buf = part
		}
		direct = slices.DeleteFunc(direct, func(rt rangeTable) bool { return rt.lo == o })
		// Spills whose last output shard this was are done.
		kept := open[:0]
		for _, rs := range open {
			if rs.hi == o+1 {
				rs.sp.close()
			} else {
				kept = append(kept, rs)
			}
		}
		clear(open[len(kept):])
		open = kept
		if len(part) > 0 {
			part = Fold(in.f, part)
			ref, err := writeTable(ctx, in.store, cat, in.tree, in.f, part, TableOptions{
				ShardBits: in.bits, Shard: o, sharedDict: in.shared, dictOwner: in.owner, Fast: opt.Fast,
			})
			if err != nil {
				return Run{}, err
			}
			run.Tables = append(run.Tables, ref)
		}
		if k := len(run.Tables); k > 0 && in.shared != nil && in.owner == nil {
			id := run.Tables[k-1].ID
			if in.owner, err = hex.DecodeString(id); err != nil || len(in.owner) != 16 {
				return Run{}, fmt.Errorf("compaction: table ID %q is not 16 bytes of hex", id)
			}
		}
	}
	if next != len(plan) {
		return Run{}, fmt.Errorf("compaction: %d of %d input tables not read", len(plan)-next, len(plan))
	}
	if len(run.Tables) == 0 {
		return Run{}, fmt.Errorf("compaction of %d runs produced nothing", len(inputs))
	}
	return run, nil
}

// dictSampleRecords: a compaction's shared account dictionary is counted
// on the records of its first output shards, at least this many (2^25,
// about as many as the first of 16 groups of a 512M-link merge, which the
// dictionary was counted on before).
var dictSampleRecords uint64 = 1 << 25 // a var for tests

// rangeTable is an input table and the output shards it holds records
// of, [lo, hi).
type rangeTable struct {
	t      *viewTable
	lo, hi uint32
	seq    int // its place in the inputs' order
}

// direct reports whether the table holds records of one output shard
// only (its run's shards are as fine as the output's, or finer, or the
// output has one shard): then it is not split into a spill but merged as
// its frames are decoded.
func (rt rangeTable) direct() bool { return rt.hi-rt.lo == 1 }

// rangeSpill is an input table's records, split by output shard [lo, hi).
type rangeSpill struct {
	sp     *spill
	lo, hi uint32
}

// runShardBits is the shard bits of a run's tables (a delta run: 0).
func runShardBits(r Run) uint8 {
	if r.Kind != RunCompacted || len(r.Tables) == 0 {
		return 0
	}
	return r.Tables[0].ShardBits
}

// planRanges returns every input table with the output shards (of bits)
// it holds records of, in the inputs' order (the caller sorts them by
// first output shard, stably). A table whose shard is not one of its run's is a
// *CorruptError: its records would be left out.
func planRanges(inputs []Run, tables map[string]*viewTable, bits uint8) ([]rangeTable, error) {
	var plan []rangeTable
	for _, r := range inputs {
		b := runShardBits(r)
		for _, ref := range r.Tables {
			t := tables[ref.ID]
			if t == nil {
				return nil, fmt.Errorf("table %s of run %s not in the view", ref.ID, r.ID)
			}
			if ref.ShardBits != b || uint64(ref.Shard) >= 1<<b {
				return nil, &CorruptError{Tree: r.Tree, Table: ref.ID, Err: fmt.Errorf("shard %d of %d bits in a run of %d-bit tables: %w", ref.Shard, ref.ShardBits, b, ErrCorrupt)}
			}
			var lo, hi uint32
			switch {
			case b == 0:
				lo, hi = 0, 1<<bits
			case b <= bits:
				lo, hi = ref.Shard<<(bits-b), (ref.Shard+1)<<(bits-b)
			default: // finer than the output: several tables a shard
				lo = ref.Shard >> (b - bits)
				hi = lo + 1
			}
			plan = append(plan, rangeTable{t: t, lo: lo, hi: hi, seq: len(plan)})
		}
	}
	return plan, nil
}

// count reads table t and counts its records for the dictionary.
func (in *compactionInput) count(ctx context.Context, t *viewTable) error {
	meta, err := t.load(ctx)
	if err != nil {
		return err
	}
	return in.frames(ctx, t.ref.ID, meta, func(recs []byte) error {
		in.counter.add(recs)
		return nil
	})
}

// readRange reads table rt into a new spill of its output shards.
func (in *compactionInput) readRange(ctx context.Context, rt rangeTable, spillDir string) (*rangeSpill, error) {
	meta, err := rt.t.load(ctx)
	if err != nil {
		return nil, err
	}
	sp, err := newSpill(spillDir, in.f.Width, int(rt.hi-rt.lo))
	if err != nil {
		return nil, err
	}
	in.spill, in.base = sp, rt.lo
	if err = in.read(ctx, rt.t.ref.ID, meta); err == nil {
		err = sp.finish()
	}
	if err != nil {
		sp.close()
		return nil, err
	}
	return &rangeSpill{sp: sp, lo: rt.lo, hi: rt.hi}, nil
}

// mergeShard appends output shard o's records, merged into order, to dst
// (grown to hold them) and returns it: those in the open spills, and
// those of the direct tables of shard o (direct may hold others, of
// shards still to come), each read now and decoded a frame at a time.
// Records equal in every byte come out once each time they were read
// (Fold keeps one).
func (in *compactionInput) mergeShard(ctx context.Context, open []*rangeSpill, direct []rangeTable, o uint32, dst []byte) ([]byte, error) {
	cs, n, err := in.shardCursors(ctx, open, direct, o)
	if err != nil {
		return nil, err
	}
	return mergeCursors(cs, in.f.Width, n*in.f.Width, dst)
}

// tableSource reads an input table of one output shard (a direct
// rangeTable) for the merge: its data object when first asked, then a
// frame at a time, each record's shard checked as the split checks it (a
// blockSource).
type tableSource struct {
	in     *compactionInput
	ctx    context.Context
	id     string
	meta   *TableMeta
	shard  uint32
	loaded bool
	data   []byte
	frame  int
	recs   []byte
	all    bool // the table holds records of every output shard (mergeRouted)
}

func (s *tableSource) nextBlock() ([]byte, error) {
	if !s.loaded {
		data, err := s.in.get(s.ctx, s.id, s.meta)
		if err != nil {
			return nil, err
		}
		s.data, s.loaded = data, true
	}
	if s.frame == s.meta.NumFrames() {
		return nil, nil
	}
	off, n := s.meta.ByteRange(s.frame, s.frame)
	recs, err := s.in.decodeFrame(s.id, s.meta, s.frame, s.data[off:off+n], s.recs[:0])
	if err != nil {
		return nil, err
	}
	s.recs = recs
	if s.frame++; s.frame == s.meta.NumFrames() {
		s.data = nil // decoded: its memory goes
	}
	if s.in.bits > 0 && !s.all {
		w, p := s.in.f.Width, s.in.f.PrefixLen
		for o := 0; o < len(recs); {
			e := prefixEnd(recs, o, w, p)
			if ShardOf(recs[o:o+p], s.in.bits) != s.shard {
				return nil, &CorruptError{Tree: s.in.tree, Table: s.id, Err: fmt.Errorf("prefix %x outside its shard: %w", recs[o:o+p], ErrCorrupt)}
			}
			o = e
		}
	}
	return recs, nil
}

// compactionBits returns the output's shard bits: enough for one shard
// per ShardTargetBytes of input data and for each shard's decoded bytes to
// stay within ShardBytesMax.
func compactionBits(dataBytes, decodedBytes uint64, opt CompactOptions) uint8 {
	target, most := opt.ShardTargetBytes, opt.ShardBytesMax
	if target == 0 {
		target = DefaultShardTargetBytes
	}
	if most == 0 {
		most = DefaultCompactionShardBytes
	}
	var bits uint8
	for bits < MaxShardBits && (dataBytes > target<<bits || decodedBytes > most<<bits) {
		bits++
	}
	return bits
}

// compactionInput reads a compaction's input tables into its spill, split
// by the output's shards, at a paced rate.
type compactionInput struct {
	store       objstore.Store
	tree        Tree
	f           Format
	bits        uint8  // the output's shard bits
	base        uint32 // the first output shard of the spill being written
	spill       *spill
	counted     uint32 // the dictionary is counted on output shards [0, counted)
	start       time.Time
	bytesRead   int64 // data bytes read so far
	bytesPerSec int64 // <= 0: unpaced
	// The output run's shared account dictionary: counter counts the
	// records of the first output shards while they are read, shared is
	// its result, owner the ID (binary) of the output's first table,
	// which stores it.
	counter *dictCounter
	shared  *accountDict
	owner   []byte
}

// read GETs the data object of table id, waits as long as the pace asks,
// and spills every record of its frames to its shard. A data object of
// another size than meta gives, or a frame that fails its checks, is a
// *CorruptError.
func (in *compactionInput) read(ctx context.Context, id string, meta *TableMeta) error {
	if err := in.frames(ctx, id, meta, func(recs []byte) error { return in.split(id, recs) }); err != nil {
		return err
	}
	// The table's records of each shard end here: the next table's start
	// new sorted sequences.
	return in.spill.endSequence()
}

// frames GETs the data object of table id, waits as long as the pace
// asks, and calls fn with each frame's records, decoded.
func (in *compactionInput) frames(ctx context.Context, id string, meta *TableMeta, fn func(recs []byte) error) error {
	data, err := in.get(ctx, id, meta)
	if err != nil {
		return err
	}
	var dst []byte
	for i := range meta.NumFrames() {
		off, n := meta.ByteRange(i, i)
		if dst, err = in.decodeFrame(id, meta, i, data[off:off+n], dst[:0]); err != nil {
			return err
		}
		if err := fn(dst); err != nil {
			return err
		}
	}
	return nil
}

// get GETs the data object of table id and waits as long as the pace
// asks. A data object of another size than meta gives is a *CorruptError.
func (in *compactionInput) get(ctx context.Context, id string, meta *TableMeta) ([]byte, error) {
	data, err := in.store.Get(ctx, dataKey(in.tree, id))
	if err != nil {
		return nil, fmt.Errorf("read table %s: %w", id, missing(in.tree, id, err))
	}
	in.bytesRead += int64(len(data))
	if in.bytesPerSec > 0 {
		due := in.start.Add(time.Duration(float64(in.bytesRead) / float64(in.bytesPerSec) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if uint64(len(data)) != meta.DataBytes {
		return nil, &CorruptError{Tree: in.tree, Table: id, Err: fmt.Errorf("%d data bytes, meta says %d: %w", len(data), meta.DataBytes, ErrCorrupt)}
	}
	return data, nil
}

// decodeFrame decodes frame i of table id (its bytes frame) into dst; a
// frame that fails its checks is a *CorruptError.
func (in *compactionInput) decodeFrame(id string, meta *TableMeta, i int, frame, dst []byte) ([]byte, error) {
	dst, err := meta.DecodeFrame(i, frame, dst)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return nil, &CorruptError{Tree: in.tree, Table: id, Err: err}
		}
		return nil, fmt.Errorf("table %s: %w", id, err)
	}
	return dst, nil
}

// prefixEnd returns the end of the run of records (of width w, sorted)
// that share the prefix (of p bytes) of the record at o: a prefix's
// records are contiguous and fall in one shard.
func prefixEnd(recs []byte, o, w, p int) int {
	e := o + w
	for e < len(recs) && string(recs[e:e+p]) == string(recs[o:o+p]) {
		e += w
	}
	return e
}

// split adds records (whole, sorted) to the spill, each to its output
// shard, and counts those of the first output shards for the dictionary
// while it is counted. from names where they come from, for the error of
// a record outside the spill's shards (a *CorruptError).
func (in *compactionInput) split(from string, recs []byte) error {
	every := in.counter != nil && in.counted == 1<<in.bits
	if every { // all of them, in one call
		in.counter.add(recs)
	}
	// A prefix's records are contiguous and go to one shard: one hash and
	// one append for each.
	w, p := in.f.Width, in.f.PrefixLen
	for o := 0; o < len(recs); {
		e := prefixEnd(recs, o, w, p)
		out := ShardOf(recs[o:o+p], in.bits)
		s := out - in.base
		if out < in.base || int(s) >= len(in.spill.shards) {
			return &CorruptError{Tree: in.tree, Table: from, Err: fmt.Errorf("prefix %x outside its shard: %w", recs[o:o+p], ErrCorrupt)}
		}
		if in.counter != nil && !every && out < in.counted {
			in.counter.add(recs[o:e])
		}
		if err := in.spill.add(int(s), recs[o:e]); err != nil {
			return err
		}
		o = e
	}
	return nil
}
