package ingest

// The PLC directory follower. With a PLC directory configured (eddy-node
// --plc URL), the leader tails the directory's GET /export (JSON lines,
// each with its "seq"; ?after=<seq>&count=<n>, exclusive of after, as
// plc.directory pages it) from its committed cursor ("plc:<url>" among the
// FSM cursors), and adds every genesis operation (prev null: the operation
// that created a did:plc) to the PLC map trees (lsm/plcmap.go) through the
// writer's next flush: the PLC tables, the links that use them and the
// follower's cursor are published in one Raft entry, so a node that sees a
// link with an inline did:plc also sees the entry that renders it.
//
// Staying ahead of the stream: the sources start only once the follower
// has reached the directory's head once in the leadership term; after
// that, an author's did:plc the map does not know makes the writer wait
// (at most PLCDirectory.Wait; a target's is written under its hash
// instead, PeekSeq) until the follower has completed a poll that reached
// the head and started after the wait began, which it starts at once when
// asked. A DID the directory had sequenced before the event arrived is then
// known (and inline); any other did:plc is outlined, and stays outlined
// (package link's rule), so each unknown DID waits once.
//
// A lookup that cannot read the map (the object store failing) is never
// taken as "unknown" (outlining a DID the map knows would split its links
// between two encodings): the writer retries for plcReadRetryMax, then
// stops the leadership term without publishing.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/lsm"
)

// Defaults and limits of the PLC follower.
const (
	// DefaultPLCWait bounds how long one event waits for the follower to
	// learn an unknown did:plc before the DID is outlined.
	DefaultPLCWait = 5 * time.Second
	// DefaultPLCPoll: how often the follower polls /export at the head
	// (it polls at once when the writer waits for it).
	DefaultPLCPoll = time.Second
	// PLCPageMax is /export's largest count on plc.directory.
	PLCPageMax = 1000
	// plcLineBytesMax bounds one /export line (an operation is a few KiB).
	plcLineBytesMax = 1 << 20
	// plcRequestTimeout bounds one /export request.
	plcRequestTimeout = 60 * time.Second
	// plcReadRetryMax: how long the writer retries a PLC map read that
	// fails before it gives the leadership term up.
	plcReadRetryMax = 30 * time.Second
)

// PLCDirectory configures the PLC follower ("plc: URL"); a nil
// *PLCDirectory is "plc: off" (every DID outlined through Raft).
type PLCDirectory struct {
	URL          string        // base URL: GET <URL>/export
	Wait         time.Duration // per unknown did:plc; DefaultPLCWait when 0
	PollInterval time.Duration // at the head; DefaultPLCPoll when 0
	PageSize     int           // /export count; PLCPageMax when 0
	Client       *http.Client  // http.DefaultClient when nil
}

// PLCCursorPrefix prefixes the follower's cursor key.
const PLCCursorPrefix = "plc:"

// Name is the follower's cursor key.
func (d *PLCDirectory) Name() string { return PLCCursorPrefix + d.URL }

func (d *PLCDirectory) wait() time.Duration {
	if d.Wait > 0 {
		return d.Wait
	}
	return DefaultPLCWait
}

// ParsePLCFlag parses --plc: "off" (nil) or an http(s) URL.
func ParsePLCFlag(s string) (*PLCDirectory, error) {
	if s == "off" {
		return nil, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--plc %q: want off or the http(s) URL of a PLC directory", s)
	}
	return &PLCDirectory{URL: strings.TrimSuffix(s, "/")}, nil
}

// plcFollower is one leadership term's follower and the writer's view of
// the map.
type plcFollower struct {
	dir *PLCDirectory
	w   *Writer
	ctx context.Context // the writer's term
	m   *lsm.PLCMap

	kick     chan struct{}
	ready    chan struct{} // closed at the first head of the term
	outlined atomic.Uint64 // did:plc outlined after waiting
	// cursor is the seq of the last line read (-1: none read this term).
	// It is not the writer's SetCursor: that takes the writer's lock,
	// which a writer waiting for this follower holds.
	cursor atomic.Int64

	mu struct {
		sync.Mutex
		headAt  time.Time     // start of the latest poll that reached the head
		changed chan struct{} // closed and replaced when headAt moves
		ready   bool
	}
}

func newPLCFollower(ctx context.Context, dir *PLCDirectory, w *Writer) *plcFollower {
	f := &plcFollower{dir: dir, w: w, ctx: ctx, kick: make(chan struct{}, 1), ready: make(chan struct{})}
	f.mu.changed = make(chan struct{})
	f.cursor.Store(-1)
	f.m = lsm.NewPLCMap(w.reader, w.currentView, 0)
	return f
}

// reachedHead records a poll, started at start, that read to the head.
func (f *plcFollower) reachedHead(start time.Time) {
	f.mu.Lock()
	if start.After(f.mu.headAt) {
		f.mu.headAt = start
	}
	close(f.mu.changed)
	f.mu.changed = make(chan struct{})
	first := !f.mu.ready
	f.mu.ready = true
	f.mu.Unlock()
	if first {
		close(f.ready)
	}
}

// headSince reports whether a poll that started after t reached the head,
// and a channel closed at the next such poll.
func (f *plcFollower) headSince(t time.Time) (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.headAt.After(t), f.mu.changed
}

// waitReady waits for the first head of the term; false if ctx ends.
func (f *plcFollower) waitReady(ctx context.Context) bool {
	select {
	case <-f.ready:
		return true
	case <-ctx.Done():
		return false
	}
}

// Seq and DID implement link.PLC; the codec uses LookupSeq and LookupDID.
func (f *plcFollower) Seq(did string) (uint64, bool) {
	s, ok, err := f.LookupSeq(did)
	return s, ok && err == nil
}

func (f *plcFollower) DID(seq uint64) (string, bool) {
	s, ok, err := f.LookupDID(seq)
	return s, ok && err == nil
}

func (f *plcFollower) LookupDID(seq uint64) (string, bool, error) { return f.m.DIDOf(f.ctx, seq) }

// PeekSeq is LookupSeq without the wait for the directory, for a target's
// DID (link.PLCPeek): an unknown one is written under its hash. A failed
// read of the map takes LookupSeq's retries (and its end of the term).
func (f *plcFollower) PeekSeq(did string) (uint64, bool, error) {
	s, ok, err := f.m.SeqOf(f.ctx, did)
	if err != nil {
		return f.LookupSeq(did)
	}
	return s, ok, nil
}

// LookupSeq is the writer's did:plc lookup: an unknown DID waits for the
// follower (see the top of this file).
func (f *plcFollower) LookupSeq(did string) (uint64, bool, error) {
	if _, ok := lsm.ParsePLC(did); !ok {
		return 0, false, nil // never in the map
	}
	start := time.Now()
	deadline := start.Add(f.dir.wait())
	retryWait := time.Duration(0)
	for {
		// Head first, then the lookup: a poll that reached the head added
		// its entries before it said so.
		passed, changed := f.headSince(start)
		s, ok, err := f.m.SeqOf(f.ctx, did)
		if err != nil {
			if time.Since(start) > plcReadRetryMax || f.ctx.Err() != nil {
				f.w.dead.Store(true) // nothing more is published this term
				return 0, false, fmt.Errorf("plc map read: %w: %w", err, ErrLeadershipLost)
			}
			f.w.log.Warn("plc map read failed; retrying", "did", did, "error", err)
			retryWait = retryBackoff.Next(retryWait)
			if sleepCtx(f.ctx, retryWait) != nil {
				f.w.dead.Store(true)
				return 0, false, ErrLeadershipLost
			}
			continue
		}
		if ok {
			return s, true, nil
		}
		if passed {
			return 0, false, nil // the directory had not sequenced it when the event arrived
		}
		left := time.Until(deadline)
		if left <= 0 {
			n := f.outlined.Add(1)
			f.w.skipLog.log(f.w.log, f.dir.Name(), "plc_wait_expired", "did", did, "waited", f.dir.wait(), "outlined_after_wait", n)
			return 0, false, nil
		}
		select {
		case f.kick <- struct{}{}:
		default:
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-f.ctx.Done():
			t.Stop()
			f.w.dead.Store(true) // the event is not encoded: publish nothing after it
			return 0, false, fmt.Errorf("plc wait: %w", ErrLeadershipLost)
		}
		t.Stop()
	}
}

// run tails /export from the committed cursor until ctx ends.
func (f *plcFollower) run(ctx context.Context) error {
	name := f.dir.Name()
	after, err := intCursor(name, f.w.cfg.Node.FSM.Cursor(name))
	if err != nil {
		return err
	}
	page := f.dir.PageSize
	if page <= 0 || page > PLCPageMax {
		page = PLCPageMax
	}
	poll := f.dir.PollInterval
	if poll <= 0 {
		poll = DefaultPLCPoll
	}
	client := f.dir.Client
	if client == nil {
		client = http.DefaultClient
	}
	f.w.log.Info("plc follower started", "url", f.dir.URL, "after", after)
	var retryWait time.Duration
	for {
		start := time.Now()
		lines, next, err := f.page(ctx, client, after, page)
		if next != after {
			after = next
			f.cursor.Store(after) // after the entries up to it were added
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			retryWait = retryBackoff.Next(retryWait)
			f.w.log.Warn("plc export failed; retrying", "url", f.dir.URL, "after", after, "error", err, "backoff", retryWait)
			if sleepCtx(ctx, retryWait) != nil {
				return nil
			}
			continue
		}
		retryWait = 0
		if f.m.PendingBytes() >= f.w.cfg.MemtableBytes {
			if err := f.w.Flush(ctx); err != nil {
				return err
			}
		}
		if lines >= page {
			continue // more to read
		}
		f.reachedHead(start)
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-f.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// plcLine is what the follower reads of an /export line.
type plcLine struct {
	DID       string `json:"did"`
	Seq       int64  `json:"seq"`
	Type      string `json:"type"`
	Operation *struct {
		Prev *string `json:"prev"`
		Type string  `json:"type"`
	} `json:"operation"`
}

// page reads one /export page after seq after: it returns the lines read
// (good or bad) and the last seq read. Bad lines are skipped and counted;
// a transport error (a status, a cut connection) returns what was read
// before it.
func (f *plcFollower) page(ctx context.Context, client *http.Client, after int64, count int) (int, int64, error) {
	name := f.dir.Name()
	rctx, cancel := context.WithTimeout(ctx, plcRequestTimeout)
	defer cancel()
	u := fmt.Sprintf("%s/export?after=%d&count=%d", f.dir.URL, after, count)
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, after, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, after, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, after, fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, bytes.TrimSpace(b))
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	lines := 0
	for {
		line, err := readLine(br, plcLineBytesMax)
		if errors.Is(err, errLineTooLong) {
			lines++
			f.w.skip(name, "plc_line_too_long", "after", after)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return lines, after, err // cut: the next poll reads from after again
		}
		complete := err == nil
		if t := bytes.TrimSpace(line); len(t) > 0 {
			var l plcLine
			if jerr := json.Unmarshal(t, &l); jerr != nil {
				if !complete {
					return lines, after, fmt.Errorf("export cut mid-line after seq %d", after)
				}
				lines++
				f.w.skip(name, "plc_bad_json", "after", after, "error", jerr)
			} else {
				lines++
				after = f.line(&l, after)
			}
		}
		if !complete {
			return lines, after, nil
		}
	}
}

// line takes one decoded line and returns the cursor after it.
func (f *plcFollower) line(l *plcLine, after int64) int64 {
	name := f.dir.Name()
	switch {
	case l.Seq <= after:
		f.w.skip(name, "plc_bad_seq", "after", after, "seq", l.Seq, "did", l.DID)
		return after
	case l.Type != "" && l.Type != "sequenced_op":
		f.w.skip(name, "plc_unknown_type", "seq", l.Seq, "type", l.Type)
		return l.Seq
	case l.Operation == nil:
		f.w.skip(name, "plc_no_operation", "seq", l.Seq, "did", l.DID)
		return l.Seq
	}
	f.w.metrics.Events.WithLabelValues(name, "plc").Inc()
	if l.Operation.Prev != nil {
		return l.Seq // not a genesis operation
	}
	id, ok := lsm.ParsePLC(l.DID)
	if !ok {
		f.w.skip(name, "plc_bad_did", "seq", l.Seq, "did", l.DID)
		return l.Seq
	}
	f.m.Add(id, uint64(l.Seq))
	return l.Seq
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline) of at most max bytes; a
// longer line is consumed and errLineTooLong returned. At the end of the
// input it returns the last, unterminated part with io.EOF.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var out []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(out)+len(frag) > max+1 {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return nil, errLineTooLong
		}
		out = append(out, frag...)
		switch {
		case err == nil:
			return out[:len(out)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return out, err
		}
	}
}

// take is the flush's part (under the writer's lock, after the memtable
// swap): the cursor first, then the pending entries, so the published
// cursor never covers an entry that is not published with it or before.
func (f *plcFollower) take(cursors map[string]string) *lsm.PLCBatch {
	if c := f.cursor.Load(); c >= 0 {
		cursors[f.dir.Name()] = strconv.FormatInt(c, 10)
	}
	return f.m.Seal()
}

// plcRuns writes a sealed batch as one delta run per PLC tree.
func plcRuns(ctx context.Context, w *Writer, b *lsm.PLCBatch) ([]lsm.Run, error) {
	did, seq := b.Records()
	var runs []lsm.Run
	for _, x := range []struct {
		tree lsm.Tree
		recs []byte
	}{{lsm.TreePLCDID, did}, {lsm.TreePLCSeq, seq}} {
		run, err := lsm.WriteRun(ctx, w.cfg.Store, w.cfg.Catalog, x.tree, lsm.RunDelta, 0, x.recs)
		if err != nil {
			return nil, fmt.Errorf("flush %s: %w", x.tree, err)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// plcReady holds a source until the follower has reached the directory's
// head once this term (at once with plc off); false if ctx ends first.
func (w *Writer) plcReady(ctx context.Context) bool {
	if w.plc == nil {
		return true
	}
	return w.plc.waitReady(ctx)
}
