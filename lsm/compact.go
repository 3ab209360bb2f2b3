package lsm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/eddy-backlinks/eddy/objstore"
)

// Compaction limits.
const (
	// tierBaseBytes is the size of the smallest tier of size-tiered
	// compaction; each tier is CompactionFanIn times the one below.
	tierBaseBytes = 1 << 20
	// CompactionInputBytesMax bounds the decoded bytes one compaction holds
	// in memory (inputs are merged in memory, shard by shard).
	CompactionInputBytesMax = 2 << 30
)

// tier returns a run's size tier.
func tier(bytes uint64, fanIn int) int {
	t := 0
	for b := uint64(tierBaseBytes); bytes > b; b *= uint64(fanIn) {
		t++
	}
	return t
}

// PickCompaction returns the runs of a tree to merge next: the oldest
// CompactionFanIn runs of the lowest tier that has that many, or nil.
func PickCompaction(m *Manifest, t Tree, fanIn int) []Run {
	byTier := map[int][]Run{}
	for _, r := range m.RunsOf(t) {
		k := tier(r.Bytes(), fanIn)
		byTier[k] = append(byTier[k], r)
	}
	tiers := make([]int, 0, len(byTier))
	for k := range byTier {
		tiers = append(tiers, k)
	}
	sort.Ints(tiers)
	for _, k := range tiers {
		if rs := byTier[k]; len(rs) >= fanIn {
			return rs[:fanIn]
		}
	}
	return nil
}

// Compact merges one set of runs of each tree if any tier is full, and
// reports whether it did anything. Identical records keep the newest rev.
func (db *DB) Compact(ctx context.Context) (bool, error) {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	did := false
	for _, t := range []Tree{TreeLinks, TreeRevocations} {
		v := db.View()
		inputs := PickCompaction(v.Manifest, t, db.opts.CompactionFanIn)
		if inputs == nil {
			continue
		}
		out, err := CompactRuns(ctx, db.store, db.cat, v, inputs, db.opts.ShardTargetBytes, db.opts.CompactionBytesPerSec)
		if err != nil {
			return did, fmt.Errorf("compact %s: %w", t, err)
		}
		ids := make([]string, len(inputs))
		for i, r := range inputs {
			ids[i] = r.ID
		}
		if err := db.apply(ctx, func(base uint64) Edit { return Edit{Base: base, Add: []Run{out}, Remove: ids} }); err != nil {
			return did, err
		}
		did = true
	}
	return did, nil
}

// CompactRuns merges runs of one tree into one compacted run: it reads every
// frame of the inputs, splits records by shard, and per shard sorts, folds
// (identical records keep the newest rev) and writes a table.
//
// Reads are paced at bytesPerSec (<= 0: unpaced).
func CompactRuns(ctx context.Context, store objstore.Store, cat *Catalog, v *View, inputs []Run, shardTargetBytes uint64, bytesPerSec int64) (Run, error) {
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
	if records*uint64(f.Width) > CompactionInputBytesMax {
		return Run{}, fmt.Errorf("compaction of %d records over the in-memory bound: %w", records, ErrTooBig)
	}
	var bits uint8
	for bits < MaxShardBits && total > shardTargetBytes<<bits {
		bits++
	}
	metas := map[string]*TableMeta{}
	for _, vr := range v.trees[tree] {
		for _, t := range vr.tables {
			if t != nil {
				metas[t.ref.ID] = t.meta
			}
		}
	}
	in := compactionInput{store: store, tree: tree, f: f, bits: bits, shards: make([][]byte, 1<<bits), start: time.Now(), bytesPerSec: bytesPerSec}
	for _, r := range inputs {
		for _, ref := range r.Tables {
			meta := metas[ref.ID]
			if meta == nil {
				return Run{}, fmt.Errorf("table %s of run %s not in the view", ref.ID, r.ID)
			}
			if err := in.read(ctx, ref.ID, meta); err != nil {
				return Run{}, err
			}
		}
	}
	shards := in.shards
	run := Run{ID: NewID(), Tree: tree, Kind: RunCompacted}
	for s, part := range shards {
		if len(part) == 0 {
			continue
		}
		SortRecords(part, f.Width)
		part = Fold(f, part)
		ref, err := writeTable(ctx, store, cat, tree, f, part, TableOptions{ShardBits: bits, Shard: uint32(s)})
		if err != nil {
			return Run{}, err
		}
		run.Tables = append(run.Tables, ref)
		shards[s] = nil
	}
	if len(run.Tables) == 0 {
		return Run{}, fmt.Errorf("compaction of %d runs produced nothing", len(inputs))
	}
	return run, nil
}

// compactionInput gathers the records of a compaction's input tables,
// split by the output's shards, reading at a paced rate.
type compactionInput struct {
	store       objstore.Store
	tree        Tree
	f           Format
	bits        uint8
	shards      [][]byte // the records of each shard of the output
	start       time.Time
	bytesRead   int64 // data bytes read so far
	bytesPerSec int64 // <= 0: unpaced
}

// read GETs the data object of table id, waits as long as the pace asks,
// and appends every record of its frames to its shard. A data object of
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
		for o := 0; o < len(dst); o += f.Width {
			s := ShardOf(dst[o:o+f.PrefixLen], in.bits)
			in.shards[s] = append(in.shards[s], dst[o:o+f.Width]...)
		}
	}
	return nil
}
