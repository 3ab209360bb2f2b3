// Package local implements objstore.Store in a directory of the local file
// system. Key "a/b/c" is the file a/b/c under the root directory.
//
// Put is crash safe: it writes a temporary file in the object's directory,
// fsyncs it, hard-links it to the final name (which, unlike rename, never
// replaces an existing object, so immutability holds even under concurrent
// Puts), removes the temporary name and fsyncs the directory. Directories
// that Put creates are fsynced into their parents. Temporary files are named
// ".*.tmp"; keys cannot contain such names, and List skips them, so a crash
// can only leave harmless litter.
package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/eddy-backlinks/eddy/objstore/internal/rules"
)

// Store is a local-directory object store. The zero value is not usable;
// make one with New. Its methods are safe for concurrent use by one
// process; two processes must not write the same directory.
type Store struct {
	root string

	// synced holds the directories (relative to root, slash-separated)
	// known to be durably linked into their parents.
	synced sync.Map
}

// New returns a Store keeping its objects in dir, which is created (with
// its parents) if missing.
func New(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("local: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	fi, err := os.Stat(abs)
	switch {
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("local: %s is not a directory", abs)
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
		if err := syncDir(filepath.Dir(abs)); err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("local: %w", err)
	}
	return &Store{root: abs}, nil
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.root }

// String describes the store for logs.
func (s *Store) String() string { return "file://" + filepath.ToSlash(s.root) }

func (s *Store) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

// notExist reports whether err means that a path does not exist, including
// the case where one of its parents is a file.
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func notFound(op, key string) error {
	return fmt.Errorf("local: %s %q: %w", op, key, rules.ErrNotFound)
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := rules.ValidateKey(key); err != nil {
		return fmt.Errorf("local: put: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	final := s.path(key)
	dir := filepath.Dir(final)
	if err := s.mkdirs(key); err != nil {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	tmp, err := writeTemp(dir, data)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.forgetDirs(key) // a directory went away under the store: make it again next time
		}
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	defer os.Remove(tmp) // after a successful link this only drops the temporary name
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	err = os.Link(tmp, final)
	if err != nil && !errors.Is(err, fs.ErrExist) && linkUnsupported(err) {
		err = renameNoReplace(tmp, final)
	}
	if errors.Is(err, fs.ErrExist) {
		if err := sameContent(final, key, data); err != nil {
			return err
		}
		// The object may have just been linked by a concurrent Put that
		// has not synced the directory yet.
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("local: put %q: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	return nil
}

// sameContent handles a Put to an existing key: nil if the file at path
// holds data, else an error wrapping ErrExists.
func sameContent(path, key string, data []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("local: put %q: %w", key, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("local: put %q: the key is a directory of other keys: %w", key, rules.ErrExists)
	}
	if fi.Size() != int64(len(data)) {
		return fmt.Errorf("local: put %q: existing object has %d bytes, not %d: %w", key, fi.Size(), len(data), rules.ErrExists)
	}
	old := make([]byte, len(data))
	if _, err := io.ReadFull(f, old); err != nil {
		return fmt.Errorf("local: put %q: reading existing object: %w", key, err)
	}
	if !bytes.Equal(old, data) {
		return fmt.Errorf("local: put %q: %w", key, rules.ErrExists)
	}
	return nil
}

// writeTemp writes data to a new temporary file in dir, fsyncs and closes
// it, and returns its path.
func writeTemp(dir string, data []byte) (path string, err error) {
	f, err := os.CreateTemp(dir, ".*.tmp")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o644); err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// linkUnsupported reports whether a link failed because the file system
// has no hard links.
func linkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) ||
		errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EMLINK)
}

// renameNoReplace is the fallback for file systems without hard links. The
// check and the rename are not one atomic step, so two concurrent Puts of
// different data to one new key may both succeed there.
func renameNoReplace(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return fs.ErrExist
	} else if !notExist(err) {
		return err
	}
	return os.Rename(from, to)
}

// mkdirs creates the directories of key under the root, each durably
// linked into its parent before Put links a file into it.
func (s *Store) mkdirs(key string) error {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return nil
	}
	rel := key[:i]
	if _, ok := s.synced.Load(rel); ok {
		return nil
	}
	parent := s.root
	for j := 0; j <= len(rel); j++ {
		if j < len(rel) && rel[j] != '/' {
			continue
		}
		sub := rel[:j]
		dir := filepath.Join(s.root, filepath.FromSlash(sub))
		if _, ok := s.synced.Load(sub); !ok {
			if err := os.Mkdir(dir, 0o755); err != nil {
				if !errors.Is(err, fs.ErrExist) {
					return err
				}
				// Something is there: it must be a directory (a file in
				// its place is an error now, and again until it goes).
				if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
					return fmt.Errorf("%s exists and is not a directory", dir)
				}
			}
			// Sync the parent even if the directory already existed: a
			// concurrent Put may have made it and not synced it yet.
			if err := syncDir(parent); err != nil {
				return err
			}
			s.synced.Store(sub, struct{}{})
		}
		parent = dir
	}
	return nil
}

// forgetDirs drops key's directories from the synced set, so the next
// Put of a key under them creates (and syncs) them again.
func (s *Store) forgetDirs(key string) {
	for rel := key; ; {
		i := strings.LastIndexByte(rel, '/')
		if i < 0 {
			return
		}
		rel = rel[:i]
		s.synced.Delete(rel)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// openObject opens the object file of key; a missing file, or a directory,
// is ErrNotFound.
func (s *Store) openObject(op, key string) (*os.File, int64, error) {
	f, err := os.Open(s.path(key))
	if notExist(err) {
		return nil, 0, notFound(op, key)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, notFound(op, key)
	}
	return f, fi.Size(), nil
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := rules.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("local: get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: get %q: %w", key, err)
	}
	f, size, err := s.openObject("get", key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, size)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, fmt.Errorf("local: get %q: %w", key, err)
	}
	return buf, nil
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := rules.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("local: get range: %w", err)
	}
	if err := rules.CheckRangeArgs(key, off, n); err != nil {
		return nil, fmt.Errorf("local: get range: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: get range %q: %w", key, err)
	}
	f, size, err := s.openObject("get range", key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := rules.CheckRange(key, off, n, size); err != nil {
		return nil, fmt.Errorf("local: get range: %w", err)
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil && !(err == io.EOF && off+n == size) {
		return nil, fmt.Errorf("local: get range %q: %w", key, err)
	}
	return buf, nil
}

// Size implements objstore.Store.
func (s *Store) Size(ctx context.Context, key string) (int64, error) {
	if err := rules.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("local: size: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("local: size %q: %w", key, err)
	}
	fi, err := os.Stat(s.path(key))
	if notExist(err) {
		return 0, notFound("size", key)
	}
	if err != nil {
		return 0, fmt.Errorf("local: size %q: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return 0, notFound("size", key)
	}
	return fi.Size(), nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := rules.ValidateKey(key); err != nil {
		return fmt.Errorf("local: delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: delete %q: %w", key, err)
	}
	path := s.path(key)
	fi, err := os.Lstat(path)
	if notExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("local: delete %q: %w", key, err)
	}
	if fi.IsDir() {
		// Not an object: only the directory of other keys.
		return nil
	}
	if err := os.Remove(path); err != nil && !notExist(err) {
		return fmt.Errorf("local: delete %q: %w", key, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("local: delete %q: %w", key, err)
	}
	return nil
}

// List implements objstore.Store. It walks only the directories that can
// hold keys with the prefix, and streams keys in order without collecting
// them: within a directory, entries are visited in the order of their names
// with a '/' appended to directory names, which is the order of the keys
// below them.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	if err := rules.ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("local: list: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: list %q: %w", prefix, err)
	}
	// Start in the deepest directory that the prefix names entirely.
	start := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i+1]
	}
	return s.walk(ctx, start, prefix, fn)
}

// walk lists the keys under the directory rel ("" for the root, else
// ending in '/') that start with prefix.
func (s *Store) walk(ctx context.Context, rel, prefix string, fn func(string, int64) error) error {
	entries, err := os.ReadDir(filepath.Join(s.root, filepath.FromSlash(rel)))
	if notExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("local: list %q: %w", prefix, err)
	}
	type entry struct {
		name string // key or directory prefix, '/'-terminated for a directory
		de   fs.DirEntry
	}
	sorted := make([]entry, 0, len(entries))
	for _, de := range entries {
		if strings.HasPrefix(de.Name(), ".") {
			continue // temporary file, never a key
		}
		name := rel + de.Name()
		if de.IsDir() {
			name += "/"
		}
		sorted = append(sorted, entry{name, de})
	}
	slices.SortFunc(sorted, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	for _, e := range sorted {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("local: list %q: %w", prefix, err)
		}
		if e.de.IsDir() {
			// Descend if keys below can have the prefix.
			if strings.HasPrefix(e.name, prefix) || strings.HasPrefix(prefix, e.name) {
				if err := s.walk(ctx, e.name, prefix, fn); err != nil {
					return err
				}
			}
			continue
		}
		if !e.de.Type().IsRegular() || !strings.HasPrefix(e.name, prefix) {
			continue
		}
		fi, err := e.de.Info()
		if notExist(err) {
			continue // deleted since ReadDir
		}
		if err != nil {
			return fmt.Errorf("local: list %q: %w", prefix, err)
		}
		if err := fn(e.name, fi.Size()); err != nil {
			return err
		}
	}
	return nil
}
