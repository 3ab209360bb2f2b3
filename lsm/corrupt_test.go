package lsm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// corruptFixture is a DB over a local directory store holding one delta
// run per tree: links to target, and a revocation of one of its sources.
type corruptFixture struct {
	db       *DB
	storeDir string
	target   link.RecordID
}

func newCorruptFixture(t *testing.T, fanIn int) *corruptFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	store, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, Options{Store: store, Dir: t.TempDir(), NoGCGrace: true, CompactionFanIn: fanIn})
	if err != nil {
		t.Fatal(err)
	}
	f := &corruptFixture{db: db, storeDir: dir, target: link.RecordID{RKey: 7, Collection: link.CollectionFirst, DID: 3}}
	for i := range 2000 {
		src := link.RecordID{RKey: uint64(100 + i), Collection: link.CollectionFirst, DID: uint64(1 + i%50)}
		l := link.Backlink{Target: f.target, Source: src, Location: 1, SourceRev: 10}
		if err := db.AddBacklink(&l); err != nil {
			t.Fatal(err)
		}
	}
	v := link.Revocation{Source: link.RecordID{RKey: 100, Collection: link.CollectionFirst, DID: 1}, Rev: 20}
	if err := db.AddRevocation(&v); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// table returns the ID of the only table of tree's first run.
func (f *corruptFixture) table(t *testing.T, tree Tree) string {
	t.Helper()
	runs := f.db.View().Manifest.RunsOf(tree)
	if len(runs) == 0 || len(runs[0].Tables) != 1 {
		t.Fatalf("%s: runs %v", tree, runs)
	}
	return runs[0].Tables[0].ID
}

// secondRun flushes a second links run, which fills the tier (fan-in 2):
// the next Compact merges both.
func (f *corruptFixture) secondRun(t *testing.T) {
	t.Helper()
	l := link.Backlink{Target: f.target, Source: link.RecordID{RKey: 1, Collection: link.CollectionFirst, DID: 1}, Location: 1, SourceRev: 30}
	if err := f.db.AddBacklink(&l); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// flip flips a byte of an object of the store and returns a function
// that restores it.
func (f *corruptFixture) flip(t *testing.T, key string, at func(n int) int) (restore func()) {
	t.Helper()
	path := filepath.Join(f.storeDir, key)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte(nil), orig...)
	b[at(len(b))] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkCorruptError demands that err is a *CorruptError of table id of
// tree that is ErrCorrupt and names both.
func checkCorruptError(t *testing.T, err error, tree Tree, id string) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("error is not a *CorruptError: %v", err)
	}
	if ce.Tree != tree || ce.Table != id {
		t.Fatalf("CorruptError of %s table %s, want %s table %s: %v", ce.Tree, ce.Table, tree, id, err)
	}
	if !errors.Is(err, ErrCorrupt) || !errors.Is(ce, ErrCorrupt) || !errors.Is(ce.Unwrap(), ErrCorrupt) {
		t.Fatalf("not ErrCorrupt: %v", err)
	}
	if msg := ce.Error(); !strings.Contains(msg, string(tree)) || !strings.Contains(msg, id) {
		t.Fatalf("%q names neither tree %s nor table %s", msg, tree, id)
	}
}

// A query that reads a corrupt frame fails with a *CorruptError naming the
// tree and the table: round one (the links tree) and round two (the
// revocations tree), through every entry point.
func TestQueryCorruptError(t *testing.T) {
	ctx := context.Background()
	f := newCorruptFixture(t, 0)
	db := f.db
	mid := func(n int) int { return n / 2 }
	for _, tree := range []Tree{TreeLinks, TreeRevocations} {
		id := f.table(t, tree)
		restore := f.flip(t, dataKey(tree, id), mid)
		db.reader.cache = NewFrameCache(0)
		_, err := db.Backlinks(ctx, Query{Target: f.target})
		checkCorruptError(t, err, tree, id)
		db.reader.cache = NewFrameCache(0)
		_, _, err = db.Count(ctx, f.target, Filter{})
		checkCorruptError(t, err, tree, id)
		db.reader.cache = NewFrameCache(0)
		_, _, err = db.Reader().All(ctx, db.View(), f.target, Filter{})
		checkCorruptError(t, err, tree, id)
		restore()
	}
	db.reader.cache = NewFrameCache(0)
	if n, _, err := db.Count(ctx, f.target, Filter{}); err != nil || n != 1999 {
		t.Fatalf("restored: count %d, %v", n, err)
	}
}

// A node opening a view whose table meta it fetches corrupt fails with a
// *CorruptError naming the table; so does a node whose manifest gives
// another meta size than the store holds.
func TestOpenViewCorruptMeta(t *testing.T) {
	ctx := context.Background()
	f := newCorruptFixture(t, 0)
	m := f.db.View().Manifest
	for _, tree := range []Tree{TreeLinks, TreeRevocations} {
		id := f.table(t, tree)
		restore := f.flip(t, metaKey(tree, id), func(n int) int { return n - 20 })
		// A fresh node has no local copy: it fetches the meta.
		_, err := OpenView(ctx, NewCatalog(t.TempDir(), f.db.store), m)
		checkCorruptError(t, err, tree, id)
		restore()
	}
	id := f.table(t, TreeLinks)
	path := filepath.Join(f.storeDir, metaKey(TreeLinks, id))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = OpenView(ctx, NewCatalog(t.TempDir(), f.db.store), m)
	checkCorruptError(t, err, TreeLinks, id)
}

// A compaction that reads a corrupt frame, or a data object of another
// size than its meta gives, fails with a *CorruptError naming the table.
func TestCompactCorruptError(t *testing.T) {
	ctx := context.Background()
	for _, damage := range []string{"flip", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			f := newCorruptFixture(t, 2)
			id := f.table(t, TreeLinks)
			path := filepath.Join(f.storeDir, dataKey(TreeLinks, id))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if damage == "flip" {
				b[len(b)/2] ^= 0x40
			} else {
				b = b[:len(b)-1]
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			f.secondRun(t)
			_, err = f.db.Compact(ctx)
			checkCorruptError(t, err, TreeLinks, id)
		})
	}
}

// A compaction that meets a table's data object missing from the store,
// and a fresh catalog that meets its meta missing, fail with a
// *MissingError naming the table (what lets the write path hold the run
// holding it alone); errors.Is(err, objstore.ErrNotFound) still holds.
func TestCompactMissingTable(t *testing.T) {
	ctx := context.Background()
	f := newCorruptFixture(t, 2)
	id := f.table(t, TreeLinks)
	if err := os.Remove(filepath.Join(f.storeDir, dataKey(TreeLinks, id))); err != nil {
		t.Fatal(err)
	}
	f.secondRun(t)
	check := func(what string, err error) {
		t.Helper()
		var me *MissingError
		if !errors.As(err, &me) || me.Tree != TreeLinks || me.Table != id || !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s: %v, want a MissingError of links table %s", what, err, id)
		}
		if got, ok := DamagedTable(err); !ok || got != id {
			t.Fatalf("%s: DamagedTable %q %v", what, got, ok)
		}
	}
	_, err := f.db.Compact(ctx)
	check("the merge", err)

	if err := os.Remove(filepath.Join(f.storeDir, metaKey(TreeLinks, id))); err != nil {
		t.Fatal(err)
	}
	_, err = OpenView(ctx, NewCatalog(t.TempDir(), f.db.store), f.db.View().Manifest)
	check("a fresh catalog", err)
	if _, ok := DamagedTable(errors.New("get: connection refused")); ok {
		t.Fatal("an error of no table names one")
	}
}

// A local copy of a table's meta that fails its checks (a damaged disk) is
// discarded and fetched again, and counted and told (OnDamaged), in both
// layouts; a copy of the other layout (a node whose --meta-cache-bytes
// changed) is converted, not counted.
func TestCatalogDamagedLocalCopy(t *testing.T) {
	ctx := context.Background()
	f := newCorruptFixture(t, 2)
	id := f.table(t, TreeLinks)
	var ref TableRef
	for _, r := range f.db.View().Manifest.Tables(TreeLinks) {
		if r.ID == id {
			ref = r
		}
	}
	catalogs := map[string]func(dir string) *Catalog{
		"mapped":  func(dir string) *Catalog { return NewCatalogMapped(dir, f.db.store) },
		"decoded": func(dir string) *Catalog { return NewCatalogBounded(dir, f.db.store, 1<<20) },
	}
	for name, open := range catalogs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := open(dir).Load(ctx, TreeLinks, ref); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "tables", string(TreeLinks), id+".meta")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x10
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			c := open(dir)
			var told []string
			c.OnDamaged = func(tr Tree, tid string, err error) { told = append(told, string(tr)+"/"+tid) }
			m, err := c.Load(ctx, TreeLinks, ref)
			if err != nil || m == nil {
				t.Fatalf("load after the damage: %v", err)
			}
			if got := c.Stats().LocalDamaged; got != 1 || len(told) != 1 || told[0] != "links/"+id {
				t.Fatalf("damaged local copies counted %d, told %v; want 1 and [links/%s]", got, told, id)
			}
			// The copy fetched again is sound: a third catalog takes it as it is.
			c3 := open(dir)
			if _, err := c3.Load(ctx, TreeLinks, ref); err != nil || c3.Stats().LocalDamaged != 0 {
				t.Fatalf("the refetched copy: %v, %d damaged", err, c3.Stats().LocalDamaged)
			}
		})
	}
	// A mapped catalog's file read by a decoded one: a conversion.
	dir := t.TempDir()
	if _, err := NewCatalogMapped(dir, f.db.store).Load(ctx, TreeLinks, ref); err != nil {
		t.Fatal(err)
	}
	c := NewCatalogBounded(dir, f.db.store, 1<<20)
	if _, err := c.Load(ctx, TreeLinks, ref); err != nil || c.Stats().LocalDamaged != 0 {
		t.Fatalf("the other layout's copy: %v, counted %d damaged (want 0)", err, c.Stats().LocalDamaged)
	}
}

// A data object cut short in the store, its frames past its end: a query
// that reads them fails with a *CorruptError naming the tree and the table
// (it was a plain range error, a 500 nobody counted as corrupt).
func TestQueryTruncatedDataObject(t *testing.T) {
	ctx := context.Background()
	f := newCorruptFixture(t, 0)
	db := f.db
	for _, tree := range []Tree{TreeLinks, TreeRevocations} {
		id := f.table(t, tree)
		path := filepath.Join(f.storeDir, dataKey(tree, id))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		db.reader.cache = NewFrameCache(0)
		_, err = db.Backlinks(ctx, Query{Target: f.target})
		checkCorruptError(t, err, tree, id)
		db.reader.cache = NewFrameCache(0)
		_, _, err = db.Count(ctx, f.target, Filter{})
		checkCorruptError(t, err, tree, id)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
