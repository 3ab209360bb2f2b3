package lsm

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// Concurrent queries over a meta cache too small for two metas: each
// decodes what it needs as the others evict it, and every count is right.
func TestCatalogBoundedConcurrent(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), MetaCacheBytes: 1, NoGCGrace: true, CompactionFanIn: 100})
	if err != nil {
		t.Fatal(err)
	}
	const runs, targets, per = 6, 20, 5
	for r := range runs {
		addTargetLinks(t, db, targets, per, r)
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(db.View().Manifest.RunsOf(TreeLinks)); n != runs {
		t.Fatalf("%d runs, want %d", n, runs)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				tg := link.RecordID{RKey: uint64((g + i) % targets), Collection: 3, DID: 1}
				n, _, err := db.Count(ctx, tg, Filter{})
				if err != nil || n != runs*per {
					errs <- err
					if err == nil {
						t.Errorf("count %d, want %d", n, runs*per)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := db.CatalogStats()
	if st.Evictions == 0 || st.Metas > 1 {
		t.Fatalf("meta cache %+v: want evictions and at most one meta held", st)
	}
}

// catalogTable writes a one-frame table of n links to store and returns
// its ref and meta bytes.
func catalogTable(t *testing.T, store interface {
	Put(context.Context, string, []byte) error
}, n int) (TableRef, []byte) {
	t.Helper()
	var recs []byte
	for i := range n {
		l := link.Backlink{Target: link.RecordID{RKey: uint64(i), Collection: 3, DID: 1}, Source: link.RecordID{RKey: 7, Collection: 5, DID: 2}}
		var b [link.BacklinkSize]byte
		l.Put(b[:])
		recs = append(recs, b[:]...)
	}
	data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := NewID()
	ctx := context.Background()
	if err := store.Put(ctx, dataKey(TreeLinks, id), data); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, metaKey(TreeLinks, id), meta); err != nil {
		t.Fatal(err)
	}
	return TableRef{ID: id, Records: uint64(n), DataBytes: uint64(len(data)), MetaBytes: uint64(len(meta))}, meta
}

// A dropped table (garbage) that a query on an older view loads again
// comes from the store and is not kept: no local file, nothing decoded
// held.
func TestCatalogDropThenLoad(t *testing.T) {
	store := newLocalStore(t)
	dir := t.TempDir()
	cat := NewCatalog(dir, store)
	ref, meta := catalogTable(t, store, 50)
	if _, err := cat.Add(TreeLinks, ref.ID, meta); err != nil {
		t.Fatal(err)
	}
	cat.Drop(TreeLinks, ref.ID)
	m, err := cat.Load(context.Background(), TreeLinks, ref)
	if err != nil || m.Records != 50 {
		t.Fatalf("load of a dropped table: %v, %v", m, err)
	}
	if _, err := os.Stat(cat.localPath(TreeLinks, ref.ID)); !os.IsNotExist(err) {
		t.Fatalf("the dropped table's local meta came back: %v", err)
	}
	if st := cat.Stats(); st.Metas != 0 || st.Bytes != 0 {
		t.Fatalf("the dropped table is held again: %+v", st)
	}
}

// A Drop between an add's write of the local file and its keep (the
// leader's GC dropping a table a flush or fetch is adding) leaves neither
// the file nor the meta behind, in either layout.
func TestCatalogDropDuringAdd(t *testing.T) {
	defer func() { addHook = func(string, bool) {} }()
	for _, mapped := range []bool{false, true} {
		for _, afterWrite := range []bool{false, true} {
			store := newLocalStore(t)
			cat := NewCatalog(t.TempDir(), store)
			if mapped {
				cat = NewCatalogMapped(t.TempDir(), store)
			}
			ref, meta := catalogTable(t, store, 50)
			addHook = func(id string, written bool) {
				if written == afterWrite {
					cat.Drop(TreeLinks, id)
				}
			}
			m, err := cat.Add(TreeLinks, ref.ID, meta)
			addHook = func(string, bool) {}
			if err != nil || m.Records != 50 {
				t.Fatalf("mapped %v, drop after the write %v: add: %v, %v", mapped, afterWrite, m, err)
			}
			if _, err := os.Stat(cat.localPath(TreeLinks, ref.ID)); !os.IsNotExist(err) {
				t.Fatalf("mapped %v, drop after the write %v: the dropped table's local meta stays: %v", mapped, afterWrite, err)
			}
			if st := cat.Stats(); st.Metas != 0 || st.Bytes != 0 {
				t.Fatalf("mapped %v, drop after the write %v: the dropped table is held: %+v", mapped, afterWrite, st)
			}
		}
	}
}

// However used every meta is, the cache ends each addition within its
// budget (but for the one just added).
func TestCatalogEvictionWithinBudget(t *testing.T) {
	store := newLocalStore(t)
	ctx := context.Background()
	var refs []TableRef
	var size int64
	probe := NewCatalog(t.TempDir(), store)
	for range 40 {
		ref, meta := catalogTable(t, store, 30)
		refs = append(refs, ref)
		m, err := probe.Add(TreeLinks, ref.ID, meta)
		if err != nil {
			t.Fatal(err)
		}
		size = max(size, m.memBytes())
	}
	big, bigMeta := catalogTable(t, store, 3000)
	budget := 5 * size
	cat := NewCatalogBounded(t.TempDir(), store, budget)
	for i, ref := range refs {
		if _, err := cat.Load(ctx, TreeLinks, ref); err != nil {
			t.Fatal(err)
		}
		for _, r := range refs[:i+1] { // every meta used again
			if _, err := cat.Load(ctx, TreeLinks, r); err != nil {
				t.Fatal(err)
			}
		}
		if st := cat.Stats(); st.Bytes > budget {
			t.Fatalf("after %d metas: %d bytes held, budget %d", i+1, st.Bytes, budget)
		}
	}
	m, err := cat.Add(TreeLinks, big.ID, bigMeta)
	if err != nil {
		t.Fatal(err)
	}
	if st := cat.Stats(); st.Bytes > max(budget, m.memBytes()) || st.Metas < 1 {
		t.Fatalf("after a big meta: %+v (it is %d bytes)", st, m.memBytes())
	}
}

// DropStale removes the temporary files an earlier process's crash left,
// and never one of this process's (a write in flight).
func TestDropStaleRemovesEarlierTempFiles(t *testing.T) {
	dir := t.TempDir()
	links := filepath.Join(dir, "tables", string(TreeLinks))
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(links, tmpPrefix+"crashed")
	if err := os.WriteFile(old, []byte("half a meta"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewCatalog(dir, nil)
	inFlight := filepath.Join(links, tmpPrefix+tmpOwn+"writing")
	if err := os.WriteFile(inFlight, []byte("a meta being written"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DropStale(func(Tree, string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("an earlier process's temporary file: %v, want removed", err)
	}
	if _, err := os.Stat(inFlight); err != nil {
		t.Fatalf("the catalog's own temporary file: %v, want kept", err)
	}
}

// A bounded catalog (--meta-cache-bytes) whose local write fails (a full
// disk) does not take the table for being on disk: every OpenView of the
// view fails until the meta can be written, instead of the retry serving
// a view without it, whose queries then failed (found by review).
func TestBoundedCatalogFailedWrite(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	db, err := Open(ctx, Options{Store: store, Dir: t.TempDir(), NoGCGrace: true})
	if err != nil {
		t.Fatal(err)
	}
	addTargetLinks(t, db, 5, 3, 0)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m := db.View().Manifest
	dir := t.TempDir()
	cat := NewCatalogBounded(dir, store, 1<<20)
	// The disk refuses the writes: tables/links is a file, not a directory.
	if err := os.MkdirAll(filepath.Join(dir, "tables"), 0o755); err != nil {
		t.Fatal(err)
	}
	blocker := filepath.Join(dir, "tables", "links")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := OpenView(ctx, cat, m); err == nil {
			t.Fatalf("OpenView %d with the meta unwritable: no error", i+1)
		}
	}
	// Once the disk takes writes again, the view opens and answers.
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	v, err := OpenView(ctx, cat, m)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := NewReader(store, nil).Count(ctx, v, link.RecordID{RKey: 1, Collection: 3, DID: 1}, Filter{})
	if err != nil || n != 3 {
		t.Fatalf("count on the view: %d, %v; want 3", n, err)
	}
}
