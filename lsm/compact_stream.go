package lsm

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
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
	// memory of the merge (more shards when the inputs are bigger);
	// DefaultCompactionShardBytes when 0.
	ShardBytesMax uint64
	// BytesPerSec paces the reads of the inputs (<= 0: unpaced).
	BytesPerSec int64
	// SpillDir is where the inputs, split by output shard, wait between
	// the two passes (a temporary file, removed when CompactRuns returns);
	// os.TempDir() when "".
	SpillDir string
}

// CompactRuns merges runs of one tree into one compacted run, in bounded
// memory and local disk, in two passes per group of output shards. A group
// is the output shards that the inputs split the same way: with inputs of
// 2^k shards each, 2^k groups, each reading only its own input tables.
// Inputs split more coarsely than the groups (a delta run's one table, a
// small compacted run), when they hold little enough of the records
// (less than a group's share: groupPlan), are read once ahead into a spill of their own, split by
// group, and each group takes its part from there; else they set the
// groups (one group of all, at worst). The first pass reads the group's
// input tables, one at a time, frame by frame, and splits their records by
// output shard into a spill file on local disk (compressed blocks; each
// input table's records of a shard are one sorted sequence of blocks). The
// second builds the group's output shard by shard: it merges the shard's
// sequences (a heap over one block of each), folds identical records to
// the newest rev and writes the table. Memory: the largest output shard's
// records (bounded by ShardBytesMax but for a single target bigger than
// that) and its table, plus a block per sequence; disk: the group's
// records, compressed, and the coarse inputs' (fewer).
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
	groupBits := groupPlan(inputs, bits)
	tables := map[string]*viewTable{}
	for _, vr := range v.trees[tree] {
		for _, t := range vr.tables {
			if t != nil {
				tables[t.ref.ID] = t
			}
		}
	}
	in := compactionInput{store: store, tree: tree, f: f, bits: bits, start: time.Now(), bytesPerSec: opt.BytesPerSec}
	if l, ok := columnsLayout(f, TableFormatVersion); ok && bits > 0 {
		// A run of several tables shares one account dictionary, counted
		// on the first group's records (all of them when there is one
		// group; else a sample: the groups split the targets by hash, so
		// each sees the same accounts at about the same rates) and stored
		// in the run's first table.
		in.counter = newDictCounter(l)
	}
	// The coarse inputs' records, split by group (nil when there are none).
	var coarse *spill
	if groupBits > 0 {
		var err error
		if coarse, err = spillCoarse(ctx, &in, inputs, tables, groupBits, opt.SpillDir); err != nil {
			return Run{}, err
		}
		if coarse != nil {
			defer coarse.close()
		}
	}
	run := Run{ID: NewID(), Tree: tree, Kind: RunCompacted}
	for g := range uint32(1) << groupBits {
		refs, err := groupTables(inputs, tables, groupBits, g)
		if err != nil {
			return Run{}, err
		}
		out, err := compactGroup(ctx, &in, cat, refs, coarse, opt.SpillDir, bits-groupBits, g)
		if err != nil {
			return Run{}, err
		}
		run.Tables = append(run.Tables, out...)
	}
	if len(run.Tables) == 0 {
		return Run{}, fmt.Errorf("compaction of %d runs produced nothing", len(inputs))
	}
	return run, nil
}

// runShardBits is the shard bits of a run's tables (a delta run: 0).
func runShardBits(r Run) uint8 {
	if r.Kind != RunCompacted || len(r.Tables) == 0 {
		return 0
	}
	return r.Tables[0].ShardBits
}

// groupPlan returns the shard bits of a compaction's groups, for an
// output of bits shard bits: the most, b, such that the inputs of fewer
// shard bits than b (read ahead into a spill split by group) hold less
// than a group's share of the records, 1/2^b of them. The spill of those
// coarse inputs is then smaller than a group's, and a delta run among large
// compacted inputs (the newest flush in a full compaction) no longer
// makes one group, and one spill, of the whole index. Inputs that all have
// k shard bits or more give k groups or more, as before.
func groupPlan(inputs []Run, bits uint8) uint8 {
	var total uint64
	for _, r := range inputs {
		total += r.Records()
	}
	var g uint8
	for b := uint8(1); b <= bits; b++ {
		var coarse uint64
		for _, r := range inputs {
			if runShardBits(r) < b {
				coarse += r.Records()
			}
		}
		if coarse<<b >= total {
			break
		}
		g = b
	}
	return g
}

// groupTables returns the input tables of shard group g (of groupBits
// bits): those whose records all hash into it. Inputs of fewer shard bits
// (the coarse ones, spilled ahead) are left out.
func groupTables(inputs []Run, tables map[string]*viewTable, groupBits uint8, g uint32) ([]*viewTable, error) {
	var out []*viewTable
	for _, r := range inputs {
		b := runShardBits(r)
		if b < groupBits {
			continue
		}
		for _, ref := range r.Tables {
			if b > 0 && ref.Shard>>(b-groupBits) != g {
				continue
			}
			t := tables[ref.ID]
			if t == nil {
				return nil, fmt.Errorf("table %s of run %s not in the view", ref.ID, r.ID)
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// spillCoarse reads the inputs of fewer shard bits than groupBits (nil if
// there are none) into a spill whose shards are the groups.
func spillCoarse(ctx context.Context, in *compactionInput, inputs []Run, tables map[string]*viewTable, groupBits uint8, spillDir string) (*spill, error) {
	var refs []*viewTable
	for _, r := range inputs {
		if runShardBits(r) >= groupBits {
			continue
		}
		for _, ref := range r.Tables {
			t := tables[ref.ID]
			if t == nil {
				return nil, fmt.Errorf("table %s of run %s not in the view", ref.ID, r.ID)
			}
			refs = append(refs, t)
		}
	}
	if len(refs) == 0 {
		return nil, nil
	}
	sp, err := newSpill(spillDir, in.f.Width, 1<<groupBits)
	if err != nil {
		return nil, err
	}
	// Split by group, uncounted: each group's part is counted (the
	// first group's, for the dictionary) when that group takes it.
	counter := in.counter
	in.counter, in.spill, in.splitBits, in.base = nil, sp, groupBits, 0
	defer func() { in.counter = counter }()
	for _, t := range refs {
		meta, err := t.load(ctx)
		if err == nil {
			err = in.read(ctx, t.ref.ID, meta)
		}
		if err != nil {
			sp.close()
			return nil, err
		}
	}
	if err := sp.finish(); err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

// compactGroup runs both passes over one group's input tables and its
// part of the coarse inputs' spill (coarse, nil if none): its 2^localBits
// output shards are g<<localBits + 0, 1, ...
func compactGroup(ctx context.Context, in *compactionInput, cat *Catalog, refs []*viewTable, coarse *spill, spillDir string, localBits uint8, g uint32) ([]TableRef, error) {
	sp, err := newSpill(spillDir, in.f.Width, 1<<localBits)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	in.spill, in.splitBits, in.base = sp, in.bits, g<<localBits
	for _, t := range refs {
		meta, err := t.load(ctx)
		if err != nil {
			return nil, err
		}
		if err := in.read(ctx, t.ref.ID, meta); err != nil {
			return nil, err
		}
	}
	if coarse != nil {
		// Each coarse table's records of this group, one sorted
		// sequence of the coarse spill, split into the output shards as
		// a table's are.
		for i := range coarse.shards[g] {
			err := coarse.eachBlock(&coarse.shards[g][i], func(recs []byte) error {
				return in.split("coarse spill", recs)
			})
			if err == nil {
				err = sp.endSequence()
			}
			if err != nil {
				return nil, err
			}
		}
		coarse.shards[g] = nil
	}
	if err := sp.finish(); err != nil {
		return nil, err
	}
	noteSpillBytes(sp.off + coarseBytes(coarse))
	if in.counter != nil {
		in.shared, in.counter = in.counter.dict(), nil
	}
	var out []TableRef
	buf := getMergeBuf(sp.largest * in.f.Width)
	defer func() { putMergeBuf(buf) }()
	for s := range sp.shards {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		part, err := sp.merge(s, buf[:0])
		if err != nil {
			return nil, fmt.Errorf("compaction: %w", err)
		}
		buf = part
		if len(part) == 0 {
			continue
		}
		part = Fold(in.f, part)
		ref, err := writeTable(ctx, in.store, cat, in.tree, in.f, part, TableOptions{
			ShardBits: in.bits, Shard: in.base + uint32(s), sharedDict: in.shared, dictOwner: in.owner,
		})
		if err != nil {
			return nil, err
		}
		if in.shared != nil && in.owner == nil {
			if in.owner, err = hex.DecodeString(ref.ID); err != nil || len(in.owner) != 16 {
				return nil, fmt.Errorf("compaction: table ID %q is not 16 bytes of hex", ref.ID)
			}
		}
		out = append(out, ref)
	}
	return out, nil
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
	splitBits   uint8  // the bits records are split by: the output's, or the groups' (the coarse spill)
	base        uint32 // the first shard (of splitBits) of the spill being written
	spill       *spill
	start       time.Time
	bytesRead   int64 // data bytes read so far
	bytesPerSec int64 // <= 0: unpaced
	// The output run's shared account dictionary: counter counts the
	// first group's records while they are read, shared is its result,
	// owner the ID (binary) of the output's first table, which stores it.
	counter *dictCounter
	shared  *accountDict
	owner   []byte
}

// read GETs the data object of table id, waits as long as the pace asks,
// and spills every record of its frames to its shard. A data object of
// another size than meta gives, or a frame that fails its checks, is a
// *CorruptError.
func (in *compactionInput) read(ctx context.Context, id string, meta *TableMeta) error {
	data, err := in.store.Get(ctx, dataKey(in.tree, id))
	if err != nil {
		return fmt.Errorf("read table %s: %w", id, err)
	}
	in.bytesRead += int64(len(data))
	if in.bytesPerSec > 0 {
		due := in.start.Add(time.Duration(float64(in.bytesRead) / float64(in.bytesPerSec) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if uint64(len(data)) != meta.DataBytes {
		return &CorruptError{Tree: in.tree, Table: id, Err: fmt.Errorf("%d data bytes, meta says %d: %w", len(data), meta.DataBytes, ErrCorrupt)}
	}
	var dst []byte
	for i := range meta.NumFrames() {
		off, n := meta.ByteRange(i, i)
		dst, err = meta.DecodeFrame(i, data[off:off+n], dst[:0])
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				return &CorruptError{Tree: in.tree, Table: id, Err: err}
			}
			return fmt.Errorf("table %s: %w", id, err)
		}
		if err := in.split(id, dst); err != nil {
			return err
		}
	}
	// The table's records of each shard end here: the next table's start
	// new sorted sequences.
	return in.spill.endSequence()
}

// split counts records (whole, sorted) for the dictionary while it is
// counted, and adds them to the spill, each to its shard of splitBits.
// from names where they come from, for the error of a record outside the
// spill's shards (a *CorruptError).
func (in *compactionInput) split(from string, recs []byte) error {
	if in.counter != nil {
		in.counter.add(recs)
	}
	// A prefix's records are contiguous and go to one shard: one hash and
	// one append for each.
	w, p := in.f.Width, in.f.PrefixLen
	for o := 0; o < len(recs); {
		e := o + w
		for e < len(recs) && string(recs[e:e+p]) == string(recs[o:o+p]) {
			e += w
		}
		s := ShardOf(recs[o:o+p], in.splitBits) - in.base
		if int(s) >= len(in.spill.shards) {
			return &CorruptError{Tree: in.tree, Table: from, Err: fmt.Errorf("prefix %x outside its shard: %w", recs[o:o+p], ErrCorrupt)}
		}
		if err := in.spill.add(int(s), recs[o:e]); err != nil {
			return err
		}
		o = e
	}
	return nil
}
