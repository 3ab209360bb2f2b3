package ingest

// What the live sources (Jetstream, the firehose) share: reconnection with
// backoff, and the errors that tell a connection that ended from a
// consumer that failed.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/internal/backoff"
	"github.com/hashicorp/go-hclog"
)

// Limits of the live sources' connections.
const (
	// readTimeout: a connection that delivers nothing for this long is
	// considered dead and replaced.
	readTimeout = 60 * time.Second
	// wsMessageBytesMax bounds one websocket message.
	wsMessageBytesMax = event.MaxFrameSize
)

// retryBackoff: the waits between reconnections of a live source, between
// passes of a failed backfill, and between retries of the PLC follower.
var retryBackoff = backoff.Policy{Min: 500 * time.Millisecond, Max: 30 * time.Second}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error { return sleepOrUp(ctx, d, nil) }

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
	wait := time.Duration(0)
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
			wait = 0
		}
		wait = retryBackoff.Next(wait)
		if log != nil {
			var unreachable *unreachableError
			if errors.As(err, &unreachable) {
				log.Error("cannot reach "+name+"; queries go on answering from what is already indexed", "url", url, "error", unreachable.err, "retry_in", wait)
			} else {
				log.Warn(name+" connection ended; reconnecting", "url", url, "error", err, "backoff", wait)
			}
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
}

// unreachableError is a failure to connect at all (DNS, TCP, TLS, or the
// websocket handshake), as opposed to a connection that ended.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return "cannot connect: " + e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// emitError wraps an error of the consumer: it stops the source.
type emitError struct{ err error }

func (e *emitError) Error() string { return e.err.Error() }
