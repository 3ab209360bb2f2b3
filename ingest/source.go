package ingest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/hashicorp/go-hclog"
)

// Source is one input stream of operations.
type Source interface {
	// Name identifies the source; its cursor is kept under this name.
	Name() string
	// Run reads from cursor ("" = the beginning) and calls emit for every
	// operation with the cursor to resume after it. It returns nil when
	// the source has ended (a replay read to its end: it then calls emit
	// with a nil op and a cursor for which Done is true), or the error
	// that stopped it; a live source runs until ctx is done.
	Run(ctx context.Context, cursor string, emit func(op *event.Op, cursor string) error) error
}

// badEventReason is the skip reason of a Jetstream event that did not
// decode: unknown_kind for a well-formed event of a kind this version does
// not know, bad_event for anything else.
func badEventReason(err error) string {
	if errors.Is(err, event.ErrUnknownKind) {
		return "unknown_kind"
	}
	return "bad_event"
}

// Done reports whether a cursor marks a replay read to its end.
func Done(cursor string) bool { return strings.HasPrefix(cursor, "eof:") }

// ParseSource turns a source URL into a Source:
//
//	replay+file:///path/capture.jsonl   Jetstream events, one per line
//	replay+file:///path/capture.bin     firehose frames, [u32 LE length][frame]
//	jetstream+wss://host/subscribe      (several URLs, comma-separated: failover)
//	firehose+wss://host                 com.atproto.sync.subscribeRepos
//	backfill+https://relay?plc=https://plc.directory   every repository (listRepos, getRepo);
//	    also &concurrency=N (repositories at once, default 16), &per_host=N
//	    (at once per PDS host, default 4), &rate=R (fetches started a second
//	    per PDS host, default unbounded)
func ParseSource(raw string, log hclog.Logger) (Source, error) {
	kind, rest, ok := strings.Cut(raw, "+")
	if !ok {
		return nil, fmt.Errorf("source %q: want kind+url (replay+file://, jetstream+wss://, firehose+wss://)", raw)
	}
	switch kind {
	case "replay":
		u, err := url.Parse(rest)
		if err != nil || u.Scheme != "file" || u.Path == "" {
			return nil, fmt.Errorf("source %q: a replay reads a file:///path", raw)
		}
		return &Replay{Path: u.Path, Log: log}, nil
	case "jetstream":
		return NewJetstream(strings.Split(rest, ","), log)
	case "backfill":
		u, err := url.Parse(rest)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("source %q: a backfill reads a relay at http(s)://host[?plc=http(s)://plc-directory]", raw)
		}
		q := u.Query()
		bf := &Backfill{PLC: q.Get("plc"), DIDWeb: q.Get("didweb"), Log: log}
		for _, p := range []struct {
			name string
			dst  *int
		}{{"concurrency", &bf.Concurrency}, {"per_host", &bf.PerHost}} {
			if v := q.Get(p.name); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > 1024 {
					return nil, fmt.Errorf("source %q: %s must be an integer from 1 to 1024", raw, p.name)
				}
				*p.dst = n
			}
		}
		if v := q.Get("rate"); v != "" {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || !(r > 0) || r > 1e6 {
				return nil, fmt.Errorf("source %q: rate (repository fetches a second per PDS host) must be a positive number", raw)
			}
			bf.PerHostRate = r
		}
		u.RawQuery = ""
		bf.Relay = u.String()
		return bf, nil
	case "firehose":
		return NewFirehose(rest, log)
	}
	return nil, fmt.Errorf("source %q: unknown kind %q", raw, kind)
}

// Replay reads a recorded capture: a .jsonl file of Jetstream events, or
// any other file of firehose frames. Its cursor is the number of lines or
// frames consumed.
type Replay struct {
	Path string
	Log  hclog.Logger
	// OnSkip, if set, is told about every input it cannot decode.
	OnSkip func(reason string)
	// skipLog rate-limits the log lines of skipped inputs.
	skipLog skipLogger
}

func (r *Replay) Name() string { return "replay:" + r.Path }

func (r *Replay) skip(pos int, reason string, err error) {
	r.skipLog.log(r.Log, r.Name(), reason, "position", pos, "error", err)
	if r.OnSkip != nil {
		r.OnSkip(reason)
	}
}

func (r *Replay) Run(ctx context.Context, cursor string, emit func(op *event.Op, cursor string) error) error {
	start := 0
	if cursor != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(cursor, "eof:"))
		if err != nil || n < 0 {
			return fmt.Errorf("replay %s: bad cursor %q", r.Path, cursor)
		}
		if Done(cursor) {
			return nil // already read to its end and published
		}
		start = n
	}
	f, err := os.Open(r.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if strings.HasSuffix(r.Path, ".jsonl") {
		return r.runJSONL(ctx, f, start, emit)
	}
	return r.runFrames(ctx, f, start, emit)
}

func (r *Replay) runJSONL(ctx context.Context, f io.Reader, start int, emit func(*event.Op, string) error) error {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), event.MaxJetstreamMessageSize)
	pos := 0
	for sc.Scan() {
		pos++
		if pos <= start {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(sc.Bytes()) == 0 {
			continue
		}
		op, err := event.DecodeJetstream(sc.Bytes())
		if err != nil {
			r.skip(pos, badEventReason(err), err)
			continue
		}
		if err := emit(&op, strconv.Itoa(pos)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		// A line past the limit: count it and end here rather than loop.
		r.skip(pos+1, "line_too_long", err)
	}
	return emit(nil, "eof:"+strconv.Itoa(pos))
}

func (r *Replay) runFrames(ctx context.Context, f io.Reader, start int, emit func(*event.Op, string) error) error {
	pos := 0
	err := event.ReadFrames(bufio.NewReader(f), func(frame []byte) error {
		pos++
		if pos <= start {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Ops of one frame carry the frame's own position until its last,
		// so a flush inside a frame replays the whole frame (idempotent).
		var ops []event.Op
		err := event.DecodeFrame(frame, func(o *event.Op) error { ops = append(ops, *o); return nil })
		if err != nil {
			var se *event.StreamError
			switch {
			case errors.As(err, &se):
				r.skip(pos, "stream_error", err)
			case errors.Is(err, event.ErrUnknownType):
				r.skip(pos, "unknown_type", err)
			default:
				r.skip(pos, "bad_frame", err)
			}
			return nil
		}
		for i := range ops {
			c := strconv.Itoa(pos - 1)
			if i == len(ops)-1 {
				c = strconv.Itoa(pos)
			}
			if err := emit(&ops[i], c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		// A truncated or oversized frame ends the capture: count it.
		r.skip(pos+1, "truncated", err)
	}
	return emit(nil, "eof:"+strconv.Itoa(pos))
}
