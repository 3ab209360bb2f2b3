package lsm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
)

// Defaults of Options.
const (
	DefaultCompactionFanIn = 8
	// DefaultShardTargetBytes: a compacted run gets one shard per this many
	// data bytes (rounded up to a power of two), so a shard table stays a
	// size one node can merge in memory.
	DefaultShardTargetBytes = 256 << 20
	// DefaultGCGrace: a table that left the manifest is deleted this long
	// after, so nodes still serving an older manifest can finish reading.
	DefaultGCGrace = 10 * time.Minute
)

// Options configure a DB.
type Options struct {
	Store         objstore.Store
	Dir           string // local directory for table metadata and the manifest copy
	MemtableBytes int    // per tree; DefaultMemtableBytes when 0
	CacheBytes    int64  // decoded-frame cache; DefaultCacheBytes when 0
	// MetaCacheBytes chooses how table metadata is held: 0 (the default)
	// maps the local files and reads them in place (NewCatalogMapped); a
	// positive value bounds a cache of decoded metas (the rest decoded
	// again from Dir when a query needs it); negative keeps every meta
	// decoded.
	MetaCacheBytes   int64
	CompactionFanIn  int    // flushes merged at once (merged runs: MergedFanIn of it); DefaultCompactionFanIn when 0
	ShardTargetBytes uint64 // DefaultShardTargetBytes when 0
	GCGrace          time.Duration
	NoGCGrace        bool // delete garbage at once (tests)
	// CompactionBytesPerSec paces compaction reads so that a merge never
	// takes the CPU and bandwidth ingest needs; 0 = DefaultCompactionBytesPerSec.
	CompactionBytesPerSec int64
}

// DefaultCompactionBytesPerSec: 64 MiB/s of compressed input is about a
// quarter of one small core's merge speed, and a full tier-4 merge
// (8 x 4 GiB) still finishes within ten minutes.
const DefaultCompactionBytesPerSec = 64 << 20

// DB is the single-process engine: a single-writer LSM index over an
// object store, with the backlink and revocation trees, their memtables,
// the manifest and a reader. The benchmark (package bench, `eddy-ctl bench
// lsm`) and the tests use it. A cluster node does not: it writes through
// ingest.Writer (WriteRun for each flush; the ingest runner compacts with
// PickCompaction and CompactRuns; manifest edits go through the replicated
// state, package fsm) and reads through a Reader over a View (OpenView).
type DB struct {
	opts   Options
	store  objstore.Store
	cat    *Catalog
	reader *Reader

	writeMu sync.Mutex // serialises writers: Add*, Flush, Compact
	links   *Memtable
	revs    *Memtable

	mu struct {
		sync.Mutex
		view      *View
		garbage   []garbageItem
		published []string // manifest copies, oldest first
	}
}

type garbageItem struct {
	tree Tree
	ref  TableRef
	at   time.Time
}

// Open opens (or creates) a DB: the manifest comes from the local copy in
// Dir, else the newest copy in the store, else it is empty.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if opts.Store == nil || opts.Dir == "" {
		return nil, errors.New("lsm: Open needs a store and a directory")
	}
	opts.CompactionFanIn = FanInOrDefault(opts.CompactionFanIn)
	if opts.ShardTargetBytes == 0 {
		opts.ShardTargetBytes = DefaultShardTargetBytes
	}
	if opts.CompactionBytesPerSec <= 0 {
		opts.CompactionBytesPerSec = DefaultCompactionBytesPerSec
	}
	if opts.GCGrace == 0 && !opts.NoGCGrace {
		opts.GCGrace = DefaultGCGrace
	}
	if _, err := RemoveSpills(opts.Dir); err != nil {
		return nil, fmt.Errorf("lsm: remove a cut-short compaction's spill: %w", err)
	}
	db := &DB{
		opts:   opts,
		store:  opts.Store,
		cat:    newCatalog(opts.Dir, opts.Store, opts.MetaCacheBytes),
		reader: NewReader(opts.Store, NewFrameCache(opts.CacheBytes)),
		links:  NewMemtable(BacklinkFormat, opts.MemtableBytes),
		revs:   NewMemtable(RevocationFormat, opts.MemtableBytes),
	}
	m, err := db.loadManifest(ctx)
	if err != nil {
		return nil, err
	}
	v, err := OpenView(ctx, db.cat, m)
	if err != nil {
		return nil, fmt.Errorf("open manifest generation %d: %w", m.Generation, err)
	}
	db.mu.view = v
	return db, nil
}

func (db *DB) localManifestPath() string { return filepath.Join(db.opts.Dir, "MANIFEST") }

// loadManifest returns the newest manifest this DB can see: its local copy,
// or the newest copy published in the store if that is newer (this
// directory was offline while another process wrote; or it is new).
func (db *DB) loadManifest(ctx context.Context) (*Manifest, error) {
	local := &Manifest{}
	if b, err := os.ReadFile(db.localManifestPath()); err == nil {
		if local, err = DecodeManifest(b); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	newest, newestGen, err := newestManifestKey(ctx, db.store)
	if err != nil {
		return nil, err
	}
	if newest == "" || newestGen <= local.Generation {
		return local, nil
	}
	b, err := db.store.Get(ctx, newest)
	if err != nil {
		return nil, err
	}
	return DecodeManifest(b)
}

// newestManifestKey lists the published manifest copies.
func newestManifestKey(ctx context.Context, store objstore.Store) (string, uint64, error) {
	var newest string
	var newestGen uint64
	err := store.List(ctx, "manifests/", func(key string, _ int64) error {
		gen, ok := manifestGeneration(key)
		if ok && (newest == "" || gen > newestGen) {
			newest, newestGen = key, gen
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("list manifests: %w", err)
	}
	return newest, newestGen, nil
}

func manifestGeneration(key string) (uint64, bool) {
	name := strings.TrimPrefix(key, "manifests/")
	gen, err := strconv.ParseUint(strings.SplitN(name, "-", 2)[0], 10, 64)
	return gen, err == nil
}

// manifestCopiesKept: published manifest copies older than this many
// generations are deleted (after the GC grace, like tables).
const manifestCopiesKept = 16

// ManifestKey is the object key of a published manifest copy:
// manifests/<generation, 20 digits>-<sha256 prefix>.
func ManifestKey(m *Manifest, enc []byte) string {
	sum := sha256.Sum256(enc)
	return fmt.Sprintf("manifests/%020d-%s", m.Generation, hex.EncodeToString(sum[:8]))
}

// View returns the view queries are answered from.
func (db *DB) View() *View {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.mu.view
}

// Reader returns the DB's reader.
func (db *DB) Reader() *Reader { return db.reader }

// Backlinks answers a query from the current view.
func (db *DB) Backlinks(ctx context.Context, q Query) (*Result, error) {
	return db.reader.Backlinks(ctx, db.View(), q)
}

// Count counts the live links to target from the current view.
func (db *DB) Count(ctx context.Context, target link.RecordID, f Filter) (uint64, Stats, error) {
	return db.reader.Count(ctx, db.View(), target, f)
}

// AddBacklink buffers a link; it becomes durable and visible at the next
// Flush. ErrFull means Flush first.
func (db *DB) AddBacklink(l *link.Backlink) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	return db.links.AddBacklink(l)
}

// AddRevocation buffers a revocation.
func (db *DB) AddRevocation(v *link.Revocation) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	return db.revs.AddRevocation(v)
}

// NeedsFlush reports whether a memtable is full.
func (db *DB) NeedsFlush() bool {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	return db.links.Full() || db.revs.Full()
}

// Flush writes the memtables as delta runs and publishes them in one
// manifest edit. Revocations and links written together appear together.
func (db *DB) Flush(ctx context.Context) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	var add []Run
	for _, mt := range []struct {
		tree Tree
		m    *Memtable
	}{{TreeRevocations, db.revs}, {TreeLinks, db.links}} {
		if mt.m.Len() == 0 {
			continue
		}
		run, err := WriteRun(ctx, db.store, db.cat, mt.tree, RunDelta, 0, mt.m.Sorted())
		if err != nil {
			return fmt.Errorf("flush %s: %w", mt.tree, err)
		}
		add = append(add, run)
	}
	if len(add) == 0 {
		return nil
	}
	if err := db.apply(ctx, func(base uint64) Edit { return Edit{Base: base, Add: add} }); err != nil {
		return err
	}
	db.links.Reset()
	db.revs.Reset()
	return nil
}

// apply builds an edit on the current generation, applies it, opens the
// new view, persists the manifest locally and publishes a copy.
func (db *DB) apply(ctx context.Context, build func(base uint64) Edit) error {
	cur := db.View()
	next, garbage, err := cur.Manifest.Apply(build(cur.Manifest.Generation))
	if err != nil {
		return err
	}
	v, err := OpenView(ctx, db.cat, next)
	if err != nil {
		return err
	}
	enc := next.Encode()
	if err := db.store.Put(ctx, ManifestKey(next, enc), enc); err != nil {
		return fmt.Errorf("publish manifest: %w", err)
	}
	if err := writeFileAtomic(db.localManifestPath(), enc); err != nil {
		return fmt.Errorf("save manifest: %w", err)
	}
	db.mu.Lock()
	db.mu.view = v
	db.mu.published = append(db.mu.published, ManifestKey(next, enc))
	var oldCopies []string
	if n := len(db.mu.published) - manifestCopiesKept; n > 0 {
		oldCopies = append(oldCopies, db.mu.published[:n]...)
		db.mu.published = db.mu.published[n:]
	}
	now := time.Now()
	for _, r := range cur.Manifest.Runs {
		for _, g := range garbage {
			for _, t := range r.Tables {
				if t.ID == g.ID {
					db.mu.garbage = append(db.mu.garbage, garbageItem{tree: r.Tree, ref: g, at: now})
				}
			}
		}
	}
	db.mu.Unlock()
	for _, k := range oldCopies {
		if err := db.store.Delete(ctx, k); err != nil {
			return fmt.Errorf("delete old manifest copy: %w", err)
		}
	}
	return db.CollectGarbage(ctx)
}

// CollectGarbage deletes tables that left the manifest more than the grace
// period ago.
func (db *DB) CollectGarbage(ctx context.Context) error {
	db.mu.Lock()
	var due, keep []garbageItem
	for _, g := range db.mu.garbage {
		if time.Since(g.at) >= db.opts.GCGrace {
			due = append(due, g)
		} else {
			keep = append(keep, g)
		}
	}
	db.mu.garbage = keep
	db.mu.Unlock()
	var errs []error
	for _, g := range due {
		db.reader.cache.DropTable(g.ref.ID)
		db.cat.Drop(g.tree, g.ref.ID)
		for _, k := range []string{dataKey(g.tree, g.ref.ID), metaKey(g.tree, g.ref.ID)} {
			if err := db.store.Delete(ctx, k); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// WriteRun writes sorted, folded records as a run: a delta run is one
// table, in the fast form if its tree's records are stored in columns
// (TableOptions.Fast, fastTree: a flush, merged again soon); a compacted run is split into 1<<shardBits tables by the hash of
// each record's key prefix (empty shards get no table). Each table is
// PUT (data, then meta) and its meta kept in the catalog; the run is not
// yet in any manifest.
func WriteRun(ctx context.Context, store objstore.Store, cat *Catalog, tree Tree, kind RunKind, shardBits uint8, recs []byte) (Run, error) {
	f, err := FormatOf(tree)
	if err != nil {
		return Run{}, err
	}
	run := Run{ID: NewID(), Tree: tree, Kind: kind}
	if kind == RunDelta {
		ref, err := writeTable(ctx, store, cat, tree, f, recs, TableOptions{Fast: fastTree(tree)})
		if err != nil {
			return Run{}, err
		}
		run.Tables = []TableRef{ref}
		return run, nil
	}
	shards := splitShards(f, recs, shardBits)
	for s, part := range shards {
		if len(part) == 0 {
			continue
		}
		ref, err := writeTable(ctx, store, cat, tree, f, part, TableOptions{ShardBits: shardBits, Shard: uint32(s)})
		if err != nil {
			return Run{}, err
		}
		run.Tables = append(run.Tables, ref)
	}
	return run, nil
}

// splitShards splits sorted records by shard, keeping each part sorted.
func splitShards(f Format, recs []byte, bits uint8) [][]byte {
	shards := make([][]byte, 1<<bits)
	if bits == 0 {
		shards[0] = recs
		return shards
	}
	w := f.Width
	for off := 0; off < len(recs); {
		p := recs[off : off+f.PrefixLen]
		s := ShardOf(p, bits)
		end := prefixEnd(recs, off, w, f.PrefixLen)
		shards[s] = append(shards[s], recs[off:end]...)
		off = end
	}
	return shards
}

func writeTable(ctx context.Context, store objstore.Store, cat *Catalog, tree Tree, f Format, recs []byte, opt TableOptions) (TableRef, error) {
	if opt.FilterBits == 0 {
		opt.FilterBits = filterBitsOf(tree)
		if opt.Fast {
			opt.FilterBits = fastFilterBitsOf(tree)
		}
	}
	if opt.Fast {
		data, meta, done, err := buildFastTable(f, recs, opt)
		if err != nil {
			return TableRef{}, err
		}
		defer done() // after the put: data is the writer's buffer
		return putTable(ctx, store, cat, tree, data, meta, uint64(len(recs)/f.Width), opt)
	}
	data, meta, err := BuildTable(f, recs, opt)
	if err != nil {
		return TableRef{}, err
	}
	return putTable(ctx, store, cat, tree, data, meta, uint64(len(recs)/f.Width), opt)
}

// putTable puts a built table's data and meta objects (records records,
// built with opt) into the store and adds it to the catalog.
func putTable(ctx context.Context, store objstore.Store, cat *Catalog, tree Tree, data, meta []byte, records uint64, opt TableOptions) (TableRef, error) {
	id := NewID()
	if err := store.Put(ctx, dataKey(tree, id), data); err != nil {
		return TableRef{}, fmt.Errorf("put table %s: %w", id, err)
	}
	if err := store.Put(ctx, metaKey(tree, id), meta); err != nil {
		return TableRef{}, fmt.Errorf("put table meta %s: %w", id, err)
	}
	if _, err := cat.Add(tree, id, meta); err != nil {
		return TableRef{}, err
	}
	return TableRef{
		ID: id, Records: records, DataBytes: uint64(len(data)), MetaBytes: uint64(len(meta)),
		ShardBits: opt.ShardBits, Shard: opt.Shard,
	}, nil
}

// filterBitsOf is the fingerprint width of a tree's table filters. The
// links tree's tables get 8 bits: their filters were the largest part of
// the local metadata (0.44 of 2.11 bytes a link at 1B links, paid again
// in the bucket's meta), and a false positive there costs one frame read
// in round one, which goes with the round's other reads (no extra round
// trip): with ~18 runs and two keys a target, one query in ~7 reads a
// frame for nothing. The revocation tree keeps 16 bits: round two asks it
// about every source a query renders, nearly all absent (DefaultFilterBits
// says why), and it is ~1% of the index.
func filterBitsOf(tree Tree) int {
	if tree == TreeLinks {
		return FilterBits8
	}
	return DefaultFilterBits
}

// fastFilterBitsOf is the filter of a tree's tables in the fast form (a
// flush's, a merge of flushes'): the links tree's take the blocked filter,
// built in a fifth of the fuse filter's CPU or less for a false-positive rate of
// ~0.54% against 0.39% (FilterBlocked), since they are rewritten within
// minutes; the revocation tree's keep their 16-bit fuse filter, whose
// false positives round two would pay on every absent source.
func fastFilterBitsOf(tree Tree) int {
	if tree == TreeLinks {
		return FilterBlocked
	}
	return filterBitsOf(tree)
}

// newCatalog is the catalog of an Options.MetaCacheBytes.
func newCatalog(dir string, store objstore.Store, n int64) *Catalog {
	switch {
	case n == 0:
		return NewCatalogMapped(dir, store)
	case n < 0:
		return NewCatalog(dir, store)
	}
	return NewCatalogBounded(dir, store, n)
}

// CatalogStats returns the figures of the DB's table metadata cache.
func (db *DB) CatalogStats() CatalogStats { return db.cat.Stats() }

// Close flushes nothing (unflushed writes are not durable by design) and
// releases the DB.
func (db *DB) Close() error { return nil }
