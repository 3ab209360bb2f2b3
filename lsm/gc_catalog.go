package lsm

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DropStale removes the local meta files of tables that keep does not name
// and that this catalog has neither added, loaded nor found on disk since
// it was made:
// what an earlier process on this data directory left behind (tables
// deleted as garbage while the node was down, a killed leader's uploads
// that were never published). A table dropped by mistake costs one GET
// when a view needs it again (Load fetches it). It also removes the
// temporary files of writes an earlier process did not finish (a crash
// between writeFileAtomic's create and rename): those not named as this
// process's, never one of its own writes in flight. It returns how many
// meta files it removed.
func (c *Catalog) DropStale(keep func(t Tree, id string) bool) (int, error) {
	removed := 0
	for _, t := range Trees {
		dir := filepath.Join(c.dir, "tables", string(t))
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tmpPrefix) && !e.IsDir() {
				if err := removeOldTemp(filepath.Join(dir, e.Name())); err != nil {
					return removed, err
				}
				continue
			}
			id, ok := strings.CutSuffix(e.Name(), ".meta")
			if !ok || e.IsDir() || strings.HasPrefix(id, ".") || keep(t, id) {
				continue
			}
			// The check and the removal in one hold of the lock: an add
			// marks its table on disk under it before writing the file.
			c.mu.Lock()
			if c.mu.onDisk[id] || c.mu.metas[id] != nil {
				c.mu.Unlock()
				continue
			}
			err := os.Remove(filepath.Join(dir, e.Name()))
			c.mu.Unlock()
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, err
			}
			removed++
		}
	}
	return removed, nil
}

// removeOldTemp removes the temporary file at path unless this process
// made it.
func removeOldTemp(path string) error {
	if strings.HasPrefix(filepath.Base(path), tmpPrefix+tmpOwn) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// LocalTable names a table whose meta file is on local disk.
type LocalTable struct {
	Tree Tree
	ID   string
}

// LocalTables lists the tables whose meta files are on local disk.
func (c *Catalog) LocalTables() ([]LocalTable, error) {
	var out []LocalTable
	for _, t := range Trees {
		entries, err := os.ReadDir(filepath.Join(c.dir, "tables", string(t)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e.Name(), ".meta"); ok && !e.IsDir() && !strings.HasPrefix(id, ".") {
				out = append(out, LocalTable{Tree: t, ID: id})
			}
		}
	}
	return out, nil
}

// Forget removes what the catalog holds of a table, its decoded meta and
// its local file, as Drop does but leaving no mark: a table forgotten
// that a view needs after all is fetched and kept again. A leader's
// uploads that its term ended before publishing go so (nothing else
// removes them while the process runs: DropStale leaves what this process
// added).
func (c *Catalog) Forget(t Tree, id string) {
	c.mu.Lock()
	c.forgetLocked(id)
	c.mu.Unlock()
	// A table being added again meanwhile may lose its file here: its next
	// Load fetches it again.
	_ = os.Remove(c.localPath(t, id))
}

// forgetLocked drops what the catalog holds of table id in memory: its
// decoded meta (and its place on the clock) and its on-disk mark.
func (c *Catalog) forgetLocked(id string) {
	if e := c.mu.metas[id]; e != nil {
		delete(c.mu.metas, id)
		c.mu.bytes -= e.size
		if i := slices.Index(c.mu.ring, id); i >= 0 {
			last := len(c.mu.ring) - 1
			c.mu.ring[i] = c.mu.ring[last]
			c.mu.ring = c.mu.ring[:last]
		}
	}
	delete(c.mu.onDisk, id)
}
