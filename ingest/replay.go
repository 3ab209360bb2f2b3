package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/hashicorp/go-hclog"
)

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

// Replay is a Source with metrics of its own.
var (
	_ Source  = (*Replay)(nil)
	_ watched = (*Replay)(nil)
)

func (r *Replay) Name() string { return "replay:" + r.Path }

// Live is false: a replay is a file, read from its start.
func (r *Replay) Live() bool { return false }

// Ingest reads the capture into w from cursor; nil once it is read to its
// end (its cursor then EOFCursor of the count).
func (r *Replay) Ingest(ctx context.Context, w *Writer, cursor string) error {
	return r.Run(ctx, cursor, emitTo(ctx, w, r.Name()))
}

// watch counts what it skips, and its events behind from its file.
func (r *Replay) watch(h watchHooks) {
	r.OnSkip = h.skip
	h.replay(r.Path)
}

func (r *Replay) skip(pos int, reason string, err error) {
	r.skipLog.log(r.Log, r.Name(), reason, "position", pos, "error", err)
	if r.OnSkip != nil {
		r.OnSkip(reason)
	}
}

// Run reads from cursor ("" = the beginning) and calls emit for every
// operation with the cursor to resume after it. At the end of the file it
// calls emit with a nil op and EOFCursor of the count, and returns nil; a
// cursor already at the end reads nothing.
func (r *Replay) Run(ctx context.Context, cursor string, emit func(op *event.Op, cursor string) error) error {
	start := 0
	if cursor != "" {
		pos, eof := ParseEOF(cursor)
		n, err := strconv.Atoi(pos)
		if err != nil || n < 0 {
			return fmt.Errorf("replay %s: bad cursor %q", r.Path, cursor)
		}
		if eof {
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
	br := bufio.NewReaderSize(f, 64<<10)
	pos := 0
	for {
		line, err := readLine(br, event.MaxJetstreamMessageSize)
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof && !errors.Is(err, errLineTooLong) {
			return err // the file could not be read: not its end
		}
		if eof && len(line) == 0 {
			break
		}
		pos++
		if pos > start {
			if err := ctx.Err(); err != nil {
				return err
			}
			switch {
			case errors.Is(err, errLineTooLong):
				// Counted, and read past: the lines after it are read.
				r.skip(pos, "line_too_long", err)
			case len(bytes.TrimSpace(line)) > 0:
				op, derr := event.DecodeJetstream(line)
				if derr != nil {
					r.skip(pos, badEventReason(derr), derr)
				} else if err := emit(&op, strconv.Itoa(pos)); err != nil {
					return err
				}
			}
		}
		if eof {
			break
		}
	}
	return emit(nil, EOFCursor(strconv.Itoa(pos)))
}

func (r *Replay) runFrames(ctx context.Context, f io.Reader, start int, emit func(*event.Op, string) error) error {
	pos := 0
	err := event.ReadFramesPast(bufio.NewReader(f), func(frame []byte) error {
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
			var info *event.Info
			switch {
			case errors.As(err, &info): // a relay's notice, captured: nothing to index
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
	}, func(n uint32) error {
		// Counted, and read past: the frames after it are read.
		pos++
		if pos > start {
			r.skip(pos, "frame_too_big", fmt.Errorf("a frame of %d bytes, past %d", n, event.MaxFrameSize))
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			return err // the file could not be read: not its end
		}
		// A truncated last frame (a capture cut short) ends it: count it.
		r.skip(pos+1, "truncated", err)
	}
	return emit(nil, EOFCursor(strconv.Itoa(pos)))
}
