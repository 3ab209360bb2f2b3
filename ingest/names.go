package ingest

import (
	"context"
	"errors"
	"fmt"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// The leader's maps in the bucket (the PLC map, the names of named record
// keys) read the manifest this node has applied, through the writer's
// reader; what the writer added since is pending in the maps until the
// flush that publishes it.

// currentView is the view of the maps' trees (names, the PLC map) in the
// manifest the leader has applied (the catalog has the meta of every table
// this leader wrote): the maps read nothing else, and a links table whose
// meta this node cannot get (lost from the bucket, to be dropped) must not
// stop the writer.
func (w *Writer) currentView(ctx context.Context) (*lsm.View, error) {
	w.vmu.Lock()
	defer w.vmu.Unlock()
	m := w.cfg.Node.FSM.Manifest() // under vmu: the view kept only moves forward
	if w.view != nil && w.view.Generation() >= m.Generation {
		return w.view, nil
	}
	maps := m.Only(func(r lsm.Run) bool {
		return r.Tree == lsm.TreeNames || r.Tree == lsm.TreePLCDID || r.Tree == lsm.TreePLCSeq
	})
	v, err := lsm.OpenView(ctx, w.cfg.Catalog, maps)
	if err != nil {
		return nil, fmt.Errorf("open generation %d: %w", m.Generation, err)
	}
	w.view = v
	return v, nil
}

// namesRun writes a sealed batch of names as one delta run.
func namesRun(ctx context.Context, w *Writer, b *lsm.NameBatch) (lsm.Run, error) {
	run, err := lsm.WriteRun(ctx, w.cfg.Store, w.cfg.Catalog, lsm.TreeNames, lsm.RunDelta, 0, b.Records())
	if err != nil {
		return lsm.Run{}, fmt.Errorf("flush %s: %w", lsm.TreeNames, err)
	}
	return run, nil
}

// What the text of hashed targets one record may add to the names tree
// (link.Codec.NameTarget), which never deletes a name: the first
// TargetNamesPerRecordMax hashed targets of a record with forward
// entries, each of at most TargetNameBytesMax bytes (a longer one, and the
// rest, render as their hash in many-to-many answers). Under 17 KiB a
// record, where its links may take 512 targets of 2 KiB.
const (
	TargetNamesPerRecordMax = 16
	TargetNameBytesMax      = 1024
)

// nameTargetsLocked stores the text of the targets of a record with
// forward entries that are written under their hash (bls, the record's
// backlinks; w.mu.linkOf, the link of each), for the answers that meet
// them there (link.Codec.NameTarget): at most TargetNamesPerRecordMax of
// them, of at most TargetNameBytesMax bytes. A failed read of the names
// tree stops the writer (the record is applied again); any other failure
// is counted and the links stay, unnamed.
func (w *Writer) nameTargetsLocked(source string, op *event.Op, links []extract.Link, bls []link.Backlink) error {
	named := 0
	for j := range bls {
		t := &links[w.mu.linkOf[j]].Target
		if !bls[j].Target.IsHashed() || named == TargetNamesPerRecordMax || len(t.Norm) > TargetNameBytesMax {
			continue
		}
		named++
		err := w.codec.NameTarget(t, bls[j].Target)
		if errors.Is(err, link.ErrLookup) {
			return w.failLookup(err)
		}
		if err != nil {
			w.skipOp(source, "target_unnamed", op, err)
		}
	}
	return nil
}

// ErrWriterFailed: a read the writer needs to encode an operation failed
// (the PLC map or the names tree in the bucket: link.ErrLookup). The
// operation is not skipped: the writer stops, and the write path starts
// again from the committed state, which applies it again.
var ErrWriterFailed = errors.New("ingest: the write path failed")

// failLookup stops the writer on err, a link.ErrLookup (every later call
// is refused as ErrLeadershipLost).
func (w *Writer) failLookup(err error) error {
	w.dead.Store(true)
	return fmt.Errorf("%w: %w", ErrWriterFailed, err)
}
