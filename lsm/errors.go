package lsm

import (
	"errors"
	"fmt"

	"github.com/eddy-backlinks/eddy/objstore"
)

// ErrCorrupt is the error class of corrupt tables: a meta or a frame that
// fails its checksum or any structural check. Errors wrap it; the read path
// (queries, OpenView and Catalog.Load, compaction) returns it inside a
// *CorruptError that names the table.
var ErrCorrupt = errors.New("lsm: corrupt table")

// ErrVersion reports a meta written by a newer format version than this
// binary reads: not corruption, an upgrade is needed.
var ErrVersion = errors.New("lsm: table format version not supported")

// CorruptError is corruption the read path found in one table: a frame or
// a meta that fails its checksum or a structural check, or a data object
// whose size is not the one its meta gives. A caller can count corruption
// by tree and log the table. errors.Is(err, ErrCorrupt) holds for it.
type CorruptError struct {
	Tree  Tree
	Table string // the table's ID
	Err   error  // the cause, which wraps ErrCorrupt
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("lsm: %s table %s: %v", e.Tree, e.Table, e.Err)
}

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports that a CorruptError is ErrCorrupt, whatever its cause says.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// MissingError is a table object (its meta or its data) that the store
// does not have, named: errors.Is(err, objstore.ErrNotFound) holds for it.
// A merge's read returns it, so that the run holding the table is the one
// held, not every input of the merge.
type MissingError struct {
	Tree  Tree
	Table string // the table's ID
	Err   error  // the store's error, which wraps objstore.ErrNotFound
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("lsm: %s table %s missing from the store: %v", e.Tree, e.Table, e.Err)
}

// Unwrap returns the store's error.
func (e *MissingError) Unwrap() error { return e.Err }

// missing names the table of a store error that says its object is not
// found; other errors are returned as they are.
func missing(t Tree, id string, err error) error {
	if errors.Is(err, objstore.ErrNotFound) {
		return &MissingError{Tree: t, Table: id, Err: err}
	}
	return err
}

// DamagedTable returns the table a read error names as corrupt or
// missing from the store, if it names one.
func DamagedTable(err error) (string, bool) {
	var ce *CorruptError
	if errors.As(err, &ce) && ce.Table != "" {
		return ce.Table, true
	}
	var me *MissingError
	if errors.As(err, &me) && me.Table != "" {
		return me.Table, true
	}
	return "", false
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("lsm: meta: "+format+": %w", append(args, ErrCorrupt)...)
}
