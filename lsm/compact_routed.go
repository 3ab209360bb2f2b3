package lsm

import (
	"bytes"
	"context"
	"fmt"
)

// routedMergeBytesMax bounds the memory of a merge in one pass
// (mergeRouted): its inputs' data objects and its output's frames, about
// twice its inputs' bytes. A merge of eight flushes of the default
// memtable at 1B links holds ~290 MB; a larger merge of flushes is split
// into spills instead.
var routedMergeBytesMax uint64 = 384 << 20 // a var for tests

// routable reports whether CompactRuns merges plan in one pass
// (mergeRouted): a merge into the fast form (a merge of flushes) in
// several output shards, every input table holding records of all of
// them (a flush's one table), whose inputs' bytes are at most half of
// routedMergeBytesMax.
func routable(opt CompactOptions, bits uint8, plan []rangeTable) bool {
	if !opt.Fast || bits == 0 || len(plan) == 0 {
		return false
	}
	var data uint64
	for _, rt := range plan {
		if rt.lo != 0 || rt.hi != 1<<bits {
			return false
		}
		data += rt.t.ref.DataBytes
	}
	return 2*data <= routedMergeBytesMax
}

// mergeRouted is CompactRuns for a routable plan. The input tables are
// merged in one pass, in key order, each a frame at a time; identical
// records are folded to the newest rev as they pass (as Fold does a
// shard), and each output record goes to its shard's table, which is
// encoded frame by frame as it fills (tableWriter). The tables are
// then finished and put in shard order.
//
// Against splitting every input into a spill by output shard and merging
// shard by shard (what CompactRuns does otherwise), this saves a shuffle,
// an S2 encode and decode and the spill's writes and reads a record: the
// records are encoded once, in their output frames. Memory: every
// input's data object (compressed, as the bucket holds it) and one decoded
// frame of each, and the output's frames (compressed: at 1B links, a
// merge of eight flushes of ~1M links holds about 140 MB of inputs and as
// much of output); no local disk but the tables it puts.
func (in *compactionInput) mergeRouted(ctx context.Context, cat *Catalog, plan []rangeTable) (Run, error) {
	w, p := in.f.Width, in.f.PrefixLen
	cs := make([]*cursor, 0, len(plan))
	var want uint64
	for _, rt := range plan {
		meta, err := rt.t.load(ctx)
		if err != nil {
			return Run{}, err
		}
		cs = append(cs, &cursor{src: &tableSource{in: in, ctx: ctx, id: rt.t.ref.ID, meta: meta, all: true}})
		want += meta.Records
	}
	opt := TableOptions{ShardBits: in.bits, Fast: true, FilterBits: fastFilterBitsOf(in.tree)}
	writers := make([]*tableWriter, 1<<in.bits)
	spare := takeRoutedWriters()
	defer func() {
		for _, tw := range writers {
			if tw != nil {
				spare = append(spare, tw)
			}
		}
		keepRoutedWriters(spare)
	}()
	var (
		pre    = make([]byte, p) // the last routed record's prefix
		shard  uint32            // and its shard
		routed uint64
	)
	route := func(rec []byte) error {
		if routed == 0 || !bytes.Equal(rec[:p], pre) {
			shard = ShardOf(rec[:p], in.bits)
			copy(pre, rec[:p])
		}
		if routed++; routed%(1<<16) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		tw := writers[shard]
		if tw == nil {
			o := opt
			o.Shard = shard
			if k := len(spare); k > 0 {
				tw, spare = spare[k-1], spare[:k-1]
			} else {
				tw = &tableWriter{}
			}
			writers[shard] = tw
			if err := tw.reset(in.f, o, int(want>>in.bits)); err != nil {
				return err
			}
		}
		return tw.add(rec)
	}
	if err := mergeFolded(cs, w, want, route); err != nil {
		return Run{}, fmt.Errorf("compaction: %w", err)
	}
	run := Run{ID: NewID(), Tree: in.tree, Kind: RunCompacted}
	for _, tw := range writers {
		if tw == nil {
			continue
		}
		data, meta, err := tw.finish()
		if err != nil {
			return Run{}, fmt.Errorf("compaction: %w", err)
		}
		ref, err := putTable(ctx, in.store, cat, in.tree, data, meta, uint64(tw.records()), tw.b.opt)
		if err != nil {
			return Run{}, err
		}
		run.Tables = append(run.Tables, ref)
	}
	if len(run.Tables) == 0 {
		return Run{}, fmt.Errorf("compaction of %d tables produced nothing", len(plan))
	}
	return run, nil
}

// routedWriters keeps the table writers of a routed merge (the largest
// set of the last ones, if two lanes ran such merges at once: never more
// than one merge's), with their buffers (the output's frames: ~30% of its
// records' bytes), for the next one (idleCache). Without it, a merge of
// eight flushes at 1B links (32 tables) took 2.7-3.0 s against 2.4-2.6 s
// split into spills (BenchmarkMergeFlushes), its S2 encoder faulting its
// output in.
var routedWriters idleCache[[]*tableWriter]

// takeRoutedWriters returns the kept writers (none if none are kept).
func takeRoutedWriters() []*tableWriter { return routedWriters.take() }

// keepRoutedWriters keeps ws for the next routed merge, unless more are
// kept already.
func keepRoutedWriters(ws []*tableWriter) {
	routedWriters.keep(ws, func(kept, ws []*tableWriter) bool { return len(kept) < len(ws) })
}
