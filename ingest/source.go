package ingest

// The sources: what the runner needs of one is its Source interface
// (runner.go); each kind lives in its own file (jetstream.go, firehose.go,
// replay.go, backfill.go) and ParseSource, here, turns a --source value
// into one. What they share: the end-of-source cursor, and the emit
// callback through which the stream sources hand operations to the writer.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/hashicorp/go-hclog"
)

// eofPrefix starts the cursor of a source read to its end.
const eofPrefix = "eof:"

// EOFCursor is the cursor of a source read to its end at position pos (a
// replay's count of lines or frames, a backfill's last listRepos cursor):
// "eof:<pos>". Done is true of it; a new leader resumes a source whose
// committed cursor it is as finished.
func EOFCursor(pos string) string { return eofPrefix + pos }

// ParseEOF returns the position of an end-of-source cursor (EOFCursor) and
// true, or the cursor itself and false for any other cursor.
func ParseEOF(cursor string) (pos string, ok bool) { return strings.CutPrefix(cursor, eofPrefix) }

// Done reports whether a cursor marks a source read to its end (a replay
// read through its last line or frame, a backfill through its last page).
func Done(cursor string) bool {
	_, ok := ParseEOF(cursor)
	return ok
}

// emitTo is the callback through which a stream source (Jetstream,
// Firehose, Replay: their Run) hands its operations to w: each one is
// applied with the cursor to resume after it; a nil operation (a replay's
// end) records its cursor alone.
func emitTo(ctx context.Context, w *Writer, source string) func(op *event.Op, cursor string) error {
	return func(op *event.Op, cursor string) error {
		if op == nil {
			w.SetCursor(source, cursor)
			return nil
		}
		return w.Apply(ctx, source, cursor, op)
	}
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

// ParseSource turns a source URL into a Source:
//
//	replay+file:///path/capture.jsonl   Jetstream events, one per line
//	replay+file:///path/capture.bin     firehose frames, [u32 LE length][frame]
//	jetstream+wss://host/subscribe      (several URLs, comma-separated: failover)
//	firehose+wss://host                 com.atproto.sync.subscribeRepos
//	jetstream2+https://host             a Jetstream v2 server: its archive, then its live stream
//	    (&api_key_file=/path; else $EDDY_JETSTREAM_API_KEY; &compact=false: no
//	    full compaction when an archive read from its start reaches its end)
//	backfill+https://relay?plc=https://plc.directory   every repository (listRepos, getRepo);
//	    also &concurrency=N (repositories at once, default 16), &per_host=N
//	    (at once per PDS host, default 4), &rate=R (fetches started a second
//	    per PDS host, default unbounded), &memory_mb=N (the memory the
//	    repositories in flight share, default 512), &compact=false (no full compaction
//	    when the backfill first reaches its end), &private=true|false
//	    (whether PDSes and did:web hosts may be private addresses; by
//	    default only when the relay or PLC directory is on one)
func ParseSource(raw string, log hclog.Logger) (Source, error) {
	kind, rest, ok := strings.Cut(raw, "+")
	if !ok {
		return nil, fmt.Errorf("source %q: want kind+url (replay+file://, jetstream+wss://, jetstream2+https://, firehose+wss://, backfill+https://)", raw)
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
		for name := range q {
			switch name {
			case "plc", "didweb", "concurrency", "per_host", "rate", "memory_mb", "resync_only", "compact", "private":
			default: // a misspelt resync_only would crawl the whole network
				return nil, fmt.Errorf("source %q: unknown parameter %q (plc, didweb, concurrency, per_host, rate, memory_mb, resync_only, compact, private)", raw, name)
			}
		}
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
		resyncOnly, err := boolParam(q, "resync_only", false)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", raw, err)
		}
		compact, err := boolParam(q, "compact", true)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", raw, err)
		}
		bf.ResyncOnly, bf.NoCompaction = resyncOnly, !compact
		if q.Has("private") {
			private, err := boolParam(q, "private", false)
			if err != nil {
				return nil, fmt.Errorf("source %q: %w", raw, err)
			}
			bf.Private = &private
		}
		if v := q.Get("memory_mb"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 16 || n > 1<<20 {
				return nil, fmt.Errorf("source %q: memory_mb (MiB the repositories in flight share) must be an integer from 16 to 1048576", raw)
			}
			bf.Memory = int64(n) << 20
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
	case "jetstream2":
		return NewJetstream2(rest, log)
	}
	return nil, fmt.Errorf("source %q: unknown kind %q", raw, kind)
}

// boolParam reads a true/false (or 1/0) query parameter; dflt when absent.
func boolParam(q url.Values, name string, dflt bool) (bool, error) {
	switch q.Get(name) {
	case "":
		return dflt, nil
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%s must be true or false", name)
}
