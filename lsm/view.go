package lsm

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/eddy-backlinks/eddy/objstore"
)

// Catalog holds table metadata as files on local disk
// (dir/tables/<tree>/<id>.meta, fetched from the object store the first
// time a node sees a table). A mapped catalog (NewCatalogMapped, what a
// node and DB use by default) maps each file and reads it in place
// (meta_local.go); the others decode each meta whole and keep the decoded
// metas in a cache, of bounded size or not (the metas a query needs are
// decoded again from local disk when the cache let them go). Safe for
// concurrent use.
type Catalog struct {
	dir   string
	store objstore.Store
	// budget bounds the decoded metas kept in memory (<= 0: every meta
	// stays decoded, or mapped).
	budget int64
	mapped bool // local files in the mapped layout, read in place

	mu struct {
		sync.RWMutex
		metas  map[string]*metaEntry // decoded, by table ID
		onDisk map[string]bool       // tables whose local file was written or found
		// dropped are tables Drop forgot (garbage): a query still on an
		// older view may load one again, from the store, without the
		// catalog keeping it or writing its file back. Bounded: cleared
		// past droppedMax (a table dropped that long ago is no view's).
		dropped map[string]bool
		ring    []string // the decoded metas' IDs, in the clock's order
		hand    int      // the clock's next candidate in ring
		bytes   int64    // decoded bytes held
	}
	hits, misses, evictions atomic.Uint64
	damaged                 atomic.Uint64 // local copies that failed their checks (Load)
	// OnDamaged, when set before use, is told of each local copy that
	// failed its checks (a damaged disk): Load discards it and fetches the
	// table's meta again, so nothing else would show it.
	OnDamaged func(t Tree, id string, err error)
}

// metaEntry is one decoded meta in the cache; used is the clock's
// reference bit, set by every hit.
type metaEntry struct {
	m    *TableMeta
	size int64
	used atomic.Bool
}

// DefaultMetaCacheBytes is a size for a bounded cache of decoded table
// metadata (NewCatalogBounded; nodes map their metas by default instead):
// at ~0.35-0.75 local meta bytes a link, decoded about 1.5 times that, the
// metas of about 300M links.
const DefaultMetaCacheBytes = 256 << 20

// NewCatalog returns a catalog keeping meta files under dir and every
// meta decoded in memory.
func NewCatalog(dir string, store objstore.Store) *Catalog {
	return NewCatalogBounded(dir, store, 0)
}

// NewCatalogMapped returns a catalog keeping the links tree's meta files
// under dir in the mapped layout and reading them in place (the heap holds
// a few hundred bytes a table, the page cache what queries touch), and the
// other trees' decoded (maps).
func NewCatalogMapped(dir string, store objstore.Store) *Catalog {
	c := NewCatalogBounded(dir, store, 0)
	c.mapped = hostLittleEndian
	return c
}

// maps reports whether the catalog maps a meta of metaBytes of tree t: a
// mapped catalog maps the links tree's, which grow with the links (about
// one byte a link), and keeps the other trees' decoded unless they are
// large: revocations' and the PLC map's are small (about 2% of the whole),
// and each query asks their filters and fences once per source or DID it
// renders, hundreds of times, where a lookup in memory costs less than one
// in a mapped file's pages; but a large one (a big compacted run of a
// whole-network index) is mapped too, so that the heap stays bounded.
func (c *Catalog) maps(t Tree, metaBytes int) bool {
	return c.mapped && (t == TreeLinks || metaBytes >= mapMinBytes)
}

// mapMinBytes is the size from which a mapped catalog maps the meta of a
// tree other than the links tree (a variable for the tests).
var mapMinBytes = 16 << 20

// NewCatalogBounded returns a catalog keeping meta files under dir and at
// most about budget bytes of decoded metas in memory (<= 0: all).
func NewCatalogBounded(dir string, store objstore.Store, budget int64) *Catalog {
	c := &Catalog{dir: dir, store: store, budget: budget}
	c.mu.metas = make(map[string]*metaEntry)
	c.mu.onDisk = make(map[string]bool)
	c.mu.dropped = make(map[string]bool)
	return c
}

// droppedMax bounds the catalog's memory of dropped tables.
const droppedMax = 1 << 16

// CatalogStats are a catalog's cache figures.
type CatalogStats struct {
	Hits, Misses, Evictions uint64
	Bytes                   int64  // decoded metas held (mapped: their heap bytes)
	Metas                   int    // decoded (or mapped) metas held
	Budget                  int64  // <= 0: unbounded
	Mapped                  bool   // metas read in place from mapped files
	LocalDamaged            uint64 // local copies that failed their checks and were fetched again
}

// Stats returns the cache's figures.
func (c *Catalog) Stats() CatalogStats {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return CatalogStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(),
		Bytes: c.mu.bytes, Metas: len(c.mu.metas), Budget: c.budget, Mapped: c.mapped, LocalDamaged: c.damaged.Load()}
}

func (c *Catalog) localPath(t Tree, id string) string {
	return filepath.Join(c.dir, "tables", string(t), id+".meta")
}

// Add records the meta of a table this node just wrote (or fetched); a
// meta that does not decode is a *CorruptError.
func (c *Catalog) Add(t Tree, id string, meta []byte) (*TableMeta, error) {
	return c.add(context.Background(), t, id, meta)
}

// add is Add; ctx bounds the fetch of the table whose dictionary this
// one's frames use, if it is not here yet.
func (c *Catalog) add(ctx context.Context, t Tree, id string, meta []byte) (*TableMeta, error) {
	m, err := DecodeMeta(meta)
	if errors.Is(err, ErrCorrupt) {
		return nil, &CorruptError{Tree: t, Table: id, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", id, err)
	}
	c.mu.Lock()
	if c.mu.dropped[id] {
		c.mu.Unlock()
		// A replaced table a query on an older view asked for: not kept.
		if err := c.resolveDict(ctx, t, id, m); err != nil {
			return nil, err
		}
		return m, nil
	}
	c.mu.onDisk[id] = true // before the file appears: DropStale leaves it
	c.mu.Unlock()
	if !c.maps(t, len(meta)) {
		addHook(id, false)
		if err := writeFileAtomic(c.localPath(t, id), meta); err != nil {
			c.unmark(t, id)
			return nil, err
		}
		addHook(id, true)
		if err := c.resolveDict(ctx, t, id, m); err != nil {
			return nil, err
		}
		return c.keep(t, id, m, true), nil
	}
	local, err := encodeLocalMeta(m, meta)
	if err != nil {
		return nil, &CorruptError{Tree: t, Table: id, Err: err}
	}
	path := c.localPath(t, id)
	addHook(id, false)
	if err := writeFileAtomic(path, local); err != nil {
		c.unmark(t, id)
		return nil, err
	}
	addHook(id, true)
	mm, err := mapLocalMeta(path)
	if errors.Is(err, fs.ErrNotExist) && c.isDropped(id) {
		// Dropped (and its file removed) since the check above: the
		// caller reads the decoded meta, the catalog keeps nothing.
		if err := c.resolveDict(ctx, t, id, m); err != nil {
			return nil, err
		}
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", id, err)
	}
	mm.Name = m.Name
	if err := c.resolveDict(ctx, t, id, mm); err != nil {
		return nil, err
	}
	return c.keep(t, id, mm, true), nil
}

// unmark undoes add's mark of a table whose local file could not be
// written (a full disk), unless another add wrote it meanwhile: a bounded
// cache's ensure takes a marked table as being on disk, and would serve a
// view without its meta.
func (c *Catalog) unmark(t Tree, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.metas[id] != nil {
		return
	}
	if _, err := os.Stat(c.localPath(t, id)); err != nil {
		delete(c.mu.onDisk, id)
	}
}

func (c *Catalog) isDropped(id string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mu.dropped[id]
}

// addHook is called (tests) before add writes a local file and after
// (written).
var addHook = func(id string, written bool) {}

// resolveDict gives m (table id, not yet shared) the dictionary of the
// table its frames use, if that is another's (TableMeta.DictTable),
// loading that table's meta as any other. A reference to a table that is
// not the dictionary's is a *CorruptError of m's table.
func (c *Catalog) resolveDict(ctx context.Context, t Tree, id string, m *TableMeta) error {
	owner := m.DictTable()
	if owner == "" || m.dict != nil {
		return nil
	}
	if ctx.Value(resolvingDict{}) != nil {
		// The table being loaded is a dictionary's: it must hold it. (So
		// references never chain, nor loop.)
		return &CorruptError{Tree: t, Table: id, Err: corruptf("the table of a dictionary refers to another's")}
	}
	if owner == id {
		return &CorruptError{Tree: t, Table: id, Err: corruptf("the table refers to its own dictionary")}
	}
	om, err := c.Load(context.WithValue(ctx, resolvingDict{}, true), t, TableRef{ID: owner})
	if err != nil {
		return fmt.Errorf("table %s: the dictionary of table %s: %w", id, owner, err)
	}
	if err := m.useDict(om); err != nil {
		return &CorruptError{Tree: t, Table: id, Err: err}
	}
	return nil
}

// resolvingDict marks the context of loading a table for its dictionary.
type resolvingDict struct{}

// Load returns a table's meta: from memory, else local disk, else the
// object store (and then keeps a local copy). A local copy that fails its
// checksum is discarded and fetched again; a fetched meta that fails is a
// *CorruptError.
func (c *Catalog) Load(ctx context.Context, t Tree, ref TableRef) (*TableMeta, error) {
	c.mu.RLock()
	e := c.mu.metas[ref.ID]
	c.mu.RUnlock()
	if e != nil {
		e.used.Store(true)
		c.hits.Add(1)
		return e.m, nil
	}
	c.misses.Add(1)
	if c.isDropped(ref.ID) {
		return c.fetchDropped(ctx, t, ref)
	}
	path := c.localPath(t, ref.ID)
	var mapErr error // the mapped layout's refusal of the file
	if c.mapped {
		// The file's layout says whether it is mapped (Add chose).
		m, err := mapLocalMeta(path)
		mapErr = err
		if err == nil {
			if err := c.resolveDict(ctx, t, ref.ID, m); err != nil {
				return nil, err
			}
			return c.keep(t, ref.ID, m, true), nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return c.fetch(ctx, t, ref)
		}
		// The bucket's bytes (a meta kept decoded, or one an earlier
		// binary wrote, converted if it is to be mapped); a corrupt one is
		// fetched again.
	}
	if b, err := os.ReadFile(path); err == nil {
		m, err := DecodeMeta(b)
		if err == nil {
			if c.maps(t, len(b)) {
				return c.add(ctx, t, ref.ID, b)
			}
			if err := c.resolveDict(ctx, t, ref.ID, m); err != nil {
				return nil, err
			}
			return c.keep(t, ref.ID, m, true), nil
		}
		// Neither layout takes it: a mapped catalog's map found it
		// corrupt (not a map that failed, ENOMEM say), and a decoded one's
		// file is not of the mapped layout (a conversion, not a damage).
		if errors.Is(mapErr, ErrCorrupt) || (mapErr == nil && localLayout(b) == 0) {
			c.damaged.Add(1)
			if c.OnDamaged != nil {
				c.OnDamaged(t, ref.ID, cmp.Or(mapErr, err))
			}
		}
		_ = os.Remove(path) // corrupt local copy (or another layout's): refetch
	}
	return c.fetch(ctx, t, ref)
}

// fetch GETs a table's meta from the store and adds it.
func (c *Catalog) fetch(ctx context.Context, t Tree, ref TableRef) (*TableMeta, error) {
	b, err := c.store.Get(ctx, metaKey(t, ref.ID))
	if err != nil {
		return nil, fmt.Errorf("fetch meta of table %s: %w", ref.ID, missing(t, ref.ID, err))
	}
	if len(b) > MaxMetaBytes || (ref.MetaBytes != 0 && uint64(len(b)) != ref.MetaBytes) {
		return nil, &CorruptError{Tree: t, Table: ref.ID, Err: fmt.Errorf("meta of %d bytes, manifest says %d: %w", len(b), ref.MetaBytes, ErrCorrupt)}
	}
	return c.add(ctx, t, ref.ID, b)
}

// fetchDropped decodes a dropped table's meta from the store for a query
// on an older view, keeping nothing.
func (c *Catalog) fetchDropped(ctx context.Context, t Tree, ref TableRef) (*TableMeta, error) {
	b, err := c.store.Get(ctx, metaKey(t, ref.ID))
	if err != nil {
		return nil, fmt.Errorf("fetch meta of replaced table %s: %w", ref.ID, missing(t, ref.ID, err))
	}
	m, err := DecodeMeta(b)
	if err != nil {
		return nil, &CorruptError{Tree: t, Table: ref.ID, Err: err}
	}
	if err := c.resolveDict(ctx, t, ref.ID, m); err != nil {
		return nil, err
	}
	return m, nil
}

// ensure makes sure a table's meta is on local disk (or decoded in
// memory), fetching it from the store if not: what a view needs before it
// serves the table. With an unbounded cache it loads the meta.
func (c *Catalog) ensure(ctx context.Context, t Tree, ref TableRef) error {
	if c.budget <= 0 || c.mapped {
		_, err := c.Load(ctx, t, ref)
		return err
	}
	c.mu.RLock()
	known := c.mu.onDisk[ref.ID] || c.mu.metas[ref.ID] != nil
	c.mu.RUnlock()
	if known {
		return nil
	}
	if _, err := os.Stat(c.localPath(t, ref.ID)); err == nil {
		c.mu.Lock()
		c.mu.onDisk[ref.ID] = true
		c.mu.Unlock()
		return nil
	}
	_, err := c.fetch(ctx, t, ref)
	return err
}

// keep adds a decoded meta to the cache (or returns the one another
// goroutine added first) and evicts what the budget asks, never m itself.
// onDisk says the caller wrote or found its local file.
func (c *Catalog) keep(t Tree, id string, m *TableMeta, onDisk bool) *TableMeta {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.dropped[id] {
		// Dropped meanwhile: the caller uses it, the catalog forgets it,
		// and the file an add wrote after Drop removed it goes too (a
		// mapping of it stays valid).
		if onDisk {
			_ = os.Remove(c.localPath(t, id))
		}
		return m
	}
	if onDisk {
		c.mu.onDisk[id] = true
	}
	if e := c.mu.metas[id]; e != nil {
		e.used.Store(true)
		return e.m
	}
	e := &metaEntry{m: m, size: m.memBytes()}
	e.used.Store(true)
	c.mu.metas[id] = e
	c.mu.ring = append(c.mu.ring, id)
	c.mu.bytes += e.size
	c.evictLocked(id)
	return m
}

// evictLocked lets decoded metas go, by the clock (a meta used since the
// hand last passed gets another round), until the cache is within its
// budget; it never evicts keep.
func (c *Catalog) evictLocked(keep string) {
	if c.budget <= 0 {
		return
	}
	// Every entry the hand passes twice is evicted (the first pass clears
	// its bit), so 2*len(ring)+1 skips suffice to get within the budget.
	skips, most := 0, 2*len(c.mu.ring)+1
	for c.mu.bytes > c.budget && len(c.mu.ring) > 1 && skips < most {
		if c.mu.hand >= len(c.mu.ring) {
			c.mu.hand = 0
		}
		id := c.mu.ring[c.mu.hand]
		e := c.mu.metas[id]
		if e != nil && (id == keep || e.used.Swap(false)) {
			c.mu.hand++
			skips++
			continue
		}
		// Evict: remove from the ring (the last ID takes its place).
		last := len(c.mu.ring) - 1
		c.mu.ring[c.mu.hand] = c.mu.ring[last]
		c.mu.ring = c.mu.ring[:last]
		if e != nil {
			delete(c.mu.metas, id)
			c.mu.bytes -= e.size
			c.evictions.Add(1)
		}
	}
}

// Drop forgets a table (it became garbage) and removes its local meta.
func (c *Catalog) Drop(t Tree, id string) {
	c.mu.Lock()
	if c.mu.dropped[id] && c.mu.metas[id] == nil && !c.mu.onDisk[id] {
		c.mu.Unlock()
		return // dropped already (a garbage table is dropped on every switch until collected)
	}
	c.forgetLocked(id)
	if len(c.mu.dropped) >= droppedMax {
		clear(c.mu.dropped)
	}
	c.mu.dropped[id] = true
	c.mu.Unlock()
	_ = os.Remove(c.localPath(t, id))
}

// tmpPrefix names writeFileAtomic's temporary files; this process's
// carry tmpOwn after it, so that a file named otherwise was left by an
// earlier process (a crash between the create and the rename).
const tmpPrefix = ".tmp-"

var tmpOwn = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "-"
}()

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), tmpPrefix+tmpOwn+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// viewTable is one table of a view; its meta comes from the catalog.
type viewTable struct {
	tree Tree
	ref  TableRef
	cat  *Catalog
}

// load returns the table's meta (from the catalog's cache, else local
// disk, else the store).
func (t *viewTable) load(ctx context.Context) (*TableMeta, error) {
	return t.cat.Load(ctx, t.tree, t.ref)
}

// viewRun is one run of a view: a delta run has one table; a compacted run
// has one table per shard, indexed by shard.
type viewRun struct {
	run       Run
	shardBits uint8
	tables    []*viewTable // delta: [0]; compacted: by shard (nil when a shard is empty)
}

// tablesFor returns the tables of the run that may hold prefix.
func (r *viewRun) tableFor(prefix []byte) *viewTable {
	if r.run.Kind != RunCompacted {
		return r.tables[0]
	}
	s := ShardOf(prefix, r.shardBits)
	if int(s) >= len(r.tables) {
		return nil
	}
	return r.tables[s]
}

// View is a manifest with the metadata of all its tables loaded: what a
// node answers queries from. Immutable.
type View struct {
	Manifest *Manifest
	trees    map[Tree][]*viewRun
}

// OpenView makes sure the meta of every table of m is on local disk
// (fetching missing ones from the store, concurrently; with an unbounded
// catalog, decoded in memory), so that a node exposes a manifest to
// queries only once it can serve all of it.
func OpenView(ctx context.Context, cat *Catalog, m *Manifest) (*View, error) {
	v := &View{Manifest: m, trees: make(map[Tree][]*viewRun)}
	type job struct {
		t   *viewTable
		err error
	}
	var jobs []*job
	for _, r := range m.Runs {
		vr := &viewRun{run: r}
		if r.Kind == RunCompacted {
			var bits uint8
			for _, t := range r.Tables {
				if t.ShardBits > bits {
					bits = t.ShardBits
				}
			}
			if bits > MaxShardBits {
				return nil, fmt.Errorf("run %s: %d shard bits: %w", r.ID, bits, ErrCorrupt)
			}
			vr.shardBits = bits
			vr.tables = make([]*viewTable, 1<<bits)
		} else {
			if len(r.Tables) != 1 {
				return nil, fmt.Errorf("delta run %s has %d tables: %w", r.ID, len(r.Tables), ErrCorrupt)
			}
			vr.tables = make([]*viewTable, 1)
		}
		for _, ref := range r.Tables {
			vt := &viewTable{tree: r.Tree, ref: ref, cat: cat}
			if r.Kind == RunCompacted {
				if ref.ShardBits != vr.shardBits || int(ref.Shard) >= len(vr.tables) || vr.tables[ref.Shard] != nil {
					return nil, fmt.Errorf("run %s: bad shard %d/%d: %w", r.ID, ref.Shard, ref.ShardBits, ErrCorrupt)
				}
				vr.tables[ref.Shard] = vt
			} else {
				vr.tables[0] = vt
			}
			jobs = append(jobs, &job{t: vt})
		}
		v.trees[r.Tree] = append(v.trees[r.Tree], vr)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, FetchConcurrencyMax)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func(j *job) {
			defer wg.Done()
			defer func() { <-sem }()
			j.err = cat.ensure(ctx, j.t.tree, j.t.ref)
		}(j)
	}
	wg.Wait()
	var errs []error
	for _, j := range jobs {
		if j.err != nil {
			errs = append(errs, j.err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return v, nil
}

// Generation is the manifest generation the view serves.
func (v *View) Generation() uint64 { return v.Manifest.Generation }
