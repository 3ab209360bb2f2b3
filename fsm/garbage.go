package fsm

import (
	"slices"

	"github.com/eddy-backlinks/eddy/lsm"
)

// The replicated list of garbage tables. A table that leaves the manifest
// (a compaction replaced it) enters the list in the same flush entry, with
// the generation that removed it and the time its leader proposed that
// entry; it leaves the list only through a TypeCollect entry, which the
// leader proposes after it deleted the table's objects. So the list
// survives leader changes and snapshots, and whichever node leads next
// finishes the deletions of its predecessors (ingest/gc.go decides when a
// table may go: every member serves a generation at or past Generation,
// and the grace period has passed, on the deleting leader's own clock,
// since it first saw the entry).

// Garbage is one table that left the manifest and waits for deletion.
type Garbage struct {
	Tree      lsm.Tree `json:"tree"`
	ID        string   `json:"id"`
	DataBytes uint64   `json:"data_bytes"`
	MetaBytes uint64   `json:"meta_bytes"`
	// Generation is the manifest generation whose flush removed the table:
	// a node serving this generation or a later one never reads it.
	Generation uint64 `json:"generation"`
	// Since is the proposing leader's clock (unix nanoseconds, Flush.Time)
	// when the table left; 0 when the flush did not say (an older build).
	// The grace does not count from it (another node's clock:
	// ingest/gc.go).
	Since int64 `json:"since,omitempty"`
}

// TableKey names one table of a tree.
type TableKey struct {
	Tree lsm.Tree `json:"tree"`
	ID   string   `json:"id"`
}

// Collect records that the leader deleted these garbage tables' objects:
// Apply removes them from the list (a table not in it is ignored, so a
// retried or repeated Collect is harmless).
type Collect struct {
	Tables []TableKey `json:"tables"`
}

// CollectBatchMax bounds the tables of one Collect entry (an entry stays
// far below EntryBytesMax).
const CollectBatchMax = 1000

// removedTables returns the tables of m's runs that e removes, as garbage
// of generation gen left at since; the order is the manifest's, so every
// node computes the same list.
func removedTables(m *lsm.Manifest, e lsm.Edit, gen uint64, since int64) []Garbage {
	if len(e.Remove) == 0 {
		return nil
	}
	var out []Garbage
	for _, r := range m.Runs {
		if !slices.Contains(e.Remove, r.ID) {
			continue
		}
		for _, t := range r.Tables {
			out = append(out, Garbage{Tree: r.Tree, ID: t.ID, DataBytes: t.DataBytes, MetaBytes: t.MetaBytes, Generation: gen, Since: since})
		}
	}
	return out
}

// applyCollectLocked drops the collected tables from the garbage list and
// returns how many it dropped.
func (s *State) applyCollectLocked(c *Collect) int {
	if len(c.Tables) == 0 || len(s.mu.garbage) == 0 {
		return 0
	}
	done := make(map[TableKey]bool, len(c.Tables))
	for _, k := range c.Tables {
		done[k] = true
	}
	before := len(s.mu.garbage)
	s.mu.garbage = slices.DeleteFunc(slices.Clone(s.mu.garbage), func(g Garbage) bool {
		return done[TableKey{Tree: g.Tree, ID: g.ID}]
	})
	return before - len(s.mu.garbage)
}

// Garbage returns the tables waiting for deletion, oldest first (a copy).
func (s *State) Garbage() []Garbage {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.mu.garbage)
}

// GarbageStats is the size of the garbage list.
type GarbageStats struct {
	Tables int    `json:"tables"`
	Bytes  uint64 `json:"bytes"` // data and meta
}

// GarbageStats returns the size of the garbage list.
func (s *State) GarbageStats() GarbageStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := GarbageStats{Tables: len(s.mu.garbage)}
	for _, g := range s.mu.garbage {
		st.Bytes += g.DataBytes + g.MetaBytes
	}
	return st
}
