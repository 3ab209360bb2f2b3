package ingest

import (
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/hashicorp/go-hclog"
)

// skipLogEvery bounds the log lines of skipped inputs: at most one line per
// source and reason in this interval; the lines in between are counted and
// the next line says how many were not logged (the metric counts them all).
const skipLogEvery = time.Second

// skipLogger writes the "skipped bad input" lines, rate-limited per source
// and reason so a stream of garbage cannot flood the log.
type skipLogger struct {
	mu   sync.Mutex
	last map[[2]string]skipLogState
	now  func() time.Time // tests
}

type skipLogState struct {
	at         time.Time
	suppressed int
}

func (s *skipLogger) log(log hclog.Logger, source, reason string, kv ...any) {
	if log == nil {
		return
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	t := now()
	k := [2]string{source, reason}
	s.mu.Lock()
	if s.last == nil {
		s.last = map[[2]string]skipLogState{}
	}
	st, seen := s.last[k]
	if seen && t.Sub(st.at) < skipLogEvery {
		st.suppressed++
		s.last[k] = st
		s.mu.Unlock()
		return
	}
	s.last[k] = skipLogState{at: t}
	s.mu.Unlock()
	args := append([]any{"source", source, "reason", reason}, kv...)
	if st.suppressed > 0 {
		args = append(args, "not_logged_since_last", st.suppressed)
	}
	log.Warn("skipped bad input", args...)
}

// skipOp counts and logs a bad operation, naming where it was in its
// source (the cursor: time_us for Jetstream, seq for the firehose) and the
// record it was about.
func (w *Writer) skipOp(source, reason string, op *event.Op, err error) {
	w.metrics.Skipped.WithLabelValues(source, reason).Inc()
	w.skipLog.log(w.log, source, reason, "position", op.Seq, "did", op.DID, "collection", op.Collection, "rkey", op.RKey, "error", err)
}

// countLost counts and logs the links a record loses (dropped by the
// extractor, or skipped for a path that cannot be encoded) once the
// record's apply can no longer fail, not before the read of the names
// tree that may fail it. (That failure stops the writer; the next one
// applies again everything since the last flush, and counts it again:
// the skip counters count applies, like the links counter.)
func (w *Writer) countLost(source string, op *event.Op, st extract.Stats, badPaths []error) {
	if st.TooDeep+st.TooManyLinks+st.PathTooLong+st.TargetTooLong+st.Invalid > 0 {
		w.metrics.countDrops(source, st)
		w.skipLog.log(w.log, source, "links_dropped", "position", op.Seq, "did", op.DID, "collection", op.Collection, "rkey", op.RKey,
			"too_deep", st.TooDeep, "too_many", st.TooManyLinks, "path_too_long", st.PathTooLong, "target_too_long", st.TargetTooLong, "invalid", st.Invalid)
	}
	for _, err := range badPaths {
		w.skipOp(source, "bad_path", op, err)
	}
}
