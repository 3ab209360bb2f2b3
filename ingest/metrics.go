package ingest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the write path's Prometheus metrics.
//
// Lag is measured per source. Seconds behind: for a live stream, the time
// between the newest consumed event's own time (Jetstream's time_us, a
// firehose commit's revision TID) and now. Events behind: for a replay,
// exactly the events of the file after the committed cursor; for a live
// stream, an estimate: the seconds behind times the stream's recent rate
// of events per second of event time (the stream offers no count of what
// it holds past the consumer).
type Metrics struct {
	Events  *prometheus.CounterVec // by source, kind
	Links   *prometheus.CounterVec // by source
	Skipped *prometheus.CounterVec // by source, reason
	// BackfillCrawled: repositories a backfill's crawl wrote or revoked,
	// by source (resyncs not counted: they go on while a crawl stalls).
	BackfillCrawled *prometheus.CounterVec
	RepoSplits      prometheus.Counter   // repositories written whole across two flushes (the memtables filled while they were written)
	OutlineEntries  prometheus.Counter   // entries of outlines alone, published ahead of their flush (publishOutlines)
	FlushSeconds    prometheus.Histogram // a whole flush: tables written and the entry committed
	PublishSeconds  prometheus.Histogram // the flush entry's Raft commit alone
	Generation      prometheus.Gauge
	lagEvents       *lagEventsCollector // seconds and events behind the stream head, by source
	// The leader's garbage collector (gc.go); the pending list itself is
	// replicated state, exported by every node (eddy_gc_pending_tables).
	GCDeleted        *prometheus.CounterVec // tables deleted, by reason: replaced, orphan
	GCDeletedBytes   *prometheus.CounterVec // their bytes, by reason
	GCBlockedSeconds prometheus.Gauge       // how long a due deletion has waited for a member (0: none)
	GCOrphans        prometheus.Gauge       // unreferenced tables seen, waiting out the grace
	// The leader's backups of the replicated state in the bucket
	// (backup.go): written, by result, and the newest one's generation.
	StateBackups          *prometheus.CounterVec
	StateBackupGeneration prometheus.Gauge

	// Merges the leader's compaction loop ended, by tree and result: done
	// (handed to the next flush to publish) or failed (an input or the
	// store could not be read or written; tried again at the next look).
	Compactions *prometheus.CounterVec
	// Tables dropped from the index at an operator's request (droptable.go),
	// by tree, and the links they held: counted at the leader's first look
	// after the flush that drops them.
	TablesDropped      *prometheus.CounterVec
	TablesDroppedLinks *prometheus.CounterVec

	// Resyncs held back (resync.go): one whose repository, fetched, is
	// ahead of the stream that asked for it waits for the stream
	// (deferred); one deferred or queued whose account was deactivated,
	// taken down or deleted since is dropped (cancelled).
	ResyncsDeferred  prometheus.Counter
	ResyncsCancelled prometheus.Counter
	AccountsKept     prometheus.Counter
}

// NewMetrics makes unregistered metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		Events:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_ingest_events_total", Help: "Operations consumed, by source and kind."}, []string{"source", "kind"}),
		Links:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_ingest_links_total", Help: "Links extracted, by source."}, []string{"source"}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_ingest_skipped_total", Help: "Inputs or links skipped as bad, by source and reason."}, []string{"source", "reason"}),
		BackfillCrawled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_backfill_crawled_total",
			Help: "Repositories a backfill's crawl wrote or revoked, by source, on the leader (resyncs not counted)."}, []string{"source"}),
		OutlineEntries: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_ingest_outline_entries_total", Help: "Raft entries of new paths and collections alone, published ahead of their flush because one entry could not carry them (records of many made-up field names)."}),
		RepoSplits:     prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_ingest_repo_splits_total", Help: "Repositories written whole (a backfill or a resync) that went out in two flushes because the memtables filled while they were written (every one being written then): answers from the generation between miss their links."}),
		FlushSeconds:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eddy_ingest_flush_seconds", Help: "Time of a whole flush: tables written to the store and the entry committed.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
		PublishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eddy_ingest_publish_seconds", Help: "Time to commit a flush's entry through Raft (the publication alone).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		Generation:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_ingest_published_generation", Help: "Manifest generation of the last publication by this node."}),
		lagEvents:      newLagEvents(),
		GCDeleted:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_gc_deleted_total", Help: "Tables the leader deleted from the store, by reason: replaced (left the manifest through a compaction) or orphan (never in a manifest: a deposed leader's upload)."}, []string{"reason"}),
		GCDeletedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_gc_deleted_bytes_total", Help: "Bytes (data and meta) of the tables the leader deleted, by reason."}, []string{"reason"}),
		GCBlockedSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_gc_blocked_seconds",
			Help: "How long the deletion of a garbage table past its grace has been held back by a member that is down, unreachable or serves an older generation (0: none; the leader logs which)."}),
		GCOrphans: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_gc_orphan_tables", Help: "Table objects no manifest references that the leader's sweep saw and waits a grace period to delete."}),
		StateBackups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_state_backups_total",
			Help: "Backups of the replicated state (manifest, outlines, cursors) the leader put in the bucket under state/, by result: ok or failed (logged; replaced tables are not deleted until one succeeds)."}, []string{"result"}),
		StateBackupGeneration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_state_backup_generation",
			Help: "Manifest generation of the newest state backup this leader put in the bucket (0: none yet, or not the leader)."}),
		Compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_compactions_total",
			Help: "Merges (and full compactions) the leader ended, by tree and result: done, or failed (logged with its error; tried again at the compaction loop's next look)."}, []string{"tree", "result"}),
		TablesDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_tables_dropped_total",
			Help: "Damaged or lost tables dropped from the index at an operator's request (eddy-ctl tables drop), by tree: their links are gone from answers until a crawl brings them back."}, []string{"tree"}),
		TablesDroppedLinks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_tables_dropped_records_total",
			Help: "Records (links) the dropped tables held, by tree."}, []string{"tree"}),

		ResyncsDeferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_ingest_resyncs_deferred_total",
			Help: "Resyncs held back because the repository fetched was ahead of the stream that asked for it (a stream catching up): each waits until the stream reaches the repository's revision, then fetches it again."}),
		ResyncsCancelled: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_ingest_resyncs_cancelled_total",
			Help: "Resyncs deferred or queued that were dropped because their account was deactivated, taken down or deleted after the event that asked for them (a later reactivation asks again)."}),
		AccountsKept: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_ingest_accounts_inactive_kept_total",
			Help: "Account events marking an account inactive whose links were kept: a status other than deleted, takendown, suspended or deactivated (a relay's desynchronized or throttled), or none."}),
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Events, m.Links, m.Skipped, m.BackfillCrawled, m.RepoSplits, m.OutlineEntries, m.FlushSeconds, m.PublishSeconds, m.Generation, m.lagEvents,
		m.GCDeleted, m.GCDeletedBytes, m.GCBlockedSeconds, m.GCOrphans, m.StateBackups, m.StateBackupGeneration, m.Compactions, m.TablesDropped, m.TablesDroppedLinks, m.ResyncsDeferred, m.ResyncsCancelled, m.AccountsKept} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	// Every series an alert counts the increase of starts at 0: a counter
	// born at its first event has no increase over it, so an alert on
	// increase() missed the first failure and fired only on a second.
	for _, res := range []string{"ok", "failed"} {
		m.StateBackups.WithLabelValues(res)
	}
	for _, t := range lsm.Trees {
		for _, res := range []string{"done", "failed"} {
			m.Compactions.WithLabelValues(string(t), res)
		}
		m.TablesDropped.WithLabelValues(string(t))
		m.TablesDroppedLinks.WithLabelValues(string(t))
	}
	for _, reason := range []string{"replaced", "orphan"} {
		m.GCDeleted.WithLabelValues(reason)
		m.GCDeletedBytes.WithLabelValues(reason)
	}
	return nil
}

// watched is a source whose callbacks Metrics.Watch connects: it hands
// them to the hooks it reports through.
type watched interface {
	watch(h watchHooks)
}

// watchHooks are what a source reports to the metrics.
type watchHooks struct {
	skip    func(reason string)   // an input it could not decode (by reason)
	crawled func()                // a backfill: a repository its crawl wrote or revoked
	lag     func(d time.Duration) // a live stream: its newest event is d behind now
	replay  func(path string)     // a replay: its events behind are its file's events after the committed cursor
}

// Watch connects a source's callbacks to the metrics: inputs it cannot
// decode count as skipped by reason, a live stream reports its lag, and a
// replay's events behind are its file's events after the committed cursor
// (committed returns a source's committed cursor; counting the file runs in
// the background, once). Call it before the source runs.
func (m *Metrics) Watch(s Source, committed func(name string) string) {
	ws, ok := s.(watched)
	if !ok {
		return
	}
	name := s.Name()
	switch s.(type) {
	case *Firehose, *Jetstream, *Jetstream2:
		m.lagEvents.addLive(name)
	case *Backfill:
		m.lagEvents.addBackfill(name, func() string { return committed(name) })
		m.BackfillCrawled.WithLabelValues(name) // 0 until the first repository
	}
	ws.watch(watchHooks{
		skip:    func(reason string) { m.Skipped.WithLabelValues(name, reason).Inc() },
		crawled: func() { m.BackfillCrawled.WithLabelValues(name).Inc() },
		lag:     func(d time.Duration) { m.observeLag(name, time.Now().Add(-d)) },
		replay: func(path string) {
			m.lagEvents.addReplay(name, path, func() string { return committed(name) })
		},
	})
}

// observeLag notes a live source's newest event, of time at.
func (m *Metrics) observeLag(source string, at time.Time) {
	m.lagEvents.observe(source, at)
}

// termStarted and termEnded bracket a term of the write path on this
// node: only then do its live sources have a lag here, worked out when
// the metrics are read (so it grows while no event comes), from the
// newest event of the term, or from the term's start before its first.
// termStarted and termEnded bound a write path's run; leadStarted and
// leadEnded a leadership (Supervisor), which keeps the lag series through
// the write path's restarts: while it waits out a bucket outage the lag
// grows from the last event read, where it used to vanish with the run.
func (m *Metrics) termStarted(now time.Time) { m.lagEvents.term(now, false) }
func (m *Metrics) termEnded()                { m.lagEvents.term(time.Time{}, false) }
func (m *Metrics) leadStarted(now time.Time) { m.lagEvents.term(now, true) }
func (m *Metrics) leadEnded()                { m.lagEvents.term(time.Time{}, true) }

func (m *Metrics) countDrops(source string, st extract.Stats) {
	for reason, n := range map[string]int{
		"link_too_deep": st.TooDeep, "too_many_links": st.TooManyLinks, "path_too_long": st.PathTooLong,
		"target_too_long": st.TargetTooLong, "invalid_link": st.Invalid,
	} {
		if n > 0 {
			m.Skipped.WithLabelValues(source, reason).Add(float64(n))
		}
	}
}

// rateWindow: the live-stream rate estimate uses the time span of this
// many most recent events.
const rateWindow = 256

type liveLag struct {
	times [rateWindow]time.Time // event times, a ring
	n     int                   // events observed this term
}

// seconds is how far behind now the source is: from its newest event of
// the term, or from the term's start before any came.
func (l *liveLag) seconds(now, start time.Time) float64 {
	from := start
	if l.n > 0 {
		from = l.times[(l.n-1)%rateWindow]
	}
	return max(0, now.Sub(from).Seconds())
}

// behind estimates the events between the newest consumed one and now:
// its lag times the recent rate of events per second of event time.
func (l *liveLag) behind(lag float64) float64 {
	if l.n < 2 || lag <= 0 {
		return 0
	}
	k := min(l.n, rateWindow)
	newest := l.times[(l.n-1)%rateWindow]
	oldest := l.times[(l.n-k)%rateWindow]
	span := newest.Sub(oldest).Seconds()
	if span <= 0 {
		return 0
	}
	return lag * float64(k-1) / span
}

type replayLag struct {
	name, path string
	committed  func() string
	mu         sync.Mutex
	total      int // events (lines or frames) in the file; -1 while counting or unknown
}

type lagEventsCollector struct {
	desc, seconds *prometheus.Desc
	backfillDone  *prometheus.Desc
	backfills     []backfillCrawl
	mu            sync.Mutex
	start         time.Time // the write path's term (or leadership) on this node began; zero: none
	leading       bool      // a leadership holds start: a run's start and end leave it
	live          map[string]*liveLag
	reps          []*replayLag
}

// backfillCrawl is a backfill source, whose committed cursor says whether
// its crawl reached the listing's end.
type backfillCrawl struct {
	name      string
	committed func() string
}

func newLagEvents() *lagEventsCollector {
	return &lagEventsCollector{
		backfillDone: prometheus.NewDesc("eddy_backfill_done", "1 once a backfill source's crawl reached the end of the relay's listing (its committed cursor, on every node), 0 while it crawls: a backfill has no lag; alert on it staying 0 while its repositories (eddy_ingest_events_total, kind repo) stop coming.", []string{"source"}, nil),
		desc:         prometheus.NewDesc("eddy_ingest_lag_events", "Events behind the stream head, by source: exact for a replay (events after the committed cursor), estimated for a live stream (seconds behind times the recent event rate).", []string{"source"}, nil),
		seconds: prometheus.NewDesc("eddy_ingest_lag_seconds", "Seconds between the newest consumed event's own time and now, by live source, on the node that runs the write path (before the term's first event: since the term began).",
			[]string{"source"}, nil),
		live: map[string]*liveLag{},
	}
}

// addLive names a live source (firehose, Jetstream).
func (c *lagEventsCollector) addLive(source string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live[source] == nil {
		c.live[source] = &liveLag{}
	}
}

// term starts a term at start, or ends it (zero); either forgets the
// events seen.
func (c *lagEventsCollector) term(start time.Time, lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !lead && c.leading {
		return
	}
	if lead {
		c.leading = !start.IsZero()
	}
	c.start = start
	for _, l := range c.live {
		l.n = 0
	}
}

func (c *lagEventsCollector) observe(source string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.live[source]
	if l == nil {
		l = &liveLag{}
		c.live[source] = l
	}
	l.times[l.n%rateWindow] = at
	l.n++
}

// addBackfill names a backfill source and its committed cursor.
func (c *lagEventsCollector) addBackfill(name string, committed func() string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backfills = append(c.backfills, backfillCrawl{name, committed})
}

func (c *lagEventsCollector) addReplay(name, path string, committed func() string) {
	r := &replayLag{name: name, path: path, committed: committed, total: -1}
	c.mu.Lock()
	c.reps = append(c.reps, r)
	c.mu.Unlock()
	go func() {
		n, err := countReplayEvents(path)
		if err != nil {
			return // the replay itself reports an unreadable file
		}
		r.mu.Lock()
		r.total = n
		r.mu.Unlock()
	}()
}

// replayBehind returns the events after cursor in a file of total events.
func replayBehind(total int, cursor string) float64 {
	if Done(cursor) {
		return 0
	}
	pos, err := strconv.Atoi(cursor)
	if err != nil || pos < 0 {
		pos = 0
	}
	return float64(max(0, total-pos))
}

// countReplayEvents counts what a Replay's cursor counts: lines of a
// .jsonl file, frames of any other file.
func countReplayEvents(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if strings.HasSuffix(path, ".jsonl") {
		br := bufio.NewReaderSize(f, 1<<16)
		buf := make([]byte, 1<<16)
		n, last := 0, byte('\n')
		for {
			k, err := br.Read(buf)
			if k > 0 {
				n += bytes.Count(buf[:k], []byte{'\n'})
				last = buf[k-1]
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return 0, err
			}
		}
		if last != '\n' {
			n++ // a last line without a newline
		}
		return n, nil
	}
	n := 0
	err = event.ReadFrames(bufio.NewReaderSize(f, 1<<16), func([]byte) error { n++; return nil })
	return n, err
}

func (c *lagEventsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.seconds
	ch <- c.backfillDone
}

func (c *lagEventsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.start.IsZero() {
		now := time.Now()
		for name, l := range c.live {
			lag := l.seconds(now, c.start)
			ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.GaugeValue, lag, name)
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, l.behind(lag), name)
		}
	}
	for _, b := range c.backfills {
		done := 0.0
		if Done(b.committed()) {
			done = 1
		}
		ch <- prometheus.MustNewConstMetric(c.backfillDone, prometheus.GaugeValue, done, b.name)
	}
	for _, r := range c.reps {
		r.mu.Lock()
		total := r.total
		r.mu.Unlock()
		if total < 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, replayBehind(total, r.committed()), r.name)
	}
}

// CompactionBacklog returns the runs of tree t waiting for a compaction in
// m: every run lsm.PickCompaction would pick, one merge after another, if
// the merges' outputs were not counted.
func CompactionBacklog(m *lsm.Manifest, t lsm.Tree, fanIn int) int {
	if m == nil || fanIn < 2 {
		return 0
	}
	rest := &lsm.Manifest{Runs: m.RunsOf(t)}
	waiting := 0
	for {
		picked := lsm.PickCompaction(rest, t, fanIn)
		if picked == nil {
			return waiting
		}
		waiting += len(picked)
		drop := map[string]bool{}
		for _, r := range picked {
			drop[r.ID] = true
		}
		var keep []lsm.Run
		for _, r := range rest.Runs {
			if !drop[r.ID] {
				keep = append(keep, r)
			}
		}
		rest = &lsm.Manifest{Runs: keep}
	}
}
