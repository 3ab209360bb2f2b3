package lsm

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ManifestVersion is the encoding version of a manifest. A reader refuses
// a newer version rather than misread it.
//
//	1: JSON {"v":1,"generation":N,"next_seq":N,"runs":[...]}
const ManifestVersion = 1

// Tree names one LSM tree of the index.
type Tree string

const (
	TreeLinks       Tree = "links"       // backlinks, 64 B
	TreeRevocations Tree = "revocations" // revocations, 32 B
	TreePLCDID      Tree = "plc_did"     // PLC map, did:plc -> genesis seq, 24 B (plcmap.go)
	TreePLCSeq      Tree = "plc_seq"     // PLC map, genesis seq -> did:plc, 24 B (plcmap.go)
	// TreeNames (names.go): hashed field values -> their strings, 64 B.
)

// Trees is every tree of the index, in the order they are listed.
var Trees = []Tree{TreeLinks, TreeRevocations, TreePLCDID, TreePLCSeq, TreeNames}

// FormatOf returns a tree's record format.
func FormatOf(t Tree) (Format, error) {
	switch t {
	case TreeLinks:
		return BacklinkFormat, nil
	case TreeRevocations:
		return RevocationFormat, nil
	case TreePLCDID:
		return PLCDIDFormat, nil
	case TreePLCSeq:
		return PLCSeqFormat, nil
	case TreeNames:
		return NamesFormat, nil
	}
	return Format{}, fmt.Errorf("unknown tree %q", t)
}

// RunKind says how a run was made.
type RunKind uint8

const (
	RunUnknown   RunKind = iota
	RunDelta             // one table, from a flush; any target
	RunCompacted         // one table per shard of the target hash
)

// TableRef names one immutable table: objects tables/<tree>/<id>.data and
// tables/<tree>/<id>.meta.
type TableRef struct {
	ID        string `json:"id"`
	Records   uint64 `json:"records"`
	DataBytes uint64 `json:"data_bytes"`
	MetaBytes uint64 `json:"meta_bytes"`
	ShardBits uint8  `json:"shard_bits,omitempty"`
	Shard     uint32 `json:"shard,omitempty"`
}

// Run is a set of tables made together. Runs of a tree are ordered by Seq
// (newer runs have higher Seq).
type Run struct {
	ID     string     `json:"id"`
	Tree   Tree       `json:"tree"`
	Kind   RunKind    `json:"kind"`
	Seq    uint64     `json:"seq"`
	Tables []TableRef `json:"tables"`
}

// Bytes is the run's data bytes.
func (r *Run) Bytes() uint64 {
	var n uint64
	for _, t := range r.Tables {
		n += t.DataBytes
	}
	return n
}

// Records is the run's record count.
func (r *Run) Records() uint64 {
	var n uint64
	for _, t := range r.Tables {
		n += t.Records
	}
	return n
}

// Manifest is the list of live runs at one generation. It is immutable once
// built: Apply returns a new one.
type Manifest struct {
	Generation uint64 `json:"generation"`
	NextSeq    uint64 `json:"next_seq"`
	Runs       []Run  `json:"runs"`
}

// Errors of manifest edits.
var (
	// ErrConflict: the edit was built on another generation (a deposed
	// leader, or a compaction racing another edit). Nothing was applied.
	ErrConflict = errors.New("manifest generation conflict")
	// ErrBadEdit: the edit is malformed (unknown run, duplicate table).
	ErrBadEdit = errors.New("bad manifest edit")
)

// Edit changes a manifest: it adds runs (a flush, a compaction's output)
// and removes runs (a compaction's inputs). Base is the generation the edit
// was built on; Apply refuses an edit whose Base is not the current
// generation (compare-and-set).
type Edit struct {
	Base   uint64   `json:"base"`
	Add    []Run    `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"` // run IDs
}

// Apply returns the manifest after e, and the tables that e made garbage.
// Added runs get their Seq here, in order. Apply is deterministic: the same
// manifest and edit give the same result on every node.
func (m *Manifest) Apply(e Edit) (*Manifest, []TableRef, error) {
	if e.Base != m.Generation {
		return nil, nil, fmt.Errorf("edit on generation %d, manifest at %d: %w", e.Base, m.Generation, ErrConflict)
	}
	next := &Manifest{Generation: m.Generation + 1, NextSeq: m.NextSeq}
	remove := make(map[string]bool, len(e.Remove))
	for _, id := range e.Remove {
		if remove[id] {
			return nil, nil, fmt.Errorf("run %s removed twice: %w", id, ErrBadEdit)
		}
		remove[id] = true
	}
	var garbage []TableRef
	seen := make(map[string]bool)
	for _, r := range m.Runs {
		if remove[r.ID] {
			garbage = append(garbage, r.Tables...)
			delete(remove, r.ID)
			continue
		}
		next.Runs = append(next.Runs, r)
		seen[r.ID] = true
	}
	if len(remove) > 0 {
		return nil, nil, fmt.Errorf("edit removes %d unknown runs: %w", len(remove), ErrConflict)
	}
	for _, r := range e.Add {
		if r.ID == "" || seen[r.ID] || len(r.Tables) == 0 {
			return nil, nil, fmt.Errorf("run %q: empty, duplicate or without tables: %w", r.ID, ErrBadEdit)
		}
		if _, err := FormatOf(r.Tree); err != nil {
			return nil, nil, fmt.Errorf("run %s: %v: %w", r.ID, err, ErrBadEdit)
		}
		if r.Kind != RunDelta && r.Kind != RunCompacted {
			return nil, nil, fmt.Errorf("run %s: kind %d: %w", r.ID, r.Kind, ErrBadEdit)
		}
		seen[r.ID] = true
		r.Seq = next.NextSeq
		next.NextSeq++
		r.Tables = slices.Clone(r.Tables)
		next.Runs = append(next.Runs, r)
	}
	slices.SortStableFunc(next.Runs, func(a, b Run) int {
		if a.Tree != b.Tree {
			if a.Tree < b.Tree {
				return -1
			}
			return 1
		}
		return int(int64(a.Seq) - int64(b.Seq))
	})
	return next, garbage, nil
}

// RunsOf returns the runs of one tree, oldest first.
func (m *Manifest) RunsOf(t Tree) []Run {
	var out []Run
	for _, r := range m.Runs {
		if r.Tree == t {
			out = append(out, r)
		}
	}
	return out
}

// Only returns the manifest at m's generation with only the runs keep
// takes: what a reader opens a view of when it reads those runs alone,
// so that a table it never reads (its meta lost from the bucket, say)
// cannot stop it.
func (m *Manifest) Only(keep func(Run) bool) *Manifest {
	out := &Manifest{Generation: m.Generation, NextSeq: m.NextSeq}
	for _, r := range m.Runs {
		if keep(r) {
			out.Runs = append(out.Runs, r)
		}
	}
	return out
}

// Tables returns every live table of a tree.
func (m *Manifest) Tables(t Tree) []TableRef {
	var out []TableRef
	for _, r := range m.Runs {
		if r.Tree == t {
			out = append(out, r.Tables...)
		}
	}
	return out
}

type manifestJSON struct {
	V int `json:"v"`
	Manifest
}

// Encode returns the manifest's versioned encoding.
func (m *Manifest) Encode() []byte {
	b, err := json.Marshal(manifestJSON{V: ManifestVersion, Manifest: *m})
	if err != nil {
		panic(fmt.Sprintf("encode manifest: %v", err)) // plain data: cannot fail
	}
	return b
}

// DecodeManifest decodes a manifest written by Encode.
func DecodeManifest(b []byte) (*Manifest, error) {
	var mj manifestJSON
	if err := json.Unmarshal(b, &mj); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if mj.V < 1 || mj.V > ManifestVersion {
		return nil, fmt.Errorf("manifest version %d, this build reads up to %d", mj.V, ManifestVersion)
	}
	m := mj.Manifest
	return &m, nil
}

// NewID returns a random 128-bit identifier in hex, for tables and runs.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// TableKeys returns the object keys of a table's data and meta.
func TableKeys(t Tree, id string) (data, meta string) { return dataKey(t, id), metaKey(t, id) }

// Object keys.
func dataKey(t Tree, id string) string { return "tables/" + string(t) + "/" + id + ".data" }
func metaKey(t Tree, id string) string { return "tables/" + string(t) + "/" + id + ".meta" }
