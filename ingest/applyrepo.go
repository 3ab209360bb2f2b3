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
	if w.dead.Load() {
		return ErrLeadershipLost
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
			return err
		}
	}
	defer w.repos.RUnlock()
	w.repoWrites.Add(1)
	defer w.repoWrites.Add(-1)
	d, err := w.codec.DID(did, true)
	if errors.Is(err, link.ErrLookup) {
		w.mu.Unlock()
		return w.failLookup(err) // not the DID's fault: the repository is written again, never skipped
	}
	if err != nil {
		w.mu.Unlock()
		w.skip(source, "bad_did", "did", did, "error", err)
		return nil
	}
	v := link.Revocation{Source: link.RepoID(d), Rev: stamp}
	err = w.mu.revs.AddRevocation(&v)
	w.mu.Unlock()
	w.log.Debug("repository written", "source", source, "did", did, "stamp", stamp, "records", len(ops), "gone", ops == nil)
	if err != nil {
		return err
	}
	// Records go in batches under one hold of the lock (live sources wait
	// at most one batch), each record checked for room as makeRoom does.
	const batch = 256
	warned := false
	for i := 0; i < len(ops); {
		flushed, err := w.makeRoomInRepo(ctx)
		if err != nil {
			return err
		}
		if flushed && !warned {
			warned = true
			// The memtables filled while it was written: split across two
			// flushes, it and the others being written (flush counts them).
			w.log.Warn("the memtables filled while repositories were written: they are written across two flushes, and answers between them miss their links", "source", source, "did", did, "records", len(ops))
		}
		w.mu.Lock()
		for end := min(i+batch, len(ops)); i < end && !w.fullLocked(); i++ {
			if err := w.recordLocked(source, &ops[i], stamp); err != nil {
				w.mu.Unlock()
				return err
			}
		}
		w.mu.Unlock()
	}
	w.metrics.Events.WithLabelValues(source, "repo").Inc()
	return nil
}
