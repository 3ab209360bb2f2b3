package local_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/objstoretest"
)

var _ objstore.Store = (*local.Store)(nil)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T) *local.Store {
	s, err := local.New(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newStore(t) })
}

func TestConformanceCounting(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return objstore.Counting(newStore(t)) })
}

// Objects are plain files at their key's path, and Put leaves no
// temporary files behind.
func TestLayout(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for _, k := range []string{"a", "b/c/d", "b/e"} {
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, "b/e", []byte("other")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("conflicting Put: %v", err)
	}
	var files []string
	err := filepath.WalkDir(s.Dir(), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(s.Dir(), p)
			files = append(files, filepath.ToSlash(rel))
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if string(b) != filepath.ToSlash(rel) {
				t.Errorf("%s holds %q", rel, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b/c/d", "b/e"}; !slices.Equal(files, want) {
		t.Fatalf("files = %v, want %v", files, want)
	}
}

// Litter from a crashed Put (a dot-named temporary file) is not listed
// and does not block a later Put.
func TestTempFilesIgnored(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if err := s.Put(ctx, "dir/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".123.tmp", "dir/.456.tmp"} {
		if err := os.WriteFile(filepath.Join(s.Dir(), p), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	if err := s.List(ctx, "", func(k string, _ int64) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"dir/k"}) {
		t.Fatalf("List = %v, want [dir/k]", keys)
	}
	if err := s.Put(ctx, "dir/k2", []byte("v2")); err != nil {
		t.Fatal(err)
	}
}

// A store reopened on the same directory sees the objects.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested", "store")
	s1, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Put(ctx, "x/y", []byte("persist")); err != nil {
		t.Fatal(err)
	}
	s2, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s2.Get(ctx, "x/y")
	if err != nil || !bytes.Equal(b, []byte("persist")) {
		t.Fatalf("Get after reopen = %q, %v", b, err)
	}
	if err := s2.Put(ctx, "x/y", []byte("persist")); err != nil {
		t.Fatalf("idempotent Put after reopen: %v", err)
	}
}

func TestNewRejectsFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := local.New(f); err == nil {
		t.Fatal("New on a regular file succeeded")
	}
	if _, err := local.New(""); err == nil {
		t.Fatal("New(\"\") succeeded")
	}
}

// A file where a key's directory should be is an error, every time, until
// it is replaced by nothing; then Put makes the directory and succeeds.
// (The store once remembered such a directory as made and never made it.)
func TestPutHealsAfterAFileInTheWay(t *testing.T) {
	root := t.TempDir()
	s, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(root, "tables"), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Put(ctx, "tables/links/a.data", []byte("x")); err == nil {
			t.Fatalf("put %d with a file in the way: no error", i)
		}
	}
	if err := os.Remove(filepath.Join(root, "tables")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "tables/links/a.data", []byte("x")); err != nil {
		t.Fatalf("put after the file went: %v", err)
	}
	// A directory removed under the store is made again by the next Put.
	if err := os.RemoveAll(filepath.Join(root, "tables")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "tables/links/b.data", []byte("y")); err == nil {
		t.Log("put right after the directory went succeeded") // allowed: nothing cached it as missing
	}
	if err := s.Put(ctx, "tables/links/c.data", []byte("z")); err != nil {
		t.Fatalf("put after the directory went: %v", err)
	}
	b, err := s.Get(ctx, "tables/links/c.data")
	if err != nil || string(b) != "z" {
		t.Fatalf("get: %q %v", b, err)
	}
}
