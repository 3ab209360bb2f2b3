package lsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/eddy-backlinks/eddy/objstore"
)

// Catalog holds table metadata: decoded in memory, as files on local disk
// (dir/tables/<tree>/<id>.meta), and fetched from the object store the first
// time a node sees a table. Safe for concurrent use.
type Catalog struct {
	dir   string
	store objstore.Store

	mu struct {
		sync.Mutex
		metas map[string]*TableMeta // by table ID
	}
}

// NewCatalog returns a catalog keeping meta files under dir.
func NewCatalog(dir string, store objstore.Store) *Catalog {
	c := &Catalog{dir: dir, store: store}
	c.mu.metas = make(map[string]*TableMeta)
	return c
}

func (c *Catalog) localPath(t Tree, id string) string {
	return filepath.Join(c.dir, "tables", string(t), id+".meta")
}

// Add records the meta of a table this node just wrote (or fetched); a
// meta that does not decode is a *CorruptError.
func (c *Catalog) Add(t Tree, id string, meta []byte) (*TableMeta, error) {
	m, err := DecodeMeta(meta)
	if errors.Is(err, ErrCorrupt) {
		return nil, &CorruptError{Tree: t, Table: id, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", id, err)
	}
	if err := writeFileAtomic(c.localPath(t, id), meta); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.mu.metas[id] = m
	c.mu.Unlock()
	return m, nil
}

// Load returns a table's meta: from memory, else local disk, else the
// object store (and then keeps a local copy). A local copy that fails its
// checksum is discarded and fetched again; a fetched meta that fails is a
// *CorruptError.
func (c *Catalog) Load(ctx context.Context, t Tree, ref TableRef) (*TableMeta, error) {
	c.mu.Lock()
	m := c.mu.metas[ref.ID]
	c.mu.Unlock()
	if m != nil {
		return m, nil
	}
	path := c.localPath(t, ref.ID)
	if b, err := os.ReadFile(path); err == nil {
		if m, err := DecodeMeta(b); err == nil {
			c.mu.Lock()
			c.mu.metas[ref.ID] = m
			c.mu.Unlock()
			return m, nil
		}
		_ = os.Remove(path) // corrupt local copy: refetch
	}
	b, err := c.store.Get(ctx, metaKey(t, ref.ID))
	if err != nil {
		return nil, fmt.Errorf("fetch meta of table %s: %w", ref.ID, err)
	}
	if len(b) > MaxMetaBytes || (ref.MetaBytes != 0 && uint64(len(b)) != ref.MetaBytes) {
		return nil, &CorruptError{Tree: t, Table: ref.ID, Err: fmt.Errorf("meta of %d bytes, manifest says %d: %w", len(b), ref.MetaBytes, ErrCorrupt)}
	}
	return c.Add(t, ref.ID, b)
}

// Drop forgets a table (it became garbage) and removes its local meta.
func (c *Catalog) Drop(t Tree, id string) {
	c.mu.Lock()
	delete(c.mu.metas, id)
	c.mu.Unlock()
	_ = os.Remove(c.localPath(t, id))
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
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

// viewTable is one table of a view with its meta.
type viewTable struct {
	tree Tree
	ref  TableRef
	meta *TableMeta
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

// OpenView loads the meta of every table of m (fetching missing ones from
// the store, concurrently), so that a node exposes a manifest to queries
// only once it can serve all of it.
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
			vt := &viewTable{tree: r.Tree, ref: ref}
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
			j.t.meta, j.err = cat.Load(ctx, j.t.tree, j.t.ref)
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
