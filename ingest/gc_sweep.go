package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
)

// sweep lists the bucket's table objects and deletes those no manifest
// and no garbage entry references, once they were seen unreferenced for a
// grace period, no upload in flight on this leader may have written them,
// and every member serves the generation applied when they were first seen
// (so a node on an older view never reads one). See gc.go.
func (c *collector) sweep(ctx context.Context) error {
	listed := map[fsm.TableKey]*orphan{}
	err := c.w.cfg.Store.List(ctx, "tables/", func(key string, size int64) error {
		k, err := parseTableKey(key)
		if errors.Is(err, errNotTable) {
			return nil // not ours to judge: never deleted
		}
		o := listed[k]
		if o == nil {
			o = &orphan{}
			listed[k] = o
		}
		o.keys = append(o.keys, key)
		o.size += size
		return nil
	})
	if err != nil {
		return err
	}
	// After the listing: a table published before this read is referenced
	// here; one published after it is still an upload of this leader (in
	// flight) or is found referenced by the next sweep. The uploads in
	// flight are read before the manifest: an upload ends only once its
	// tables are in the applied manifest (or will never be), so one that
	// ended after this read is seen in flight, and one that ended before
	// it left its tables referenced in the manifest read next. Read the
	// other way round, an upload published between the two reads would
	// look neither in flight nor referenced, and its tables be deleted.
	inflight := c.w.uploads.oldest()
	m := c.w.cfg.Node.FSM.Manifest()
	ref := referenced(m, c.w.cfg.Node.FSM.Garbage())
	if c.afterManifest != nil {
		c.afterManifest()
	}
	now := time.Now()
	var due []fsm.TableKey
	for k, o := range listed {
		if ref[k] {
			continue
		}
		prev := c.orphans[k]
		if prev == nil {
			o.seen, o.gen = now, m.Generation
			c.orphans[k] = o
			continue
		}
		prev.keys, prev.size = o.keys, o.size
		if now.Sub(prev.seen) >= c.grace {
			due = append(due, k)
		}
	}
	for k := range c.orphans {
		if listed[k] == nil || ref[k] {
			delete(c.orphans, k) // deleted, or published after all
		}
	}
	c.w.metrics.GCOrphans.Set(float64(len(c.orphans)))
	if len(due) == 0 {
		return nil
	}
	// An orphan may be a table the newest backup in the bucket names, if
	// that backup is another history's (backup.go, deleteNewer): the
	// newest must be this leader's before any goes.
	if err := c.ensureBackup(ctx, 0); err != nil {
		return fmt.Errorf("orphans wait for a state backup: %w", err)
	}
	return c.deleteOrphans(ctx, due, inflight)
}

// referenced is the set of tables the manifest or the garbage list names.
func referenced(m *lsm.Manifest, garbage []fsm.Garbage) map[fsm.TableKey]bool {
	ref := map[fsm.TableKey]bool{}
	for _, r := range m.Runs {
		for _, t := range r.Tables {
			ref[fsm.TableKey{Tree: r.Tree, ID: t.ID}] = true
		}
	}
	for _, g := range garbage {
		ref[fsm.TableKey{Tree: g.Tree, ID: g.ID}] = true
	}
	return ref
}

// deleteOrphans deletes the due orphans that no upload in flight when
// the sweep read the manifest (inflight: the oldest one's start) may have
// written and that every member has moved past.
func (c *collector) deleteOrphans(ctx context.Context, due []fsm.TableKey, inflight time.Time) error {
	oldest, _, down := c.served(ctx)
	deleted, bytes := 0, int64(0)
	for _, k := range due {
		o := c.orphans[k]
		if !inflight.IsZero() && !o.seen.Before(inflight) {
			continue // first seen during an upload of this leader: may be one of its tables
		}
		if o.gen > oldest {
			continue // held back like replaced tables (collect says why)
		}
		for _, key := range o.keys {
			if err := c.w.cfg.Store.Delete(ctx, key); err != nil {
				return err
			}
		}
		c.w.cfg.Catalog.Drop(k.Tree, k.ID)
		delete(c.orphans, k)
		deleted++
		bytes += o.size
		c.log.Info("deleted an unreferenced table", "tree", k.Tree, "table", k.ID, "bytes", o.size, "unreferenced_for", time.Since(o.seen).Round(time.Second))
	}
	if deleted > 0 {
		c.w.metrics.GCDeleted.WithLabelValues("orphan").Add(float64(deleted))
		c.w.metrics.GCDeletedBytes.WithLabelValues("orphan").Add(float64(bytes))
	} else if len(down) > 0 {
		c.log.Debug("orphan deletion held back", "unreachable", down)
	}
	c.w.metrics.GCOrphans.Set(float64(len(c.orphans)))
	return nil
}
