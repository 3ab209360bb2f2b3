package lsm

import (
	"context"
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
// memory, in two passes. The first reads every table of the inputs, one
// at a time, frame by frame, and splits its records by output shard into a
// spill file on local disk (compressed blocks; each input table's records
// of a shard are one sorted sequence of blocks). The second builds the
// output shard by shard: it merges the shard's sequences (a heap over one
// block of each), folds identical records to the newest rev and writes the
// table. Memory: the largest output shard's records (bounded by
// ShardBytesMax but for a single target bigger than that) and its table,
// plus a block per sequence; disk: the inputs' records, compressed.
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
	tables := map[string]*viewTable{}
	for _, vr := range v.trees[tree] {
		for _, t := range vr.tables {
			if t != nil {
				tables[t.ref.ID] = t
			}
		}
	}
	sp, err := newSpill(opt.SpillDir, f.Width, 1<<bits)
	if err != nil {
		return Run{}, err
	}
	defer sp.close()
	in := compactionInput{store: store, tree: tree, f: f, bits: bits, spill: sp, start: time.Now(), bytesPerSec: opt.BytesPerSec}
	for _, r := range inputs {
		for _, ref := range r.Tables {
			t := tables[ref.ID]
			if t == nil {
				return Run{}, fmt.Errorf("table %s of run %s not in the view", ref.ID, r.ID)
			}
			meta, err := t.load(ctx)
			if err != nil {
				return Run{}, err
			}
			if err := in.read(ctx, ref.ID, meta); err != nil {
				return Run{}, err
			}
		}
	}
	if err := sp.finish(); err != nil {
		return Run{}, err
	}
	run := Run{ID: NewID(), Tree: tree, Kind: RunCompacted}
	buf := getMergeBuf(sp.largestShard() * f.Width)
	defer func() { putMergeBuf(buf) }()
	for s := range sp.shards {
		if ctx.Err() != nil {
			return Run{}, ctx.Err()
		}
		part, err := sp.merge(s, buf[:0])
		if err != nil {
			return Run{}, fmt.Errorf("compaction: %w", err)
		}
		buf = part
		if len(part) == 0 {
			continue
		}
		part = Fold(f, part)
		ref, err := writeTable(ctx, store, cat, tree, f, part, TableOptions{ShardBits: bits, Shard: uint32(s)})
		if err != nil {
			return Run{}, err
		}
		run.Tables = append(run.Tables, ref)
	}
	if len(run.Tables) == 0 {
		return Run{}, fmt.Errorf("compaction of %d runs produced nothing", len(inputs))
	}
	return run, nil
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
	bits        uint8
	spill       *spill
	start       time.Time
	bytesRead   int64 // data bytes read so far
	bytesPerSec int64 // <= 0: unpaced
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
	f := in.f
	var dst []byte
	for i := range meta.Frames {
		off, n := meta.ByteRange(i, i)
		dst, err = meta.DecodeFrame(i, data[off:off+n], dst[:0])
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				return &CorruptError{Tree: in.tree, Table: id, Err: err}
			}
			return fmt.Errorf("table %s: %w", id, err)
		}
		// A prefix's records are contiguous and go to one shard: one hash
		// and one append for each.
		w, p := f.Width, f.PrefixLen
		for o := 0; o < len(dst); {
			e := o + w
			for e < len(dst) && string(dst[e:e+p]) == string(dst[o:o+p]) {
				e += w
			}
			if err := in.spill.add(int(ShardOf(dst[o:o+p], in.bits)), dst[o:e]); err != nil {
				return err
			}
			o = e
		}
	}
	// The table's records of each shard end here: the next table's start
	// new sorted sequences.
	return in.spill.endSequence()
}
