package ingest

import (
	"context"
	"errors"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
)

// ApplyRepo writes a whole repository at one stamp: a repository-wide
// revocation, then the links of every record. Nil ops (a repository that
// is gone) writes the revocation alone.
func (w *Writer) ApplyRepo(ctx context.Context, source, did string, stamp uint64, ops []event.Op) error {
	if ops == nil {
		_, err := w.applyRepo(ctx, source, did, stamp, 0, nil, nil)
		return err
	}
	_, err := w.applyRepo(ctx, source, did, stamp, len(ops), func(yield func(*event.Op) error) error {
		for i := range ops {
			if err := yield(&ops[i]); err != nil {
				return err
			}
		}
		return nil
	}, make([]event.Op, 0, repoBatch))
	return err
}

// ApplyRepoCAR is ApplyRepo over a repository CAR, its records decoded a
// batch at a time as they are written (buf, returned for reuse: the
// batch), so that what a repository holds while it is written is its CAR
// and its index, not every record decoded. The CAR must have been checked
// first by a walk without records (its DID, the blocks it lacks): what
// that walk accepts this one writes whole. records is the count that walk
// gave.
func (w *Writer) ApplyRepoCAR(ctx context.Context, source, did string, stamp uint64, car *event.CAR, records int, buf []event.Op) ([]event.Op, error) {
	return w.applyRepo(ctx, source, did, stamp, records, func(yield func(*event.Op) error) error {
		_, err := car.Walk(true, yield)
		return err
	}, buf)
}

// repoBatch is the records written under one hold of the writer's lock
// (live sources wait at most one batch).
const repoBatch = 256

// applyRepo writes the revocation, then the records each yields (nil: the
// repository is gone), in batches of repoBatch gathered in buf.
func (w *Writer) applyRepo(ctx context.Context, source, did string, stamp uint64, records int, each func(yield func(*event.Op) error) error, buf []event.Op) ([]event.Op, error) {
	if w.dead.Load() {
		return buf, ErrLeadershipLost
	}
	// Room for the revocation, checked under the lock it goes in with; a
	// flush it needs first is gated (it waits for the repositories being
	// written: nothing of this one is yet).
	for {
		w.repos.RLock() // no scheduled flush between its revocation and its last record
		w.mu.Lock()
		if !w.fullLocked() {
			break
		}
		w.mu.Unlock()
		w.repos.RUnlock()
		if err := w.makeRoom(ctx); err != nil {
			return buf, err
		}
	}
	defer w.repos.RUnlock()
	w.repoWrites.Add(1)
	defer w.repoWrites.Add(-1)
	d, err := w.codec.DID(did, true)
	if errors.Is(err, link.ErrLookup) {
		w.mu.Unlock()
		return buf, w.failLookup(err) // not the DID's fault: the repository is written again, never skipped
	}
	if err != nil {
		w.mu.Unlock()
		w.skip(source, "bad_did", "did", did, "error", err)
		return buf, nil
	}
	v := link.Revocation{Source: link.RepoID(d), Rev: stamp}
	err = w.mu.revs.AddRevocation(&v)
	w.mu.Unlock()
	w.log.Debug("repository written", "source", source, "did", did, "stamp", stamp, "records", records, "gone", each == nil)
	if err != nil {
		return buf, err
	}
	if each != nil {
		if buf, err = w.repoRecords(ctx, source, did, stamp, records, each, buf[:0]); err != nil {
			return buf, err
		}
	}
	w.metrics.Events.WithLabelValues(source, "repo").Inc()
	return buf, nil
}

// repoRecords writes the records each yields, a batch at a time, each
// record checked for room as makeRoom does; it returns the batch's buffer.
func (w *Writer) repoRecords(ctx context.Context, source, did string, stamp uint64, records int, each func(yield func(*event.Op) error) error, batch []event.Op) ([]event.Op, error) {
	warned := false
	write := func() error {
		for i := 0; i < len(batch); {
			flushed, err := w.makeRoomInRepo(ctx)
			if err != nil {
				return err
			}
			if flushed && !warned {
				warned = true
				// The memtables filled while it was written: split across two
				// flushes, it and the others being written (flush counts them).
				w.log.Warn("the memtables filled while repositories were written: they are written across two flushes, and answers between them miss their links", "source", source, "did", did, "records", records)
			}
			w.mu.Lock()
			for ; i < len(batch) && !w.fullLocked(); i++ {
				if err := w.recordLocked(source, &batch[i], stamp); err != nil {
					w.mu.Unlock()
					return err
				}
			}
			w.mu.Unlock()
		}
		clear(batch) // the records' decoded data goes with the batch
		batch = batch[:0]
		return nil
	}
	err := each(func(op *event.Op) error {
		batch = append(batch, *op)
		if len(batch) < repoBatch {
			return nil
		}
		return write()
	})
	if err == nil {
		err = write()
	}
	clear(batch[:cap(batch)])
	return batch[:0], err
}
