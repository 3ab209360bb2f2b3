package ingest

import (
	"context"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/link"
)

// makeRoom publishes the memtables when they cannot take one more record
// (its links at most extract.LinksPerRecordMax, as many forward entries,
// plus one revocation): backpressure on the sources instead of unbounded
// memory.
func (w *Writer) makeRoom(ctx context.Context) error {
	_, err := w.makeRoomWith(ctx, true)
	return err
}

// makeRoomInRepo is makeRoom for ApplyRepo, which holds the repository
// gate shared: its flush does not wait for the gate (it would wait for
// itself). It reports whether it flushed.
func (w *Writer) makeRoomInRepo(ctx context.Context) (bool, error) {
	return w.makeRoomWith(ctx, false)
}

// makeRoomWith flushes (gated or not: flush) until the memtables can take
// one more record, and reports whether it flushed. The room is not held:
// a caller that adds a record must check again under the lock it adds
// it in (lockRoom, or fullLocked as ApplyRepo's batches do).
func (w *Writer) makeRoomWith(ctx context.Context, gated bool) (bool, error) {
	flushed, err := w.lockRoom(ctx, gated)
	if err == nil {
		w.mu.Unlock()
	}
	return flushed, err
}

// lockRoom flushes (gated or not: flush) until the memtables can take one
// more record and returns holding w.mu (unless it fails), so that the
// record goes in under the same hold as the check: checked and added
// under two holds, another source (a backfill's batch) could fill the
// room between them, and the record fail half-written with lsm.ErrFull.
// It reports whether it flushed.
func (w *Writer) lockRoom(ctx context.Context, gated bool) (bool, error) {
	flushed := false
	for {
		w.mu.Lock()
		if !w.fullLocked() {
			return flushed, nil
		}
		w.mu.Unlock()
		if err := w.flush(ctx, gated); err != nil {
			return flushed, err
		}
		flushed = true
	}
}

// fullLocked reports whether the memtables cannot take one more record:
// its links and their forward entries, twice the bytes of its links.
func (w *Writer) fullLocked() bool {
	return w.mu.links.Bytes() > w.cfg.MemtableBytes-2*link.BacklinkSize*extract.LinksPerRecordMax || w.mu.revs.Full() ||
		w.names.PendingBytes() > w.cfg.MemtableBytes || // a flood of new record keys (each up to 512 bytes)
		// a flood of new paths and collections (records of made-up
		// fields): the flush publishes them in entries of their own
		// (publishOutlines), a bounded number of them
		w.pending.Bytes() > pendingOutlineBytesMax ||
		len(w.mu.cursors) > cursorsPerFlushMax // a burst of resync markers
}

// pendingOutlineBytesMax bounds the outlines a flush publishes: sixteen
// entries of outlineEntryBytes at most.
const pendingOutlineBytesMax = 16 * outlineEntryBytes

// cursorsPerFlushMax bounds the cursors one flush entry carries (a
// stream's, and a resync marker for each repository a #sync or an
// account's return asked to fetch again: up to ~2.1 KB each with a
// did:web's 2,048 bytes), under a quarter of fsm.EntryBytesMax.
const cursorsPerFlushMax = 512
