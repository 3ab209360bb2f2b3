package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	jetstream "github.com/bluesky-social/jetstream"
	"github.com/hashicorp/go-hclog"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
)

// EnvJetstreamAPIKey names the environment variable a Jetstream v2 source
// reads its API key from when its URL names no api_key_file (a hosted
// archive may ask for one; a server of one's own does not). A key is never
// a flag or part of the source URL, which show in logs and status.
const EnvJetstreamAPIKey = "EDDY_JETSTREAM_API_KEY"

// Jetstream2 follows a Jetstream v2 server (github.com/bluesky-social/
// jetstream v0.2.0 and later) through its official Go client: first its
// archive (the state of every repository at the server's crawl, then
// every later event, in sealed segments: planSnapshot, getSegment,
// getBlock, each checked against its xxh3 checksum by the client), then
// its live subscribeEvents stream from the archive's sealed tip, with no
// gap and no duplicate. Its cursor is the server's seq of the last event
// applied and the server's host ("<seq>@<host>"): a new leader resumes
// after it, in the archive while it is
// there, live once past it (the client plans the rest of the archive from
// there and cuts over at max(sealed tip, cursor)). Seqs are the server's
// own, so a source follows one server.
//
// Events map to operations as the firehose's do, one stamp each in seq
// order, but for two kinds whose repository the archive itself carries:
//   - #sync (the server found the repository diverged): the server sends
//     the repository's records again right after it, so the sync revokes
//     the repository at its stamp (event.KindRepoReset) and the records
//     that follow are written at later stamps;
//   - an account active again (after a deactivation or a takedown, whose
//     revocation removed its links): with a backfill source among the
//     sources (backfill+…&resync_only=true crawls nothing else), the
//     repository is fetched again from its PDS, as for the other streams.
//     Without one it is read back from the server, its events up to this
//     one folded into its records, and written whole at one stamp
//     reserved here (resyncFromArchive); the stream waits meanwhile. That
//     is exact for a repository the archive holds, but a Jetstream v2
//     server does not crawl a repository that is inactive when it crawls
//     and does not fetch it when it comes back, so only a PDS has the
//     records such an account made before.
//
// An archive read from its start is a backfill: the first time the
// events applied reach the archive's sealed tip (as the client's Stats learned
// it when it planned the sweep), the leader asks for a full
// compaction, once, as a backfill source does at the end of its listing
// (compactAfterBackfill; &compact=false asks none). Whether the read
// started at the archive's beginning is replicated (backfillStartedKey),
// so a leader that takes over inside the archive asks at its end too,
// while a node that resumes from a cursor it committed before this was
// recorded (an upgrade, the archive read long ago) reads the segments
// sealed since and asks nothing.
//
// A recoverable error of the client (a segment or block that does not
// download, verify or decode; the client would skip the rest of that
// segment) stops the session: nothing after the error is applied, the
// error is counted (skipped{reason="archive_error"}), and the next
// session plans again from the last event applied.
type Jetstream2 struct {
	URL    string // http(s)://host[:port] of the server
	APIKey string
	Log    hclog.Logger
	OnSkip func(reason string)
	OnLag  func(d time.Duration)
	last   lastEvent
	// skipLog rate-limits the log lines of skipped inputs.
	skipLog skipLogger
	// NoCompaction: the end of an archive read from its start asks for no
	// full compaction (&compact=false).
	NoCompaction bool
	// options are added to every client (tests: batch size, HTTP client).
	options []jetstream.Option

	httpOnce sync.Once
	http     *http.Client
	// inactive: the DIDs whose account this run saw go inactive (their
	// links revoked), which readBack may write again.
	inactive map[string]bool
}

// httpClient is the clients' HTTP client: the default transport's
// settings, a bound on the wait for response headers (no bound on a
// body: segments are large), and every archive download's body watched:
// one cut short is counted (skipped{reason="archive_cut"}) before the
// client reads the rest again.
func (j *Jetstream2) httpClient() *http.Client {
	j.httpOnce.Do(func() {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = 30 * time.Second
		j.http = &http.Client{Transport: &cutWatch{base: t, cut: func(err error) { j.skip("archive_cut", -1, err) }}}
	})
	return j.http
}

// cutWatch wraps the bodies of archive downloads (getSegment, getBlock)
// to notice one that ends in an error other than its end.
type cutWatch struct {
	base http.RoundTripper
	cut  func(error)
}

func (c *cutWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil && (strings.HasSuffix(r.URL.Path, ".getSegment") || strings.HasSuffix(r.URL.Path, ".getBlock")) {
		resp.Body = &cutBody{ReadCloser: resp.Body, ctx: r.Context(), cut: c.cut, want: rangeLength(resp)}
	}
	return resp, err
}

// rangeLength is the length of a 206 answer's range (Content-Range
// "bytes first-last/size"), or -1. (A 200's Content-Length the transport
// holds the body to itself.)
func rangeLength(resp *http.Response) int64 {
	if resp.StatusCode != http.StatusPartialContent {
		return -1
	}
	var first, last int64
	if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/", &first, &last); err != nil || last < first {
		return -1
	}
	return last - first + 1
}

type cutBody struct {
	io.ReadCloser
	ctx  context.Context
	cut  func(error)
	want int64 // bytes the answer's range promised, or -1
	got  int64
	seen bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.got += int64(n)
	if err == io.EOF && b.want >= 0 && b.got < b.want {
		b.report(fmt.Errorf("body ended after %d of the %d bytes of its range", b.got, b.want))
	} else if err != nil && err != io.EOF {
		b.report(err)
	}
	return n, err
}

func (b *cutBody) report(err error) {
	if !b.seen && b.ctx.Err() == nil {
		b.seen = true
		b.cut(err)
	}
}

// clientLog passes the client's log records to the source's log; a
// warning (a zstd dictionary refused, the live tail uncompressed
// instead) is also counted, as skipped{reason="client_warning"}.
type clientLog struct {
	j     *Jetstream2
	attrs []any
}

func (h *clientLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *clientLog) Handle(_ context.Context, r slog.Record) error {
	kv := append([]any{}, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		kv = append(kv, a.Key, a.Value.String())
		return true
	})
	msg := "jetstream2 client: " + r.Message
	switch {
	case r.Level >= slog.LevelWarn:
		if h.j.Log != nil {
			h.j.Log.Warn(msg, kv...)
		}
		if h.j.OnSkip != nil {
			h.j.OnSkip("client_warning")
		}
	case h.j.Log != nil:
		h.j.Log.Info(msg, kv...)
	}
	return nil
}

func (h *clientLog) WithAttrs(as []slog.Attr) slog.Handler {
	kv := append([]any{}, h.attrs...)
	for _, a := range as {
		kv = append(kv, a.Key, a.Value.String())
	}
	return &clientLog{j: h.j, attrs: kv}
}

func (h *clientLog) WithGroup(string) slog.Handler { return h }

// NewJetstream2 returns a source for the Jetstream v2 server at raw
// (http:// or https://, optionally ?api_key_file=/path: the key is read
// from that file, else from $EDDY_JETSTREAM_API_KEY, else none).
func NewJetstream2(raw string, log hclog.Logger) (*Jetstream2, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("jetstream2 url %q: want http(s)://host[:port][?api_key_file=/path]", raw)
	}
	q := u.Query()
	key := strings.TrimSpace(os.Getenv(EnvJetstreamAPIKey))
	if f := q.Get("api_key_file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("jetstream2 api key: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	for k := range q {
		if k != "api_key_file" && k != "compact" {
			return nil, fmt.Errorf("jetstream2 url %q: unknown parameter %q", raw, k)
		}
	}
	compact, err := boolParam(q, "compact", true)
	if err != nil {
		return nil, fmt.Errorf("jetstream2 url %q: %w", raw, err)
	}
	return &Jetstream2{URL: u.Scheme + "://" + u.Host, APIKey: key, Log: log, NoCompaction: !compact, inactive: map[string]bool{}}, nil
}

var (
	_ Source         = (*Jetstream2)(nil)
	_ watched        = (*Jetstream2)(nil)
	_ statusReporter = (*Jetstream2)(nil)
)

func (j *Jetstream2) Name() string { return "jetstream2" }

// Live is false: with no committed cursor it starts at the archive's
// beginning, not at the stream's head.
func (j *Jetstream2) Live() bool { return false }

func (j *Jetstream2) watch(h watchHooks) { j.OnSkip, j.OnLag = h.skip, h.lag }

// report adds the time of the newest event this node read (the server's
// witnessed time) and its lag.
func (j *Jetstream2) report(st *SourceStatus, now time.Time) {
	if t, ok := j.last.get(); ok {
		st.setLag(now, t)
	}
	st.setLastEvent(&j.last)
}

// Ingest follows the server into w from cursor (a seq; "": the whole
// archive) until ctx ends.
func (j *Jetstream2) Ingest(ctx context.Context, w *Writer, cursor string) error {
	seq, host, _ := strings.Cut(cursor, "@")
	after, err := intCursor("jetstream2", seq)
	if err != nil {
		return err
	}
	if after > 0 && host != j.host() {
		// Another server's seq (the source's URL changed): its numbering
		// says nothing here, and a seq past this server's head would skip
		// to its tip. Read this server's archive from the start instead:
		// its events applied in their order give the same index.
		if j.Log != nil {
			j.Log.Warn("jetstream2: the committed cursor is another server's seq; reading this server's archive from its start",
				"cursor", cursor, "url", j.URL)
		}
		after = 0
	}
	if err := j.markStart(ctx, w, after); err != nil {
		return err
	}
	return reconnect(ctx, j.Log, "jetstream2", func(int) (string, error) {
		return j.URL, j.session(ctx, w, &after)
	})
}

// host is the server's host[:port], which the cursor names with its seq.
func (j *Jetstream2) host() string { return urlHost(j.URL) }

// clientOptions are the options of every client of this source.
func (j *Jetstream2) clientOptions(extra ...jetstream.Option) []jetstream.Option {
	opts := []jetstream.Option{
		jetstream.WithRawRecords(), // records decoded here, from their CBOR
		jetstream.WithBatchSize(256),
		jetstream.WithLogger(slog.New(&clientLog{j: j})),
		jetstream.WithHTTPClient(j.httpClient()),
	}
	if j.APIKey != "" {
		opts = append(opts, jetstream.WithAPIKey(j.APIKey))
	}
	opts = append(opts, j.options...)
	return append(opts, extra...)
}

// session runs one client from *after until it fails or ctx ends,
// advancing *after past every event applied.
func (j *Jetstream2) session(ctx context.Context, w *Writer, after *int64) error {
	c, err := jetstream.Subscribe(j.URL, j.clientOptions(jetstream.WithAfterSeq(uint64(*after)))...)
	if err != nil {
		return &emitError{fmt.Errorf("jetstream2: %w", err)} // a configuration error: retrying cannot help
	}
	defer c.Close()
	if j.Log != nil {
		j.Log.Info("jetstream2 following", "url", j.URL, "after_seq", *after)
	}
	for b, err := range c.Events(ctx) {
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			switch {
			case errors.Is(err, jetstream.ErrFatal):
				return err
			case archiveBlockError(err):
				// A whole block (or segment) could not be read: the client
				// would go on with the next, past what it could not read;
				// start again from the last event applied instead.
				j.skip("archive_error", *after, err)
				return err
			case strings.HasPrefix(err.Error(), "jetstream: live tail reconnecting"):
				// The client reconnects by itself, from its last seq.
				if j.Log != nil {
					j.Log.Warn("jetstream2 live stream reconnecting", "after_seq", *after, "error", err)
				}
			default:
				// One event (an archive row, a live frame) that does not
				// decode: the client has left it out and goes on.
				j.skip("bad_event", *after, err)
			}
			continue
		}
		for i := range b.Events() {
			ev := &b.Events()[i]
			if int64(ev.Seq) <= *after {
				continue // delivered again (the live tail's inclusive cursor)
			}
			if err := j.apply(ctx, w, ev); err != nil {
				return err
			}
			*after = int64(ev.Seq)
		}
		if atArchiveEnd(c.Stats(), *after) && j.awaitsEnd(w.cfg.Node.FSM) {
			if err := compactAfterBackfill(ctx, w.cfg.Node, j.Name(), ""); err != nil {
				return err
			}
			if j.Log != nil {
				j.Log.Info("jetstream2: the archive read from its start reached its sealed tip; a full compaction asked", "seq", *after)
			}
		}
	}
	return ctx.Err()
}

// markStart records, when this leader reads the archive from its
// beginning (after == 0), that the read is a backfill whose end asks for
// a full compaction.
func (j *Jetstream2) markStart(ctx context.Context, w *Writer, after int64) error {
	node := w.cfg.Node
	started := backfillStartedKey + j.Name()
	if after != 0 || j.NoCompaction || node.FSM.Setting(started) != "" || node.FSM.Setting(backfillCompactedKey+j.Name()) != "" {
		return nil
	}
	if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: started, Value: "1"}); err != nil {
		return fmt.Errorf("jetstream2: record the archive's read from its start: %w", err)
	}
	return nil
}

// awaitsEnd says whether the archive's end is to ask for a full
// compaction, as s says: its read from the start was recorded, and no
// end has asked yet.
func (j *Jetstream2) awaitsEnd(s *fsm.State) bool {
	return !j.NoCompaction && s.Setting(backfillStartedKey+j.Name()) != "" && s.Setting(backfillCompactedKey+j.Name()) == ""
}

// atArchiveEnd says whether the events applied through seq after reach
// the archive's sealed tip as the client learned it when it planned its
// sweep (the client counts a page as planned only once its events are
// delivered, so the stats' residual gap lags the events).
func atArchiveEnd(st jetstream.Stats, after int64) bool {
	return st.SealedTip > 0 && after >= 0 && uint64(after) >= st.SealedTip
}

// archiveBlockError says whether a client error is a whole block or
// segment of the archive that could not be downloaded or decoded (the
// client's own wording, v0.2.0), after which the client would skip the
// rest of that segment; other recoverable errors are one event it left
// out, or its live tail reconnecting.
func archiveBlockError(err error) bool {
	msg := err.Error()
	for _, p := range []string{
		"jetstream: decode block ", "jetstream: read block ", "jetstream: parse segment header ",
		"jetstream: getBlock ", "jetstream: getSegment ", "jetstream: unknown download mode ",
		"jetstream: backfill transform panicked",
	} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// apply writes one event at its seq's cursor.
func (j *Jetstream2) apply(ctx context.Context, w *Writer, ev *jetstream.Event) error {
	cursor := strconv.FormatUint(ev.Seq, 10) + "@" + j.host()
	op := event.Op{DID: ev.DID, Seq: int64(ev.Seq), Cursor: int64(ev.Seq)}
	if ev.TimeUS > 0 {
		t := time.UnixMicro(ev.TimeUS)
		op.Time = t.UTC() // the event's time: how far behind the network the write path is (resyncs)
		j.last.see(t)
		if j.OnLag != nil {
			j.OnLag(time.Since(t))
		}
	}
	switch ev.Kind {
	case jetstream.KindCommit:
		if ev.Commit == nil {
			j.skip("bad_event", int64(ev.Seq), errors.New("commit event without commit"))
			w.SetCursor(j.Name(), cursor)
			return nil
		}
		commitOp(&op, ev.Commit)
	case jetstream.KindIdentity:
		op.Kind = event.KindIdentity
		if ev.Identity != nil {
			op.Handle, op.RelaySeq = ev.Identity.Handle, ev.Identity.Seq
		}
	case jetstream.KindAccount:
		if ev.Account == nil {
			j.skip("bad_event", int64(ev.Seq), errors.New("account event without account"))
			w.SetCursor(j.Name(), cursor)
			return nil
		}
		if ev.Account.Active && !w.resyncer.Load() {
			if err := j.readBack(ctx, w, ev.DID, ev.Seq); err != nil {
				return err
			}
			w.SetCursor(j.Name(), cursor)
			return nil
		}
		if !ev.Account.Active && event.AccountGone(ev.Account.Status) && len(j.inactive) < inactiveMax {
			if j.inactive == nil {
				j.inactive = map[string]bool{}
			}
			j.inactive[ev.DID] = true
		}
		// Active: the write path asks the backfill source to fetch the
		// repository from its PDS (a resync), as for the other streams.
		op.Kind, op.Active, op.Status, op.RelaySeq = event.KindAccount, ev.Account.Active, ev.Account.Status, ev.Account.Seq
	case jetstream.KindSync:
		op.Kind = event.KindRepoReset
		if ev.Sync != nil {
			op.Rev, op.RelaySeq = ev.Sync.Rev, ev.Sync.Seq
		}
	default:
		j.skip("unknown_kind", int64(ev.Seq), fmt.Errorf("kind %q", ev.Kind))
		w.SetCursor(j.Name(), cursor)
		return nil
	}
	if err := w.Apply(ctx, j.Name(), cursor, &op); err != nil {
		return &emitError{err} // the write path failed (leadership lost): stop
	}
	return nil
}

// readBackAttempts: tries at reading one repository back before it is
// given up (counted as resync_failed) and the stream goes on.
const readBackAttempts = 3

// inactiveMax bounds the DIDs a run remembers as gone inactive (about
// 100 bytes each: 20 MB); past it, a reactivation of one it did not note
// is counted as resync_unavailable, as after a leader change.
const inactiveMax = 200_000

// readBack writes again the repository of did, active again at seq, when
// no source fetches repositories from their PDS: only for a DID whose
// account this run saw go inactive (its links revoked here); an account
// that is new, or went inactive under an earlier leader, is counted as
// resync_unavailable (a resync_only backfill source covers both). A
// repository that cannot be read back after readBackAttempts tries is
// counted as resync_failed; the stream goes on either way.
func (j *Jetstream2) readBack(ctx context.Context, w *Writer, did string, seq uint64) error {
	if !link.ValidDID(did) {
		j.skip("bad_did", int64(seq), fmt.Errorf("account event of %q", did))
		return nil
	}
	if !j.inactive[did] {
		if j.OnSkip != nil {
			j.OnSkip("resync_unavailable")
		}
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := j.resyncFromArchive(ctx, w, did, seq)
		var fatal *emitError
		switch {
		case err == nil:
			delete(j.inactive, did)
			return nil
		case errors.As(err, &fatal) || ctx.Err() != nil:
			return err // the write path failed, or this term ended
		case attempt == readBackAttempts:
			j.skip("resync_failed", int64(seq), fmt.Errorf("%s: %w", did, err))
			return nil
		}
		if err := sleepCtx(ctx, time.Duration(attempt)*retryBackoff.Min); err != nil {
			return err
		}
	}
}

// commitOp fills op from a commit: its action, path, rev and record
// (decoded from the record's DAG-CBOR; one that does not decode is marked
// to be skipped and counted, as the other decoders do).
func commitOp(op *event.Op, c *jetstream.Commit) {
	op.Kind = event.KindCommit
	op.Rev, op.Collection, op.RKey, op.CID = c.Rev, c.Collection, c.Rkey, c.CID
	switch c.Operation {
	case jetstream.OpCreate:
		op.Action = event.ActionCreate
	case jetstream.OpUpdate:
		op.Action = event.ActionUpdate
	case jetstream.OpDelete:
		op.Action = event.ActionDelete
		return
	default:
		op.Action = event.ActionUnknown
		op.Skip = event.SkipBadAction
		return
	}
	if len(c.RecordCBOR) == 0 {
		op.Skip = event.SkipRecordMissing
		return
	}
	rec, err := event.DecodeRecordCBOR(c.RecordCBOR)
	if err != nil {
		op.Skip = event.SkipRecordCBOR
		return
	}
	op.Record = rec
}

// resyncTimeout bounds reading one repository back from the server.
const resyncTimeout = 2 * time.Minute

// resyncFromArchive writes did's repository whole, as it stood just
// before the event of seq upTo (an account active again), at one stamp
// reserved now: its records are the fold of its events before upTo (the
// archive's, then the live stream's past the sealed tip, filtered to the
// DID by the server), a #sync starting the fold again (its replacement
// records follow it). Events after upTo come later in this source, at
// later stamps.
func (j *Jetstream2) resyncFromArchive(ctx context.Context, w *Writer, did string, upTo uint64) error {
	stamp, err := w.ReserveStamp(ctx)
	if err != nil {
		return &emitError{err}
	}
	rctx, cancel := context.WithTimeout(ctx, resyncTimeout)
	defer cancel()
	c, err := jetstream.Subscribe(j.URL, j.clientOptions(jetstream.WithDIDs([]string{did}), jetstream.WithAfterSeq(0))...)
	if err != nil {
		return fmt.Errorf("jetstream2: %w", err)
	}
	defer c.Close()
	records := map[string]event.Op{}
	done := false
	for b, err := range c.Events(rctx) {
		if err != nil {
			if !errors.Is(err, jetstream.ErrFatal) && rctx.Err() == nil {
				j.skip("archive_error", int64(upTo), err)
			}
			return fmt.Errorf("jetstream2: reading %s back: %w", did, err)
		}
		for i := range b.Events() {
			ev := &b.Events()[i]
			if ev.Seq >= upTo {
				done = true
				break
			}
			if ev.DID != did {
				continue
			}
			switch {
			case ev.Kind == jetstream.KindSync:
				clear(records)
			case ev.Kind == jetstream.KindCommit && ev.Commit != nil:
				var op event.Op
				op.DID, op.Seq = did, int64(ev.Seq)
				commitOp(&op, ev.Commit)
				path := op.Collection + "/" + op.RKey
				if op.Action == event.ActionDelete {
					delete(records, path)
				} else {
					records[path] = op
				}
			}
		}
		if done {
			break
		}
	}
	if !done {
		if err := rctx.Err(); err != nil {
			return fmt.Errorf("jetstream2: reading %s back: %w", did, err)
		}
		return fmt.Errorf("jetstream2: reading %s back: the stream ended before seq %d", did, upTo)
	}
	ops := make([]event.Op, 0, len(records))
	for _, op := range records {
		ops = append(ops, op)
	}
	if j.Log != nil {
		j.Log.Debug("jetstream2: account active again, repository read back", "did", did, "seq", upTo, "records", len(ops), "stamp", stamp)
	}
	if ops == nil {
		ops = []event.Op{} // an empty repository, not a gone one
	}
	if err := w.ApplyRepo(ctx, j.Name(), did, stamp, ops); err != nil {
		return &emitError{err}
	}
	return nil
}

// skip counts and logs a bad input; after is the seq of the last event
// applied before it.
func (j *Jetstream2) skip(reason string, after int64, err error) {
	pos := "after seq " + strconv.FormatInt(after, 10)
	if after < 0 {
		pos = "an archive download"
	}
	j.skipLog.log(j.Log, "jetstream2", reason, "position", pos, "error", err)
	if j.OnSkip != nil {
		j.OnSkip(reason)
	}
}
