package lsm

import (
	"context"
	"fmt"
	"sync/atomic"
)

// One output shard of a compaction: its inputs' cursors, and its table
// written a record at a time as the merge produces the shard's records
// (a merge into columns), each folded as it passes.

// shardCursors returns the cursors of output shard o's inputs (its
// sequences in the open spills, and its direct tables) and how many
// records they hold.
func (in *compactionInput) shardCursors(ctx context.Context, open []*rangeSpill, direct []rangeTable, o uint32) ([]*cursor, int, error) {
	var cs []*cursor
	n := 0
	for _, rs := range open {
		if o < rs.lo || o >= rs.hi {
			continue
		}
		s := int(o - rs.lo)
		for i := range rs.sp.shards[s] {
			cs = append(cs, &cursor{src: &spillIter{sp: rs.sp, seq: &rs.sp.shards[s][i]}})
		}
		n += rs.sp.records[s]
		rs.sp.shards[s] = nil // its blocks are read once
	}
	for _, rt := range direct {
		if rt.lo != o {
			continue
		}
		meta, err := rt.t.load(ctx)
		if err != nil {
			return nil, 0, err
		}
		cs = append(cs, &cursor{src: &tableSource{in: in, ctx: ctx, id: rt.t.ref.ID, meta: meta, shard: o}})
		n += int(meta.Records)
	}
	return cs, n, nil
}

// writeShard merges output shard o's inputs (as mergeShard does) into its
// table of columns, written a record at a time (tableWriter, tw): records
// equal in all but their rev are folded as they pass (as Fold folds a
// merged shard), and each frame is encoded and checked while its records
// are in the cache, where a shard merged whole into a buffer (256 MiB at
// most) was read from memory again by each of BuildTable's passes. It
// reports false for an empty shard.
func (in *compactionInput) writeShard(ctx context.Context, cat *Catalog, open []*rangeSpill, direct []rangeTable, o uint32, tw *tableWriter) (TableRef, bool, error) {
	shardsWritten.Add(1)
	cs, n, err := in.shardCursors(ctx, open, direct, o)
	if err != nil {
		return TableRef{}, false, err
	}
	opt := TableOptions{ShardBits: in.bits, Shard: o, sharedDict: in.shared, dictOwner: in.owner, FilterBits: filterBitsOf(in.tree)}
	if err := tw.reset(in.f, opt, n); err != nil {
		return TableRef{}, false, err
	}
	if err = mergeFolded(cs, in.f.Width, uint64(n), tw.add); err != nil {
		return TableRef{}, false, fmt.Errorf("compaction: %w", err)
	}
	if tw.records() == 0 {
		return TableRef{}, false, nil
	}
	data, meta, err := tw.finish()
	if err != nil {
		return TableRef{}, false, fmt.Errorf("compaction: %w", err)
	}
	ref, err := putTable(ctx, in.store, cat, in.tree, data, meta, uint64(tw.records()), tw.b.opt)
	return ref, err == nil, err
}

// shardsWritten counts the output shards writeShard merged (tests).
var shardsWritten atomic.Int64

// columnWriters keeps a merge into columns' table writer and its buffers
// (a table's frames, its dictionary's rank scratch) for the next merge
// (idleCache).
var columnWriters idleCache[*tableWriter]

// folder folds a merge's records as they pass, as Fold folds a sorted
// buffer: a run of records equal in all but their last 8 bytes (the rev)
// becomes its last, newest one, and each record that remains goes to out
// (which must not keep the slice).
type folder struct {
	w    int
	held []byte // the record being folded into, not yet given to out
	have bool
	out  func(rec []byte) error
}

func newFolder(w int, out func(rec []byte) error) *folder {
	return &folder{w: w, held: make([]byte, w), out: out}
}

// add takes the merge's next record.
func (f *folder) add(rec []byte) error {
	if f.have && folds(f.held, rec, f.w) {
		copy(f.held, rec) // in order: rec's rev is at least held's
		return nil
	}
	if f.have {
		if err := f.out(f.held); err != nil {
			return err
		}
	}
	copy(f.held, rec)
	f.have = true
	return nil
}

// flush gives out the record held, after the merge's last.
func (f *folder) flush() error {
	if !f.have {
		return nil
	}
	f.have = false
	return f.out(f.held)
}

// mergeFolded merges the cursors' records (want of them, or the merge is
// corrupt), folds repeated links to their newest rev (folder) and hands
// each record that stays to emit: the loop a merge into columns and a
// merge of flushes share.
func mergeFolded(cs []*cursor, w int, want uint64, emit func([]byte) error) error {
	var records uint64 // merged, before folding
	fd := newFolder(w, emit)
	err := mergeEach(cs, w, func(rec []byte) error {
		records++
		return fd.add(rec)
	})
	if err == nil {
		err = fd.flush()
	}
	if err == nil && records != want {
		err = fmt.Errorf("merge gave %d records, want %d: %w", records, want, ErrCorrupt)
	}
	return err
}
