package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
)

// Resumption windows of Jetstream.
const (
	// jetstreamRewindUs: two Jetstream instances stamp events with their
	// own clocks, so a failover to another instance resumes this far
	// before the cursor, skipping the events already applied (see
	// Jetstream.Run).
	jetstreamRewindUs = 5_000_000
	// jetstreamResumeRewindUs: a reconnect to the same instance resumes
	// this far before the cursor (in case its delivery is not strictly in
	// time_us order), skipping the events already applied.
	jetstreamResumeRewindUs = 1_000_000
)

// Jetstream follows one or more Jetstream endpoints' v1 /subscribe
// (failing over in turn), with zstd-dictionary compression. Its cursor is
// time_us from a Jetstream v1 server; a Jetstream v2 server also numbers
// its v1 events ("cursor", its seq), and then the cursor is
// "<seq>@<host>:<time_us>" (jetstreamCursor): the seq to resume exactly at
// on that server, the time to rewind to on another (a failover, or the
// source's URL changed), whose seqs are its own.
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

// Jetstream is a live Source with metrics and status of its own.
var (
	_ Source         = (*Jetstream)(nil)
	_ watched        = (*Jetstream)(nil)
	_ statusReporter = (*Jetstream)(nil)
)

func (j *Jetstream) Name() string { return "jetstream" }

// Live is true: with no committed cursor it starts at the stream's head.
func (j *Jetstream) Live() bool { return true }

// Ingest follows the Jetstream into w from cursor (time_us) until ctx ends.
func (j *Jetstream) Ingest(ctx context.Context, w *Writer, cursor string) error {
	return j.Run(ctx, cursor, emitTo(ctx, w, j.Name()))
}

// watch counts what it skips and reports its lag.
func (j *Jetstream) watch(h watchHooks) { j.OnSkip, j.OnLag = h.skip, h.lag }

// report adds its lag (from the committed cursor, a time_us) and the time
// of the newest event this node read.
func (j *Jetstream) report(st *SourceStatus, now time.Time) {
	if us, _, _, err := parseJetstreamCursor(st.Cursor); err == nil && us > 0 {
		st.setLag(now, time.UnixMicro(us))
	}
	st.setLastEvent(&j.last)
}

// Run follows the Jetstream from cursor (time_us; "" or 0: from its head),
// calling emit for every operation with the cursor to resume after it,
// until ctx ends or emit fails; it reconnects with backoff.
//
// Where it resumes. Applying again events already applied is not harmless
// to readers: an old create applied again gets a new stamp and shows until
// the delete after it is applied again, so a replay publishes, for a
// moment, the index as it was seconds ago (a deleted link comes back, a
// revoked account's links too). So a run remembers, by identity, the
// events it applied in the last seenWindowUs (seenEvents: a commit
// by DID, collection, record key, operation, revision and CID, which every
// instance serves alike; account and identity events by DID, kind and the
// relay's sequence number) and skips
// them when they come again. A reconnect to the same instance resumes
// jetstreamResumeRewindUs before the cursor, a failover to another
// instance (whose clock stamps time_us differently) jetstreamRewindUs
// before it: only events not yet applied are applied (after a failover,
// late, which is the best a consumer can do). Instances whose time_us
// differ by up to jetstreamRewindUs either way are so followed exactly;
// past that, a failover to one behind misses events and one ahead applies
// some again. A new leader (a new Run,
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
//
// A Jetstream v2 server's seq (see Jetstream) is exact: a run that has one
// for the instance it connects to resumes right after it, without a
// rewind (a new run does when there is one URL); a run whose last event
// came from another instance resumes by time.
func (j *Jetstream) Run(ctx context.Context, cursor string, emit func(*event.Op, string) error) error {
	cur, seq, host, err := parseJetstreamCursor(cursor)
	if err != nil {
		return err
	}
	pos := &seqPos{}
	if seq > 0 && len(j.URLs) == 1 && host == urlHost(j.URLs[0]) {
		pos.seq, pos.url = seq, j.URLs[0]
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
		err := j.session(ctx, base, rewind, &cur, &floor, pos, seen, emit)
		var unreachable *unreachableError
		if !errors.As(err, &unreachable) {
			prev = base // it connected: the next attempt resumes from there
		}
		return base, err
	})
}

// seenEvents remembers the events a Jetstream run applied in the last
// seenWindowUs, by identity (eventKey), so a resumed connection skips
// them.
type seenEvents struct {
	keys  map[string]int64 // key -> time_us
	max   int64
	added int // since the last pruning
}

// seenPruneEvery: adds between two prunings of the keys past the window.
const seenPruneEvery = 4096

// seenWindowUs is how far behind the newest time_us applied the events
// applied are remembered: twice the failover rewind, since the instance
// failed over to resumes jetstreamRewindUs before the cursor on its own
// clock, which may run up to jetstreamRewindUs ahead of the last one's
// (its clock, or its lag behind the relay) and replay that much more.
// (One running as far behind resumes at the cursor itself.)
const seenWindowUs = 2 * jetstreamRewindUs

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
			if t < s.max-seenWindowUs {
				delete(s.keys, k)
			}
		}
	}
	return true
}

// floorAt is the floor of a run whose first position is t (see Run).
func (j *Jetstream) floorAt(t int64) int64 {
	if len(j.URLs) == 1 {
		return t
	}
	return max(0, t-jetstreamRewindUs)
}

// seqPos is the last Jetstream v2 seq a run applied and the URL of the
// server that numbered it (seq 0: none).
type seqPos struct {
	seq int64
	url string
}

// parseJetstreamCursor reads a committed Jetstream cursor: "<time_us>"
// (from a v1 server), "<seq>@<host>:<time_us>" (from a v2 server: its seq,
// and the host that numbered it), or "".
func parseJetstreamCursor(c string) (timeUS, seq int64, host string, err error) {
	i := strings.LastIndexByte(c, ':') // a host may have a port
	if i < 0 {
		timeUS, err = intCursor("jetstream", c)
		return timeUS, 0, "", err
	}
	s, t := c[:i], c[i+1:]
	n, h, ok := strings.Cut(s, "@")
	if !ok || h == "" {
		return 0, 0, "", fmt.Errorf("jetstream: bad cursor %q", c)
	}
	if seq, err = intCursor("jetstream", n); err != nil {
		return 0, 0, "", err
	}
	if timeUS, err = intCursor("jetstream", t); err != nil {
		return 0, 0, "", err
	}
	return timeUS, seq, h, nil
}

// jetstreamCursor is the cursor to commit after an event: time_us, and
// before it the server's seq and host when the server numbers its events.
func jetstreamCursor(timeUS, seq int64, host string) string {
	if seq > 0 {
		return strconv.FormatInt(seq, 10) + "@" + host + ":" + strconv.FormatInt(timeUS, 10)
	}
	return strconv.FormatInt(timeUS, 10)
}

// urlHost is the host[:port] of a URL ("" if it does not parse).
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

func (j *Jetstream) session(ctx context.Context, base string, rewind int64, cur, floor *int64, pos *seqPos, seen *seenEvents, emit func(*event.Op, string) error) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("compress", "true")
	if pos.seq > 0 && pos.url == base {
		// The server's own numbering: exactly after the last event
		// applied (a v2 server reads a cursor below 1e15 as a seq, and
		// delivers seqs in order).
		q.Set("cursor", strconv.FormatInt(pos.seq+1, 10))
	} else if *cur > 0 {
		from := max(0, *floor, *cur-rewind)
		q.Set("cursor", strconv.FormatInt(from, 10))
	}
	u.RawQuery = q.Encode()
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		return &unreachableError{err}
	}
	if j.Log != nil {
		j.Log.Info("jetstream connected", "url", base, "cursor", u.Query().Get("cursor"))
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var buf []byte
	for {
		conn.SetReadDeadline(time.Now().Add(readTimeout))
		mt, r, err := conn.NextReader()
		if err != nil {
			return err
		}
		// Uncompressed JSON of a 1 MiB record can be six times its size.
		msg, err := io.ReadAll(io.LimitReader(r, event.MaxJetstreamMessageSize+1))
		if err != nil {
			return err
		}
		if len(msg) > event.MaxJetstreamMessageSize {
			// Read past (the next NextReader skips its rest): asked
			// again from the same cursor, the instance would send it
			// again for ever. Which event it was is not known.
			j.skip("event_too_big", *cur, fmt.Errorf("a message past %d bytes: left out", event.MaxJetstreamMessageSize))
			continue
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
		switch {
		case op.Cursor > 0:
			pos.seq, pos.url = op.Cursor, base
		case pos.url != base:
			// Applied from another instance than the one whose seq pos
			// holds: that seq is behind what was applied, and a return
			// to that instance resumes by time instead.
			*pos = seqPos{}
		}
		var seq int64
		if pos.url == base {
			seq = pos.seq
		}
		if err := emit(&op, jetstreamCursor(*cur, seq, u.Host)); err != nil {
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
