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

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
)

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

// Firehose is a live Source with metrics and status of its own.
var (
	_ Source         = (*Firehose)(nil)
	_ watched        = (*Firehose)(nil)
	_ statusReporter = (*Firehose)(nil)
)

func (f *Firehose) Name() string { return "firehose" }

// Live is true: with no committed cursor it starts at the relay's head.
func (f *Firehose) Live() bool { return true }

// Ingest follows the relay into w from cursor (seq) until ctx ends.
func (f *Firehose) Ingest(ctx context.Context, w *Writer, cursor string) error {
	return f.Run(ctx, cursor, emitTo(ctx, w, f.Name()))
}

// watch counts what it skips and reports its lag.
func (f *Firehose) watch(h watchHooks) { f.OnSkip, f.OnLag = h.skip, h.lag }

// report adds its lag and the time of the newest commit this node read
// (its revision's TID: the cursor, a seq, tells no time).
func (f *Firehose) report(st *SourceStatus, now time.Time) {
	if t, ok := f.last.get(); ok {
		st.setLag(now, t)
	}
	st.setLastEvent(&f.last)
}

// Run follows the relay from cursor ("<seq>@<host>", an older build's bare
// "<seq>", or "": from its head), calling emit for every operation with
// the cursor to resume after it, until ctx ends or emit fails; it
// reconnects with backoff. A relay numbers its own events: a cursor
// another relay numbered (the source's URL changed) is worth nothing here,
// and the source starts at this relay's head, saying so (what was published
// between the two is not read from the stream: a backfill or an account's
// next event brings it). So does a relay that keeps answering FutureCursor
// (it numbers from scratch: its state was reset) for futureCursorWait.
func (f *Firehose) Run(ctx context.Context, cursor string, emit func(*event.Op, string) error) error {
	cur, host, err := parseFirehoseCursor(cursor)
	if err != nil {
		return err
	}
	if here := urlHost(f.URL); cur > 0 && host != "" && host != here {
		f.headInstead("relay_changed", cur, fmt.Errorf("the committed cursor is relay %s's seq; %s numbers its own", host, here))
		cur = 0
	}
	var future time.Time // since when the relay answers FutureCursor
	return reconnect(ctx, f.Log, "firehose", func(int) (string, error) {
		err := f.session(ctx, &cur, emit)
		var se *event.StreamError
		switch {
		case !errors.As(err, &se) || se.Name != "FutureCursor":
			future = time.Time{}
		case future.IsZero():
			future = time.Now()
		case time.Since(future) >= futureCursorWait:
			f.headInstead("future_cursor", cur, err)
			cur, future = 0, time.Time{}
		}
		return f.URL, err
	})
}

// futureCursorWait is how long a relay may answer FutureCursor to a
// committed seq (one that lags behind another of its hosts catches up)
// before the source starts at its head instead.
var futureCursorWait = 5 * time.Minute

// headInstead counts and logs a start at the relay's head in place of the
// committed seq.
func (f *Firehose) headInstead(reason string, seq int64, err error) {
	if f.Log != nil {
		f.Log.Error("firehose: the committed cursor cannot be read from this relay: starting at its head; events between are not read from the stream (a backfill source fetches them, or an account's next event)",
			"url", f.URL, "committed_seq", seq, "reason", reason, "error", err)
	}
	if f.OnSkip != nil {
		f.OnSkip(reason)
	}
}

// parseFirehoseCursor reads a committed firehose cursor: "<seq>@<host>",
// an older build's "<seq>" (host ""), or "".
func parseFirehoseCursor(c string) (int64, string, error) {
	n, host, ok := strings.Cut(c, "@")
	if ok && host == "" {
		return 0, "", fmt.Errorf("firehose: bad cursor %q", c)
	}
	seq, err := intCursor("firehose", n)
	return seq, host, err
}

// firehoseCursor is the cursor to commit after a relay's event seq.
func firehoseCursor(seq int64, host string) string {
	return strconv.FormatInt(seq, 10) + "@" + host
}

func (f *Firehose) session(ctx context.Context, cur *int64, emit func(*event.Op, string) error) error {
	u, err := url.Parse(f.URL)
	if err != nil {
		return err
	}
	host := u.Host
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
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var ops []event.Op
	for {
		conn.SetReadDeadline(time.Now().Add(readTimeout))
		_, r, err := conn.NextReader()
		if err != nil {
			return err
		}
		msg, err := io.ReadAll(io.LimitReader(r, wsMessageBytesMax+1))
		if err != nil {
			return err
		}
		if len(msg) > wsMessageBytesMax {
			// Read past it (the next NextReader skips its rest), its
			// repository fetched whole; asked again from the same
			// cursor, the relay would send it again for ever.
			op, err := event.OversizeFrameOp(msg)
			if err != nil {
				f.skip("frame_too_big", *cur, fmt.Errorf("a frame past %d bytes: %w: reconnecting", wsMessageBytesMax, err))
				return err
			}
			f.skip("frame_too_big", *cur, fmt.Errorf("the frame of seq %d (repository %s) is past %d bytes: left out, the repository to be fetched again", op.Seq, op.DID, wsMessageBytesMax))
			if err := emit(&op, firehoseCursor(max(op.Seq, *cur), host)); err != nil {
				return &emitError{err}
			}
			*cur = max(op.Seq, *cur)
			continue
		}
		ops = ops[:0]
		err = event.DecodeFrame(msg, func(o *event.Op) error { ops = append(ops, *o); return nil })
		if err != nil {
			var se *event.StreamError
			if errors.As(err, &se) {
				return err // the relay closes after an error frame: reconnect
			}
			var info *event.Info
			if errors.As(err, &info) {
				if info.Name == "OutdatedCursor" {
					// The relay no longer holds the events after the
					// cursor: what came between is lost to this stream.
					f.skip("outdated_cursor", *cur, err)
				} else {
					f.Log.Info("relay info", "name", info.Name, "message", info.Message, "position", "after seq "+strconv.FormatInt(*cur, 10))
				}
				continue
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
			if err := emit(&ops[i], firehoseCursor(max(c, *cur), host)); err != nil {
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
