package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/hashicorp/go-hclog"
)

// Backfill limits.
const (
	// DefaultBackfillConcurrency: repositories fetched at once.
	DefaultBackfillConcurrency = 16
	// DefaultBackfillPerHost: repositories fetched at once from one PDS, so
	// a backfill never floods a small PDS.
	DefaultBackfillPerHost = 4
	// backfillTries: attempts per repository before it is counted failed.
	backfillTries = 3
	// listReposPage: repositories per listRepos page.
	listReposPage = 1000
	// repoBytesMax bounds one repository CAR fetched.
	repoBytesMax = event.MaxCARBytes
	// listReposBytesMax bounds one listRepos page (1,000 repositories).
	listReposBytesMax = 64 << 20
	// didDocBytesMax bounds a DID document.
	didDocBytesMax = 1 << 20
	// backfillHTTPTimeout bounds one request.
	backfillHTTPTimeout = 5 * time.Minute
)

// Backfill enumerates every repository a relay knows (listRepos, paged),
// resolves each DID's PDS, fetches the repository CAR and writes one
// repository-wide revocation and all the repository's links at one stamp,
// reserved before the fetch: live events for the repository, stamped later,
// are never lost or overridden. Its cursor is the listRepos cursor of the
// last page whose repositories are all written, with every page's before
// it; a new leader redoes at most the pages in flight (idempotent).
type Backfill struct {
	Relay string // relay base URL (http(s)://host)
	PLC   string // PLC directory base URL, for did:plc documents
	// DIDWeb, if set, serves did:web documents at DIDWeb/<did> instead of
	// each domain's /.well-known/did.json (private networks, tests).
	DIDWeb      string
	Concurrency int
	PerHost     int
	// Memory bounds the memory the repositories in flight hold, bytes
	// (backfill_memory.go; <= 0: DefaultBackfillMemory).
	Memory int64
	// PerHostRate, if positive, bounds the repository fetches started per
	// second on one PDS host (on top of PerHost at once); 0: no bound.
	PerHostRate float64
	// ResyncOnly: the backfill crawls nothing; it only fetches again the
	// repositories the write path asks for (Resync: reactivated accounts,
	// #sync events), beside a source that brings the history itself (a
	// Jetstream v2 archive, which holds no records of an account that was
	// inactive when its server crawled the network).
	ResyncOnly bool
	// NoCompaction: the end of the backfill asks for no full compaction
	// (compactAfterBackfill).
	NoCompaction bool
	// Private says whether the hosts DID documents name (PDSes, did:web
	// domains) may be private addresses (loopback, private networks, link
	// local): nil decides by the relay, PLC directory and DIDWeb
	// configured (allowed when one of them is on such an address: a test
	// or a private network), else only public ones, so that a DID
	// document cannot point the leader at its own network.
	Private *bool
	HTTP    *http.Client
	Log     hclog.Logger
	OnSkip  func(reason string)
	// OnCrawled, if set, is called for each repository the crawl wrote or
	// revoked (a resync's are not counted).
	OnCrawled func()

	// pagesOpen: backfillPagesOpen unless set (a benchmark's comparison).
	pagesOpen int

	hostMu   sync.Mutex
	hosts    map[string]chan struct{}
	hostNext map[string]time.Time // PerHostRate: when the next fetch may start
	stats    BackfillStats
	// state is the per-repository state (backfillstate.go), loaded from
	// the published checkpoint when the backfill starts.
	state atomic.Pointer[backfillState]
	// restarted is the restart request this process took up last
	// (backfill_restart.go), a string.
	restarted atomic.Value

	setupOnce  sync.Once
	httpClient *http.Client   // when HTTP is nil
	remoteHTTP *http.Client   // for hosts a DID document names: public addresses only, unless privateAllowed
	bufs       chan *repoBufs // free list (a sync.Pool is emptied by every GC)
	memory     *repoMemory    // the repositories in flight share it (Memory)
}

// setState records a repository's state, once the state is loaded.
func (b *Backfill) setState(did, state, rev string, err error) {
	if s := b.state.Load(); s != nil {
		s.set(did, state, rev, err)
	}
}

// BackfillStats counts a backfill's progress.
type BackfillStats struct {
	mu                         sync.Mutex
	Listed, Done, Failed, Gone int
}

// Snapshot returns the counters.
func (s *BackfillStats) Snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]int{"listed": s.Listed, "done": s.Done, "failed": s.Failed, "gone": s.Gone}
}

func (s *BackfillStats) add(f func(*BackfillStats)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

// Stats returns the backfill's counters.
func (b *Backfill) Stats() *BackfillStats { return &b.stats }

func (b *Backfill) Name() string { return "backfill:" + b.Relay }

// setup makes the buffers' free list and, unless b.HTTP is set, the
// client: one whose connection pool keeps as many idle connections per
// host as requests in flight (the default transport keeps 2, so a
// backfill would dial a new connection for most requests).
func (b *Backfill) setup() {
	b.setupOnce.Do(func() {
		conc := b.Concurrency
		if conc <= 0 {
			conc = DefaultBackfillConcurrency
		}
		b.bufs = make(chan *repoBufs, conc)
		mem := b.Memory
		if mem <= 0 {
			mem = DefaultBackfillMemory
		}
		b.memory = newRepoMemory(mem)
		if b.HTTP == nil {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.MaxIdleConnsPerHost = conc
			t.MaxIdleConns = max(t.MaxIdleConns, 4*conc)
			b.httpClient = &http.Client{Timeout: backfillHTTPTimeout, Transport: t}
			if b.Private == nil && b.privateAllowed() && b.Log != nil {
				// The default follows the relay's and directory's
				// addresses: say so, since it opens the private network
				// to whatever host a DID document names.
				b.Log.Warn("the relay, PLC directory or did:web host is on a private address, so the backfill also fetches from PDSes and did:web hosts on private addresses; add &private=false to the source to refuse them")
			}
			// The hosts DID documents name answer uncompressed: a gzip
			// body a thousand times smaller than what it decodes to
			// would cost a stranger's host nothing and the leader up to
			// the CAR bound (repoBytesMax) of memory.
			rt := t.Clone()
			rt.DisableCompression = true
			if !b.privateAllowed() {
				rt.DialContext = publicDialer().DialContext
				rt.Proxy = nil // a proxy would dial for us
			}
			b.remoteHTTP = &http.Client{Timeout: backfillHTTPTimeout, Transport: rt}
		}
	})
}

func (b *Backfill) client() *http.Client {
	if b.HTTP != nil {
		return b.HTTP
	}
	b.setup()
	return b.httpClient
}

// repoBufs are the buffers of one repository being backfilled, reused
// for the next: its CAR and a batch of its decoded operations.
type repoBufs struct {
	car []byte
	ops []event.Op
}

// Buffers kept for reuse: a CAR buffer up to carBufKeep bytes (a larger
// one is left to the garbage collector) and operations up to opsKeep.
const (
	carBufKeep = 4 << 20
	opsKeep    = 1 << 14
)

// getBufs takes buffers from the free list (as many as repositories in
// flight) or makes new ones.
func (b *Backfill) getBufs() *repoBufs {
	b.setup()
	select {
	case rb := <-b.bufs:
		return rb
	default:
		return &repoBufs{car: make([]byte, 0, 256<<10)}
	}
}

// putBufs returns buffers to the free list, without the records they
// point to.
func (b *Backfill) putBufs(rb *repoBufs) {
	if cap(rb.car) > carBufKeep {
		rb.car = nil
	}
	if cap(rb.ops) > opsKeep {
		rb.ops = nil
	}
	clear(rb.ops[:cap(rb.ops)])
	rb.car, rb.ops = rb.car[:0], rb.ops[:0]
	select {
	case b.bufs <- rb:
	default:
	}
}

// readBody reads r to its end into buf (reused), failing beyond max bytes.
// The buffer doubles as the bytes arrive, never past a known size
// (Content-Length) and one byte: a size is a claim, and a server that
// announces a large body and sends nothing holds no more of the memory
// than it sent (with every other repository waiting for it). grow, when
// set, is asked for each buffer's size before the buffer is used (the
// repository's share of the backfill's memory).
func readBody(r io.Reader, size int64, max int, buf []byte, grow func(int) error) ([]byte, error) {
	buf = buf[:0]
	if grow != nil {
		if err := grow(cap(buf)); err != nil {
			return buf, err
		}
	}
	for {
		if len(buf) == cap(buf) {
			n := min(2*cap(buf)+4096, max+1)
			if size > 0 && size <= int64(max) && int(size) >= cap(buf) {
				n = min(n, int(size)+1)
			}
			if grow != nil {
				if err := grow(n); err != nil {
					return buf, err
				}
			}
			nb := make([]byte, len(buf), n)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > max {
			return buf, errors.New("repository CAR too big")
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func (b *Backfill) skip(reason string, did string, err error) {
	if b.Log != nil {
		b.Log.Warn("backfill: repository skipped", "did", did, "reason", reason, "error", err)
	}
	if b.OnSkip != nil {
		b.OnSkip(reason)
	}
}

type listReposOut struct {
	Cursor string `json:"cursor"`
	Repos  []struct {
		DID    string `json:"did"`
		Active *bool  `json:"active"`
		Status string `json:"status"`
	} `json:"repos"`
}

// errResyncFailed: a resync could not fetch the repository; its replicated
// marker stays, so a later leadership term tries again.
var errResyncFailed = errors.New("resync: repository not fetched")

// Resync backfills one repository now (a reactivated account, a #sync),
// unless the writer holds it back once fetched (Writer.ResyncReady: the
// repository is ahead of the stream that asked; ErrResyncHeld).
func (b *Backfill) Resync(ctx context.Context, w *Writer, did string) error {
	return b.repo(ctx, w, did, true)
}

// repo backfills one repository: stamp, fetch, write. With strict (a
// resync), a repository that cannot be fetched is an error rather than a
// count, and the writer may hold the write back (ErrResyncHeld).
func (b *Backfill) repo(ctx context.Context, w *Writer, did string, strict bool) error {
	if !link.ValidDID(did) {
		b.skip("bad_did", did, nil)
		return nil
	}
	stamp, err := w.ReserveStamp(writeCtx(ctx))
	if err != nil {
		return err
	}
	b.setState(did, RepoPending, "", nil)
	rb := b.getBufs()
	defer b.putBufs(rb)
	share := &memShare{m: b.memory}
	defer share.release() // once the repository is written
	var car []byte
	var ferr error
	for try := 0; try < backfillTries; try++ {
		car, ferr = b.fetchRepo(ctx, did, rb.car, share)
		if cap(car) > cap(rb.car) {
			rb.car = car[:0]
		}
		if ferr == nil || gone(ferr) || ctx.Err() != nil || try == backfillTries-1 {
			break
		}
		share.release() // no share is held while waiting (for the retry, then its host's slot)
		wait := time.Duration(try+1) * time.Second
		if he := (*httpError)(nil); errors.As(ferr, &he) && he.retryAfter > wait {
			wait = he.retryAfter // a PDS that rate-limits says when
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
	if ferr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if gone(ferr) {
			if strict && !w.ResyncReady(did, "") {
				return fmt.Errorf("%s: %w", did, ErrResyncHeld)
			}
			err := b.writeGone(ctx, w, did, stamp) // the repository is gone: revoke it
			if err == nil && !strict {
				b.crawled()
			}
			return err
		}
		return b.failed(did, "fetch_failed", ferr, strict)
	}
	// The whole repository is checked (a walk that decodes no record)
	// before any of it is written, then its records are decoded a batch
	// at a time as they are written: a repository in flight holds its CAR
	// and the CAR's index, not every record decoded, which takes several
	// times the CAR's bytes (BenchmarkBackfillRepositoryMemory).
	c, err := event.OpenCAR(car, event.CAROptions{NoCID: true})
	var info event.CARInfo
	if err == nil {
		info, err = c.Walk(false, nil)
	}
	if err != nil {
		return b.failed(did, "bad_car", err, strict) // a resync keeps its marker, to try again
	}
	if info.DID != did {
		return b.failed(did, "car_did_mismatch", fmt.Errorf("CAR is of %s", info.DID), strict)
	}
	if len(info.Missing) > 0 {
		// A partial repository: written, its revocation would kill the
		// links of the records it does not show. Failed instead, and
		// fetched again like any other failure.
		m := info.Missing[0]
		return b.failed(did, "partial_car", fmt.Errorf("the CAR lacks %d blocks its tree names (the first: %s %s)", len(info.Missing), m.Kind, m.CID), strict)
	}
	if strict && !w.ResyncReady(did, info.Rev) {
		return fmt.Errorf("%s: %w", did, ErrResyncHeld)
	}
	rb.ops, err = w.ApplyRepoCAR(writeCtx(ctx), b.Name(), did, stamp, c, info.Records, rb.ops)
	if err != nil {
		return err
	}
	b.stats.add(func(s *BackfillStats) { s.Done++ })
	b.setState(did, RepoDone, info.Rev, nil)
	if !strict {
		b.crawled()
	}
	return nil
}

// writeGone revokes the repository of did at stamp (gone: every link it
// wrote before goes) and counts it.
func (b *Backfill) writeGone(ctx context.Context, w *Writer, did string, stamp uint64) error {
	b.stats.add(func(s *BackfillStats) { s.Gone++ })
	b.setState(did, RepoGone, "", nil)
	return w.ApplyRepo(writeCtx(ctx), b.Name(), did, stamp, nil)
}

// failed counts a repository that could not be written, for reason, and
// records why (it is fetched again later); a resync's failure (strict) is
// an error, so that its marker stays.
func (b *Backfill) failed(did, reason string, err error, strict bool) error {
	b.stats.add(func(s *BackfillStats) { s.Failed++ })
	b.setState(did, RepoFailed, "", err)
	b.skip(reason, did, err)
	if strict {
		return fmt.Errorf("%s: %w: %v", did, errResyncFailed, err)
	}
	return nil
}

// Backfill is the Backfiller, with metrics and status of its own.
var (
	_ Backfiller     = (*Backfill)(nil)
	_ watched        = (*Backfill)(nil)
	_ statusReporter = (*Backfill)(nil)
)

// Live is false: a backfill lists every repository, from the first page.
func (b *Backfill) Live() bool { return false }

// watch counts what it skips.
func (b *Backfill) watch(h watchHooks) { b.OnSkip, b.OnCrawled = h.skip, h.crawled }

// crawled counts a repository the crawl wrote or revoked.
func (b *Backfill) crawled() {
	if b.OnCrawled != nil {
		b.OnCrawled()
	}
}

// report adds its progress: the counters and the first failed repositories.
func (b *Backfill) report(st *SourceStatus, _ time.Time) { st.Backfill, st.Failed = b.Progress() }

// Ingest backfills every repository into w from cursor (the committed
// page cursor), then tries the failed ones again; it returns nil once
// every page is done (the cursor then reads EOFCursor of the last). A pass
// that fails (the store refusing a checkpoint, the relay down past its
// retries) starts again from what was published, after a backoff, for as
// long as this node leads; a lost leadership ends it.
func (b *Backfill) Ingest(ctx context.Context, w *Writer, cursor string) error {
	if b.ResyncOnly {
		w.SetCursor(b.Name(), EOFCursor("resync-only"))
		return nil
	}
	b.restarted.Store("") // a request taken up by an earlier write path, unpublished, is taken up again
	fresh := false        // a restarted crawl: an empty state, not the published checkpoint
	for wait := time.Duration(0); ; {
		if req := b.restartAsked(w); req != "" { // asked before this leader, or while the last pass ran
			b.restart(w, req)
			cursor, fresh, wait = "", true, 0
		}
		crossing := !Done(cursor) // this pass, if it succeeds, reaches the listing's end
		pctx, asked := b.watchRestart(ctx, w)
		err := b.pass(pctx, w, cursor, fresh)
		if stopped := asked(); err != nil && stopped && ctx.Err() == nil && !errors.Is(err, ErrLeadershipLost) { // a restart asked meanwhile: it stopped the pass
			w.log.Warn("backfill pass stopped: a restart was asked", "source", b.Name(), "cursor", cursor)
			continue
		}
		if err == nil && crossing && !b.NoCompaction {
			if err := compactAfterBackfill(ctx, w.cfg.Node, b.Name(), b.restartOf(w)); err != nil {
				w.log.Warn("backfill done; the full compaction after it is asked again by the next leader", "error", err)
			}
		}
		if err == nil && b.restartAsked(w) != "" {
			continue
		}
		if err == nil || ctx.Err() != nil || errors.Is(err, ErrLeadershipLost) {
			return err
		}
		wait = retryBackoff.Next(wait)
		w.log.Error("backfill failed; starting again from the published state", "error", err, "retry_in", wait)
		if sleepCtx(ctx, wait) != nil {
			return nil
		}
		if !b.restartUnpublished(w) { // else the restarted crawl's first pages, unpublished: from the start again
			cursor, fresh = w.cfg.Node.FSM.Cursor(b.Name()), false
		}
	}
}

// retryFailed tries once more every repository that failed its tries
// (after the listing's end, and on each new leader), then checkpoints at
// cursor: what fails again stays listed, with its error.
func (b *Backfill) retryFailed(ctx context.Context, w *Writer, cursor string) error {
	st := b.state.Load()
	// As many at once as a page's (and as many a host: fetchRepo's
	// slots), not one after another: a dead host's repositories each
	// take their tries' waits.
	conc := b.Concurrency
	if conc <= 0 {
		conc = DefaultBackfillConcurrency
	}
	sem := make(chan struct{}, conc)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for _, did := range st.failedDIDs() {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		st.join(did, allPages)
		wg.Go(func() {
			defer func() { <-sem }()
			if err := b.repo(ctx, w, did, false); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return st.checkpoint(ctx, w.cfg.Store, w, b.Name(), cursor, allPages)
}
