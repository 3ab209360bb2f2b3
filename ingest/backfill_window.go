package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
)

// backfillPagesOpen bounds the listRepos pages whose repositories may be
// in flight at once: the listing goes on past a page whose slowest
// repositories (a large CAR, a slow or rate-limited PDS) are still being
// fetched, so the fetches in flight stay at the backfill's concurrency
// instead of draining to that page's last repository; the cursor
// published is still that of the last page written with every page
// before it, so a new leader redoes at most this many pages.
const backfillPagesOpen = 4

// pageWindow is the pages of a pass whose repositories are in flight,
// oldest first.
type pageWindow struct {
	mu      sync.Mutex
	open    []*windowPage
	next    int   // the next page's number
	err     error // the first repository's error: the pass stops
	changed chan struct{}
}

// windowPage is one listRepos page in flight.
type windowPage struct {
	seq    int
	cursor string // the listRepos cursor after it
	left   int    // its repositories not yet written
	sealed bool   // every repository of it is started
}

func newPageWindow() *pageWindow { return &pageWindow{changed: make(chan struct{}, 1)} }

func (pw *pageWindow) signal() {
	select {
	case pw.changed <- struct{}{}:
	default:
	}
}

// add opens the next page, whose repositories end at cursor.
func (pw *pageWindow) add(cursor string) *windowPage {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	p := &windowPage{seq: pw.next, cursor: cursor}
	pw.next++
	pw.open = append(pw.open, p)
	return p
}

// start counts one more repository of p in flight.
func (pw *pageWindow) start(p *windowPage) {
	pw.mu.Lock()
	p.left++
	pw.mu.Unlock()
}

// done counts one repository of p written (err nil) or failed for a reason
// that stops the pass.
func (pw *pageWindow) done(p *windowPage, err error) {
	pw.mu.Lock()
	p.left--
	if err != nil && pw.err == nil {
		pw.err = err
	}
	pw.mu.Unlock()
	pw.signal()
}

// seal says every repository of p is started.
func (pw *pageWindow) seal(p *windowPage) {
	pw.mu.Lock()
	p.sealed = true
	pw.mu.Unlock()
	pw.signal()
}

// closed takes the leading pages that are written whole and returns the
// last one's number and cursor (ok false: none). Once a repository failed
// the pass, none is: the failed one's page counts as done, but it was not
// written.
func (pw *pageWindow) closed() (seq int, cursor string, ok bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.err != nil {
		return 0, "", false
	}
	for len(pw.open) > 0 && pw.open[0].sealed && pw.open[0].left == 0 {
		seq, cursor, ok = pw.open[0].seq, pw.open[0].cursor, true
		pw.open = pw.open[1:]
	}
	return seq, cursor, ok
}

// wait returns once fewer than n pages are open from the first unfinished
// one on (n 1: every page is finished), or a repository failed the pass
// (its error), or ctx ends.
func (pw *pageWindow) wait(ctx context.Context, n int) error {
	for {
		pw.mu.Lock()
		unfinished := len(pw.open)
		for _, p := range pw.open {
			if !p.sealed || p.left > 0 {
				break
			}
			unfinished--
		}
		err := pw.err
		pw.mu.Unlock()
		if err != nil {
			return err
		}
		if unfinished < n {
			return nil
		}
		select {
		case <-pw.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// failure is the first repository's error that stops the pass.
func (pw *pageWindow) failure() error {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.err
}

// pass enumerates and backfills every repository from cursor, up to
// backfillPagesOpen pages in flight at once, and records with the writer
// the cursor of each page written with every page before it. It returns
// nil once every page is done. It starts from the published checkpoint,
// or, fresh (a restarted crawl), from an empty state.
func (b *Backfill) pass(ctx context.Context, w *Writer, cursor string, fresh bool) error {
	key := w.cfg.Node.FSM.Cursor(b.Name() + StateCursorSuffix)
	if fresh {
		key = ""
	}
	st, err := loadBackfillState(ctx, w.cfg.Store, b.Name(), key)
	if errors.Is(err, objstore.ErrNotFound) {
		// Lost (it should never be): go on from the page cursor with a
		// fresh state; the failed repositories it listed wait for their
		// accounts' next event (a resync).
		if b.Log != nil {
			b.Log.Error("backfill checkpoint missing: going on from the page cursor with an empty state", "key", key, "error", err)
		}
		st, err = newBackfillState(b.Name()), nil
	}
	if err != nil {
		return err
	}
	b.state.Store(st)
	if Done(cursor) {
		return b.retryFailed(ctx, w, cursor)
	}
	recrawl := b.recrawl(w)
	conc := b.Concurrency
	if conc <= 0 {
		conc = DefaultBackfillConcurrency
	}
	sem := make(chan struct{}, conc)
	pw := newPageWindow()
	var wg sync.WaitGroup
	defer wg.Wait() // every repository in flight ends before the pass returns
	open := b.pagesOpen
	if open <= 0 {
		open = backfillPagesOpen
	}
	seen := map[string]struct{}{} // the pass's page cursors (~40k at the network's size)
	for {
		if err := pw.wait(ctx, open); err != nil {
			return err
		}
		if seq, c, ok := pw.closed(); ok {
			if err := st.checkpoint(ctx, w.cfg.Store, w, b.Name(), c, seq); err != nil {
				return err
			}
		}
		page, err := b.listRepos(ctx, cursor)
		if err != nil {
			return err
		}
		b.stats.add(func(s *BackfillStats) { s.Listed += len(page.Repos) })
		st.mu.Lock()
		st.cp.Listed += len(page.Repos)
		st.mu.Unlock()
		p := pw.add(page.Cursor)
		for _, r := range page.Repos {
			fetch := b.repo
			if r.Active != nil && !*r.Active && event.AccountGone(r.Status) {
				// Gone (deactivated, taken down, ...): nothing to fetch;
				// account events revoke. An account the relay marks
				// inactive for its own reasons (desynchronized,
				// throttled) is still there: fetched. A crawl after a
				// restart revokes the account's repository, as its
				// account event did (the index may hold its links from
				// before; its PDS may still serve it, taken down by the
				// relay alone).
				st.mu.Lock()
				st.cp.Inactive++
				st.mu.Unlock()
				if !recrawl {
					continue
				}
				fetch = b.revokeRepo
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := pw.failure(); err != nil {
				<-sem
				return err
			}
			if link.ValidDID(r.DID) { // else repo counts it skipped
				st.join(r.DID, p.seq)
			}
			pw.start(p)
			wg.Go(func() {
				defer func() { <-sem }()
				pw.done(p, fetch(ctx, w, r.DID, false))
			})
		}
		pw.seal(p)
		// Only a page without a cursor ends the listing: a relay may
		// answer an empty page with one (a page whose accounts it left
		// out), and the pages after it still hold repositories.
		if page.Cursor == "" {
			if err := pw.wait(ctx, 1); err != nil {
				return err
			}
			return b.retryFailed(ctx, w, EOFCursor(cursor))
		}
		// A cursor that comes back would list the same pages for ever:
		// the pass fails (logged, and tried again from the published
		// cursor after a backoff) instead.
		if _, again := seen[page.Cursor]; again || page.Cursor == cursor {
			return fmt.Errorf("listRepos: the relay answered cursor %q again after %q: its listing loops", page.Cursor, cursor)
		}
		seen[page.Cursor] = struct{}{}
		cursor = page.Cursor
	}
}

// listRepos fetches the relay's page of repositories after cursor, with
// retries.
func (b *Backfill) listRepos(ctx context.Context, cursor string) (listReposOut, error) {
	u := strings.TrimRight(b.Relay, "/") + "/xrpc/com.atproto.sync.listRepos?limit=" + fmt.Sprint(listReposPage)
	if cursor != "" {
		u += "&cursor=" + url.QueryEscape(cursor)
	}
	var page listReposOut
	var err error
	for try := 0; ; try++ {
		if err = b.getJSON(ctx, u, listReposBytesMax, &page); err == nil || try == backfillTries || ctx.Err() != nil {
			break
		}
		wait := time.Duration(try+1) * time.Second
		if he := (*httpError)(nil); errors.As(err, &he) && he.retryAfter > wait {
			wait = he.retryAfter // a relay that rate-limits says when
		}
		sleepCtx(ctx, wait)
	}
	if err != nil {
		return page, fmt.Errorf("listRepos: %w", err)
	}
	return page, nil
}
