package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
)

// Reconnection limits of the live sources.
const (
	backoffMin = 500 * time.Millisecond
	backoffMax = 30 * time.Second
	// jetstreamRewindUs: two Jetstream instances stamp events with their
	// own clocks, so a failover to another instance resumes this far
	// before the cursor, skipping the events already applied (see
	// Jetstream.Run).
	jetstreamRewindUs = 5_000_000
	// jetstreamResumeRewindUs: a reconnect to the same instance resumes
	// this far before the cursor (in case its delivery is not strictly in
	// time_us order), skipping the events already applied.
	jetstreamResumeRewindUs = 1_000_000
	// readTimeout: a connection that delivers nothing for this long is
	// considered dead and replaced.
	readTimeout = 60 * time.Second
	// wsMessageBytesMax bounds one websocket message.
	wsMessageBytesMax = event.MaxFrameSize
)

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func nextBackoff(d time.Duration) time.Duration { return min(backoffMax, max(backoffMin, 2*d)) }

// intCursor parses a numeric stream cursor ("" = none, 0).
func intCursor(source, cursor string) (int64, error) {
	if cursor == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: bad cursor %q", source, cursor)
	}
	return n, nil
}

// backoffReset: a connection that lasted this long was healthy; the next
// reconnect starts from the shortest wait again.
const backoffReset = time.Minute

// reconnect runs session (attempt 0, 1, ...) until ctx ends or the
// consumer fails, waiting with exponential backoff between attempts.
func reconnect(ctx context.Context, log hclog.Logger, name string, session func(attempt int) (string, error)) error {
	backoff := time.Duration(0)
	for attempt := 0; ; attempt++ {
		start := time.Now()
		url, err := session(attempt)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fatal *emitError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if time.Since(start) >= backoffReset {
			backoff = 0
		}
		backoff = nextBackoff(backoff)
		if log != nil {
			var unreachable *unreachableError
			if errors.As(err, &unreachable) {
				log.Error("cannot reach "+name+"; queries go on answering from what is already indexed", "url", url, "error", unreachable.err, "retry_in", backoff)
			} else {
				log.Warn(name+" connection ended; reconnecting", "url", url, "error", err, "backoff", backoff)
			}
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return err
		}
	}
}

// Jetstream follows one or more Jetstream v1 endpoints (failing over in
// turn), with zstd-dictionary compression. Its cursor is time_us.
type Jetstream struct {
	URLs   []string
	Log    hclog.Logger
	OnSkip func(reason string)
	// OnLag, if set, receives how far behind now each event is.
	OnLag func(d time.Duration)
	dec   *event.JetstreamDecompressor
	last  lastEvent
	// skipLog rate-limits the log lines of skipped inputs.
	skipLog skipLogger
}

// NewJetstream returns a Jetstream source over urls (ws:// or wss://,
// ending in /subscribe).
func NewJetstream(urls []string, log hclog.Logger) (*Jetstream, error) {
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "ws" && p.Scheme != "wss") {
			return nil, fmt.Errorf("jetstream url %q: want ws:// or wss://", u)
		}
	}
	dec, err := event.NewJetstreamDecompressor()
	if err != nil {
		return nil, err
	}
	return &Jetstream{URLs: urls, Log: log, dec: dec}, nil
}

func (j *Jetstream) Name() string { return "jetstream" }

// Run follows the Jetstream from cursor (time_us).
//
// Where it resumes. Applying again events already applied is not harmless
// to readers: an old create applied again gets a new stamp and shows until
// the delete after it is applied again, so a replay publishes, for a
// moment, the index as it was seconds ago (a deleted link comes back, a
// revoked account's links too). So a run remembers, by identity, the
// events it applied in the last jetstreamRewindUs (seenEvents: a commit
// by DID, collection, record key, operation, revision and CID, which every
// instance serves alike; account and identity events by DID, kind and the
// relay's sequence number) and skips
// them when they come again. A reconnect to the same instance resumes
// jetstreamResumeRewindUs before the cursor, a failover to another
// instance (whose clock stamps time_us differently) jetstreamRewindUs
// before it: only events not yet applied are applied (after a failover,
// late, which is the best a consumer can do). A new leader (a new Run,
// nothing remembered) resumes at the committed cursor when there is one
// URL (Jetstream's cursor is inclusive: the events at exactly that time
// come again); with several it cannot know which instance its predecessor
// read, so it rewinds, and the window it replays may show older answers
// until it has passed.
//
// A run never rewinds below its floor: its starting cursor (the time of
// the first event it received, when it started live), or with several
// URLs that minus jetstreamRewindUs, where its first connection already
// asked. Every event the run applied at or after the floor is in seen,
// but the events before it were applied by an earlier run: seen does not
// know them, and applying them again after this run's later events would
// undo those (a create applied again after its delete was skipped as
// seen is a link back for good).
func (j *Jetstream) Run(ctx context.Context, cursor string, emit func(*event.Op, string) error) error {
	cur, err := intCursor("jetstream", cursor)
	if err != nil {
		return err
	}
	seen := newSeenEvents()
	floor := int64(-1) // not known before the first event when the run starts live
	if cur > 0 {
		floor = j.floorAt(cur)
	}
	prev := ""
	return reconnect(ctx, j.Log, "jetstream", func(attempt int) (string, error) {
		base := j.URLs[attempt%len(j.URLs)] // fail over across the URLs in turn
		var rewind int64
		switch {
		case prev == "" && len(j.URLs) == 1: // a new run: exactly the committed cursor
		case prev == base:
			rewind = jetstreamResumeRewindUs
		default:
			rewind = jetstreamRewindUs
		}
		err := j.session(ctx, base, rewind, &cur, &floor, seen, emit)
		var unreachable *unreachableError
		if !errors.As(err, &unreachable) {
			prev = base // it connected: the next attempt resumes from there
		}
		return base, err
	})
}

// seenEvents remembers the events a Jetstream run applied in the last
// jetstreamRewindUs, by identity (time_us, DID, kind, collection, rkey,
// operation), so a resumed connection skips them.
type seenEvents struct {
	keys  map[string]int64 // key -> time_us
	max   int64
	added int // since the last pruning
}

// seenPruneEvery: adds between two prunings of the keys past the window.
const seenPruneEvery = 4096

func newSeenEvents() *seenEvents { return &seenEvents{keys: map[string]int64{}} }

// eventKey is an event's identity across Jetstream instances: not its
// time_us, which each instance stamps with its own clock.
func eventKey(op *event.Op) string {
	if op.Kind == event.KindCommit {
		return op.DID + "|" + op.Collection + "|" + op.RKey + "|" + op.Action.String() + "|" + op.Rev + "|" + op.CID
	}
	if op.RelaySeq > 0 {
		return op.DID + "|" + op.Kind.String() + "|" + strconv.FormatInt(op.RelaySeq, 10)
	}
	// No relay sequence: only this instance's time tells two alike
	// events apart (so such an event is not recognised after a failover).
	return op.DID + "|" + op.Kind.String() + "|" + strconv.FormatInt(op.Seq, 10)
}

// add records op and reports whether it was new.
func (s *seenEvents) add(op *event.Op) bool {
	k := eventKey(op)
	if _, ok := s.keys[k]; ok {
		return false
	}
	s.keys[k] = op.Seq
	s.max = max(s.max, op.Seq)
	if s.added++; s.added >= seenPruneEvery {
		s.added = 0
		for k, t := range s.keys {
			if t < s.max-jetstreamRewindUs {
				delete(s.keys, k)
			}
		}
	}
	return true
}

// unreachableError is a failure to connect at all (DNS, TCP, TLS, or the
// websocket handshake), as opposed to a connection that ended.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return "cannot connect: " + e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// emitError wraps an error of the consumer: it stops the source.
type emitError struct{ err error }

func (e *emitError) Error() string { return e.err.Error() }

// floorAt is the floor of a run whose first position is t (see Run).
func (j *Jetstream) floorAt(t int64) int64 {
	if len(j.URLs) == 1 {
		return t
	}
	return max(0, t-jetstreamRewindUs)
}

func (j *Jetstream) session(ctx context.Context, base string, rewind int64, cur, floor *int64, seen *seenEvents, emit func(*event.Op, string) error) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("compress", "true")
	if *cur > 0 {
		from := max(0, *floor, *cur-rewind)
		q.Set("cursor", strconv.FormatInt(from, 10))
	}
	u.RawQuery = q.Encode()
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		return &unreachableError{err}
	}
	if j.Log != nil {
		j.Log.Info("jetstream connected", "url", base, "cursor", *cur)
	}
	defer conn.Close()
	conn.SetReadLimit(wsMessageBytesMax)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var buf []byte
	for {
		conn.SetReadDeadline(time.Now().Add(readTimeout))
		mt, msg, err := conn.ReadMessage()
		if err != nil {
			return err
		}
		if mt == websocket.BinaryMessage {
			buf, err = j.dec.Decompress(buf, msg)
			if err != nil {
				j.skip("bad_compression", *cur, err)
				continue
			}
			msg = buf
		}
		op, err := event.DecodeJetstream(msg)
		if err != nil {
			j.skip(badEventReason(err), *cur, err)
			continue
		}
		if !seen.add(&op) {
			continue // applied by this run already: a resumed connection's overlap
		}
		if *floor < 0 && op.Seq > 0 {
			*floor = j.floorAt(op.Seq)
		}
		if op.Seq > *cur {
			*cur = op.Seq
		}
		if op.Seq > 0 {
			t := time.UnixMicro(op.Seq)
			j.last.see(t)
			if j.OnLag != nil {
				j.OnLag(time.Since(t))
			}
		}
		if err := emit(&op, strconv.FormatInt(*cur, 10)); err != nil {
			return &emitError{err}
		}
	}
}

// skip counts and logs a bad input; after is the cursor (time_us) of the
// last good event before it, the position to look at in the stream.
func (j *Jetstream) skip(reason string, after int64, err error) {
	j.skipLog.log(j.Log, "jetstream", reason, "position", "after time_us "+strconv.FormatInt(after, 10), "error", err)
	if j.OnSkip != nil {
		j.OnSkip(reason)
	}
}

// Firehose follows a relay's com.atproto.sync.subscribeRepos. Its cursor
// is the relay sequence number.
type Firehose struct {
	URL    string
	Log    hclog.Logger
	OnSkip func(reason string)
	// OnLag, if set, receives how far behind now each commit is (by its
	// revision TID's time).
	OnLag func(d time.Duration)
	last  lastEvent
	// skipLog rate-limits the log lines of skipped inputs.
	skipLog skipLogger
}

// NewFirehose returns a firehose source of a relay (ws:// or wss:// host).
func NewFirehose(raw string, log hclog.Logger) (*Firehose, error) {
	p, err := url.Parse(raw)
	if err != nil || (p.Scheme != "ws" && p.Scheme != "wss") {
		return nil, fmt.Errorf("firehose url %q: want ws:// or wss://", raw)
	}
	if !strings.Contains(p.Path, "subscribeRepos") {
		p.Path = strings.TrimRight(p.Path, "/") + "/xrpc/com.atproto.sync.subscribeRepos"
	}
	return &Firehose{URL: p.String(), Log: log}, nil
}

func (f *Firehose) Name() string { return "firehose" }

func (f *Firehose) Run(ctx context.Context, cursor string, emit func(*event.Op, string) error) error {
	cur, err := intCursor("firehose", cursor)
	if err != nil {
		return err
	}
	return reconnect(ctx, f.Log, "firehose", func(int) (string, error) {
		return f.URL, f.session(ctx, &cur, emit)
	})
}

func (f *Firehose) session(ctx context.Context, cur *int64, emit func(*event.Op, string) error) error {
	u, err := url.Parse(f.URL)
	if err != nil {
		return err
	}
	if *cur > 0 {
		q := u.Query()
		q.Set("cursor", strconv.FormatInt(*cur, 10))
		u.RawQuery = q.Encode()
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		return &unreachableError{err}
	}
	if f.Log != nil {
		f.Log.Info("firehose connected", "url", f.URL, "cursor", *cur)
	}
	defer conn.Close()
	conn.SetReadLimit(wsMessageBytesMax)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var ops []event.Op
	for {
		conn.SetReadDeadline(time.Now().Add(readTimeout))
		_, msg, err := conn.ReadMessage()
		if err != nil {
			return err
		}
		ops = ops[:0]
		err = event.DecodeFrame(msg, func(o *event.Op) error { ops = append(ops, *o); return nil })
		if err != nil {
			var se *event.StreamError
			if errors.As(err, &se) {
				return err // the relay closes after an error frame: reconnect
			}
			if errors.Is(err, event.ErrUnknownType) {
				f.skip("unknown_type", *cur, err)
				continue
			}
			f.skip("bad_frame", *cur, err)
			continue
		}
		for i := range ops {
			seq := ops[i].Seq
			c := seq - 1
			if i == len(ops)-1 {
				c = seq
			}
			if err := emit(&ops[i], strconv.FormatInt(max(c, *cur), 10)); err != nil {
				return &emitError{err}
			}
			if ops[i].Rev != "" {
				if tid, err := syntax.ParseTID(ops[i].Rev); err == nil {
					f.last.see(tid.Time())
					if f.OnLag != nil {
						f.OnLag(time.Since(tid.Time()))
					}
				}
			}
		}
		if n := len(ops); n > 0 && ops[n-1].Seq > *cur {
			*cur = ops[n-1].Seq
		}
	}
}

// skip counts and logs a bad input; after is the sequence number of the
// last good frame before it.
func (f *Firehose) skip(reason string, after int64, err error) {
	f.skipLog.log(f.Log, "firehose", reason, "position", "after seq "+strconv.FormatInt(after, 10), "error", err)
	if f.OnSkip != nil {
		f.OnSkip(reason)
	}
}
