package ingest

import (
	"strings"
	"sync/atomic"
	"time"
)

// SourceStatus is one ingest source as `eddy-ctl status` shows it.
type SourceStatus struct {
	Name string `json:"name"`
	// Kind is jetstream, firehose, replay or backfill.
	Kind string `json:"kind"`
	// Cursor is the committed cursor: what a new leader resumes from.
	Cursor string `json:"cursor"`
	// Done: a replay read to its end, or a backfill through its last
	// page, and published.
	Done bool `json:"done"`
	// LagSeconds is how far behind now the source is: for Jetstream the
	// committed cursor's time_us; for the firehose the time of the last
	// commit this node read (its revision's TID), so only the leader, which
	// runs the sources, knows it. Absent when unknown.
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
	// LastEvent is the time of the newest event this node read (leader
	// only), RFC 3339.
	LastEvent string `json:"last_event,omitempty"`
	// Backfill counts a backfill's repositories (leader only): listed,
	// done, gone, failed (waiting for a retry), pending (in flight).
	Backfill map[string]int `json:"backfill,omitempty"`
	// Failed lists the first repositories that failed every try, with
	// their errors (leader only).
	Failed []RepoState `json:"failed,omitempty"`
}

// lastEvent remembers the time of the newest event a live source read.
type lastEvent struct{ us atomic.Int64 }

func (l *lastEvent) see(t time.Time) {
	us := t.UnixMicro()
	for {
		old := l.us.Load()
		if us <= old || l.us.CompareAndSwap(old, us) {
			return
		}
	}
}

func (l *lastEvent) get() (time.Time, bool) {
	us := l.us.Load()
	return time.UnixMicro(us), us > 0
}

// statusReporter is a source that adds to its status what this node saw
// of it (its lag, its newest event, a backfill's progress); SourcesStatus
// asks each source that implements it.
type statusReporter interface {
	report(st *SourceStatus, now time.Time)
}

// setLag sets the lag at now of a source whose newest event is of time t.
func (st *SourceStatus) setLag(now, t time.Time) {
	d := max(0, now.Sub(t)).Seconds()
	st.LagSeconds = &d
}

// setLastEvent sets the time of the newest event read, if any.
func (st *SourceStatus) setLastEvent(l *lastEvent) {
	if t, ok := l.get(); ok {
		st.LastEvent = t.UTC().Format(time.RFC3339Nano)
	}
}

// SourcesStatus reports every source: cursor (from the replicated state,
// through cursor), whether it is done, its lag at now, and what this node
// saw of it if it runs it.
func SourcesStatus(sources []Source, cursor func(name string) string, now time.Time) []SourceStatus {
	out := make([]SourceStatus, 0, len(sources))
	for _, s := range sources {
		st := SourceStatus{Name: s.Name(), Cursor: cursor(s.Name())}
		st.Kind, _, _ = strings.Cut(st.Name, ":")
		st.Done = Done(st.Cursor)
		if r, ok := s.(statusReporter); ok {
			r.report(&st, now)
		}
		out = append(out, st)
	}
	return out
}
