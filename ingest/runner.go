package ingest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
)

// Runner runs the write path while this node leads: the sources, the flush
// timer and compaction. Start it on gaining leadership and cancel its
// context on losing it.
type Runner struct {
	Config  Config
	Sources []Source
	// CompactionInterval: how often to look for a full tier (0: 5 s).
	CompactionInterval time.Duration
	// ShardTargetBytes for compacted runs (0: lsm default).
	ShardTargetBytes uint64
}

// flushPoll: how often the flush timer checks whether a flush is due.
const flushPoll = 100 * time.Millisecond

// Run runs until ctx is done or the writer fails (leadership lost); it
// returns the reason.
func (r *Runner) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w, err := NewWriter(ctx, r.Config)
	if err != nil {
		return err
	}
	log := w.log
	log.Info("write path started", "sources", len(r.Sources), "clock", r.Config.Node.FSM.Clock())
	// Resyncs a previous leader had not finished.
	for k := range r.Config.Node.FSM.Summary().Cursors {
		if did, ok := strings.CutPrefix(k, ResyncPrefix); ok {
			w.mu.Lock()
			w.mu.resyncs[did]++
			job := resyncJob{did: did, seq: w.mu.resyncs[did]}
			w.mu.Unlock()
			select {
			case w.resync <- job:
			default:
			}
		}
	}
	var wg sync.WaitGroup
	if w.plc != nil {
		wg.Go(func() {
			if err := w.plc.run(ctx); err != nil && ctx.Err() == nil {
				log.Error("plc follower stopped", "error", err)
				cancel(err)
			}
		})
	}
	var backfill *Backfill
	for _, s := range r.Sources {
		if b, ok := s.(*Backfill); ok {
			backfill = b
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A backfill starts only once every live stream has a
				// committed position: a stream that starts "from now" and
				// loses its leader before committing would otherwise skip
				// the events between the two leaders for repositories
				// already backfilled.
				if !w.plcReady(ctx) || !r.waitStreamCursors(ctx, log) {
					return
				}
				// A backfill that fails (the store refusing a checkpoint,
				// the relay down past its retries) starts again from what
				// was published, after a backoff, for as long as this
				// node leads.
				for backoff := time.Duration(0); ; {
					err := b.RunBackfill(ctx, w, r.Config.Node.FSM.Cursor(b.Name()))
					if err == nil || ctx.Err() != nil {
						return
					}
					if errors.Is(err, ErrLeadershipLost) {
						log.Error("backfill stopped", "error", err)
						cancel(err)
						return
					}
					backoff = nextBackoff(backoff)
					log.Error("backfill failed; starting again from the published state", "error", err, "retry_in", backoff)
					if sleepCtx(ctx, backoff) != nil {
						return
					}
				}
			}()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !w.plcReady(ctx) {
				return
			}
			name := s.Name()
			cursor := r.Config.Node.FSM.Cursor(name)
			err := s.Run(ctx, cursor, func(op *event.Op, c string) error {
				if op == nil { // a replay's end
					w.SetCursor(name, c)
					return nil
				}
				return w.Apply(ctx, name, c, op)
			})
			if err != nil && ctx.Err() == nil {
				log.Error("source stopped", "source", name, "error", err)
				if errors.Is(err, ErrLeadershipLost) {
					cancel(err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.compactLoop(ctx, w)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case job := <-w.resync:
				if backfill == nil {
					w.skip("resync", "no_backfill_source")
					continue
				}
				if err := backfill.Resync(ctx, w, job.did); err != nil {
					if ctx.Err() == nil {
						log.Warn("resync failed", "did", job.did, "error", err)
					}
					continue
				}
				w.resyncDone(job)
			}
		}
	}()
	t := time.NewTicker(flushPoll)
	defer t.Stop()
	var result error
loop:
	for {
		select {
		case <-ctx.Done():
			result = context.Cause(ctx)
			break loop
		case <-t.C:
			if !w.Due() {
				continue
			}
			if err := w.Flush(ctx); err != nil {
				result = err
				cancel(err)
				break loop
			}
		}
	}
	wg.Wait()
	if errors.Is(result, context.Canceled) && !errors.Is(result, ErrLeadershipLost) {
		// A clean stop (shutdown, leadership handed away): publish what is
		// buffered so the next leader does not have to replay it.
		fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := w.Flush(fctx); err != nil {
			log.Warn("final flush", "error", err)
		}
		fcancel()
	}
	log.Info("write path stopped", "reason", result)
	return result
}

// compactLoop merges full tiers in the background and hands each result to
// the writer, whose next flush publishes it (one serialised publisher, so
// the compare-and-set never races the flushes).
func (r *Runner) compactLoop(ctx context.Context, w *Writer) {
	every := r.CompactionInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var inFlight map[string]bool // runs of an offered compaction not yet published
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := r.Config.Node.FSM.Manifest()
		if inFlight != nil {
			still := false
			for _, run := range m.Runs {
				if inFlight[run.ID] {
					still = true
				}
			}
			if still {
				continue // the last result is not published yet
			}
			inFlight = nil
		}
		for _, tree := range []lsm.Tree{lsm.TreeLinks, lsm.TreeRevocations, lsm.TreePLCDID, lsm.TreePLCSeq} {
			inputs := lsm.PickCompaction(m, tree, lsm.DefaultCompactionFanIn)
			if inputs == nil {
				continue
			}
			v, err := lsm.OpenView(ctx, r.Config.Catalog, m)
			if err != nil {
				w.log.Warn("compaction: open view", "error", err)
				break
			}
			out, err := lsm.CompactRuns(ctx, r.Config.Store, r.Config.Catalog, v, inputs, r.shardTarget(), lsm.DefaultCompactionBytesPerSec)
			if err != nil {
				w.log.Warn("compaction failed", "tree", tree, "error", err)
				break
			}
			ids := make([]string, len(inputs))
			inFlight = map[string]bool{}
			for i, in := range inputs {
				ids[i] = in.ID
				inFlight[in.ID] = true
			}
			w.OfferCompaction(out, ids)
			w.log.Info("compacted", "tree", tree, "runs", len(inputs), "records", out.Records())
			break // one at a time
		}
	}
}

// waitStreamCursors waits until every live stream source has a committed
// cursor; it returns false if ctx ends first. A stream that starts live
// commits its first position with its first event, so on a network that
// is quiet from the start the backfill waits for that event (said once in
// the log); a busy network commits one within a flush interval.
func (r *Runner) waitStreamCursors(ctx context.Context, log hclog.Logger) bool {
	said := false
	for {
		ready := true
		for _, s := range r.Sources {
			switch s.(type) {
			case *Jetstream, *Firehose:
				if r.Config.Node.FSM.Cursor(s.Name()) == "" {
					ready = false
					if !said {
						said = true
						log.Info("backfill waits for the live stream's first committed position", "source", s.Name())
					}
				}
			}
		}
		if ready {
			return true
		}
		if sleepCtx(ctx, 50*time.Millisecond) != nil {
			return false
		}
	}
}

func (r *Runner) shardTarget() uint64 {
	if r.ShardTargetBytes > 0 {
		return r.ShardTargetBytes
	}
	return lsm.DefaultShardTargetBytes
}
