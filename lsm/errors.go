package lsm

import (
	"errors"
	"fmt"
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

func corruptf(format string, args ...any) error {
	return fmt.Errorf("lsm: meta: "+format+": %w", append(args, ErrCorrupt)...)
}
