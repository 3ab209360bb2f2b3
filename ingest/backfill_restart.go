package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/link"
)

// Crawling the network again: an operator's request (eddy-ctl backfill
// restart) that each backfill source list and fetch every repository once
// more, from the first page, with a new checkpoint. A repository is
// written whole at one stamp with a revocation of everything its account
// linked before (ApplyRepo), so a second crawl rewrites the index as the
// network is now without doubling it: what brings back links an older
// release did not extract from records it had already written, or that a
// lost table held, and what drops links of records the index missed the
// deletion of. The live sources go on meanwhile.
//
// The request is a replicated setting (backfillRestartKey + the source's
// name, its value the time it was asked), so whichever node leads carries
// it out: the backfill takes it up when it starts, or during a pass
// (which it stops: watchRestart), or, done, while it waits
// (Runner.runSource). It then starts again from the first page with an
// empty state, and the writer publishes, in its next flush, the page
// cursor and the checkpoint's key deleted and the request carried out
// (backfillRestartedKey + the name, a cursor); a leader lost before that
// flush leaves the request to the next one, which starts it again (the
// mark that this process took a request up is one Ingest's: a write path
// started again takes an unpublished request up again). The end of the
// crawl a restart began asks for a full compaction again
// (compactAfterBackfill: the setting that records the ask names the
// restart), and that merge drops the links the crawl revoked.
const (
	backfillRestartKey   = "backfill_restart:"
	backfillRestartedKey = "backfill_restarted:"
)

// RequestBackfillRestart asks (on the leader: the settings are proposed
// through Raft) that each named backfill crawl again, and returns the
// request.
func RequestBackfillRestart(ctx context.Context, node *cluster.Node, names []string) (string, error) {
	req := strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, name := range names {
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: backfillRestartKey + name, Value: req}); err != nil {
			return "", fmt.Errorf("restart %s: %w", name, err)
		}
	}
	return req, nil
}

// AdminBackfillRestart is the admin API's BackfillRestart hook of a node
// (cluster.Admin): it asks every backfill source among sources (but those
// with resync_only, which crawl nothing) to crawl again.
func AdminBackfillRestart(node *cluster.Node, sources []Source) func(context.Context) (map[string]any, error) {
	return func(ctx context.Context) (map[string]any, error) {
		var names []string
		for _, s := range sources {
			if b, ok := s.(*Backfill); ok && !b.ResyncOnly {
				names = append(names, b.Name())
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%w: the leader has no backfill source (one without resync_only)", cluster.ErrNothingToDo)
		}
		req, err := RequestBackfillRestart(ctx, node, names)
		if err != nil {
			return nil, err
		}
		return map[string]any{"sources": names, "request": req, "leader": node.ID()}, nil
	}
}

// restartAsked returns the restart request of b that is not carried out
// yet ("" if none): neither published as carried out nor taken up by this
// process (whose mark waits for the next flush).
func (b *Backfill) restartAsked(w *Writer) string {
	name := b.Name()
	req := w.cfg.Node.FSM.Setting(backfillRestartKey + name)
	if req == "" || req == w.cfg.Node.FSM.Cursor(backfillRestartedKey+name) {
		return ""
	}
	if took, _ := b.restarted.Load().(string); took == req {
		return ""
	}
	return req
}

// restartPoll is how often a running pass, or a done backfill, looks for
// a restart request.
const restartPoll = time.Second

// errRestartAsked ends a pass for a restart asked while it ran.
var errRestartAsked = errors.New("backfill restart asked")

// watchRestart returns the context of one pass, cancelled (errRestartAsked)
// when a restart is asked while it runs, and asked, which ends the watch
// and says whether it cancelled the pass; call it once the pass returned.
// Before, the pass went on to the listing's end, for days at the
// network's size, and the crawl then fetched the same repositories again.
// The cancel stops the pass's listing and fetches; its writes run under
// ctx, the term's (writeCtx).
func (b *Backfill) watchRestart(ctx context.Context, w *Writer) (context.Context, func() bool) {
	pctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(restartPoll)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			if b.restartAsked(w) != "" {
				cancel(errRestartAsked)
				return
			}
		}
	}()
	return context.WithValue(pctx, termCtxKey{}, ctx), func() bool {
		cancel(nil) // a no-op if the watch cancelled first
		return errors.Is(context.Cause(pctx), errRestartAsked)
	}
}

// termCtxKey holds, in a pass's context, the term's context.
type termCtxKey struct{}

// writeCtx is the context a backfill's writes run under: ctx's term's in a
// pass that a restart may stop. A write the restart cancelled midway (a
// flush that makeRoom started, whose upload it cut) would stop the writer
// and every source with it; a repository fetched is written whole.
func writeCtx(ctx context.Context) context.Context {
	if t, ok := ctx.Value(termCtxKey{}).(context.Context); ok {
		return t
	}
	return ctx
}

// restartUnpublished says whether this process took up a restart whose
// mark no flush has published yet: the published cursor and checkpoint
// are then the old crawl's.
func (b *Backfill) restartUnpublished(w *Writer) bool {
	took, _ := b.restarted.Load().(string)
	return took != "" && took != w.cfg.Node.FSM.Cursor(backfillRestartedKey+b.Name())
}

// restart takes up request req: the crawl starts again from the first
// page with an empty state, and the writer's next flush deletes the page
// cursor and the checkpoint's key and marks req carried out.
func (b *Backfill) restart(w *Writer, req string) {
	name := b.Name()
	w.mu.Lock()
	w.mu.cursors[name] = ""
	w.mu.cursors[name+StateCursorSuffix] = ""
	w.mu.cursors[backfillRestartedKey+name] = req
	w.mu.Unlock()
	b.restarted.Store(req)
	w.log.Warn("backfill restarted: crawling every repository again from the first page", "source", name, "request", req)
}

// restartOf returns the restart request that began b's crawl (taken up
// by this process, or carried out by a predecessor), "" for the first
// crawl.
func (b *Backfill) restartOf(w *Writer) string {
	if took, _ := b.restarted.Load().(string); took != "" {
		return took
	}
	return w.cfg.Node.FSM.Cursor(backfillRestartedKey + b.Name())
}

// recrawl says whether b's crawl is one a restart began: the index may
// hold links of repositories from an earlier crawl.
func (b *Backfill) recrawl(w *Writer) bool { return b.restartOf(w) != "" }

// revokeRepo revokes the repository of did (an account the relay lists
// as gone, met by a crawl after a restart) without fetching it, as its
// account event does: every link it wrote before goes.
func (b *Backfill) revokeRepo(ctx context.Context, w *Writer, did string, _ bool) error {
	if !link.ValidDID(did) {
		b.skip("bad_did", did, nil)
		return nil
	}
	stamp, err := w.ReserveStamp(writeCtx(ctx))
	if err != nil {
		return err
	}
	if err := b.writeGone(ctx, w, did, stamp); err != nil {
		return err
	}
	b.crawled()
	return nil
}

// waitRestart waits, after b's crawl is done, until a restart is asked
// (true) or ctx ends (false).
func (b *Backfill) waitRestart(ctx context.Context, w *Writer) bool {
	tick := time.NewTicker(restartPoll)
	defer tick.Stop()
	for b.restartAsked(w) == "" {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
