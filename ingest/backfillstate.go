package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/objstore"
)

// Per-repository backfill state.
//
// The backfill's progress is its listRepos cursor (every repository of
// the pages before it is written) plus this state: the repositories of the
// pages in flight (pending, done with the rev fetched, or failed) and every
// repository that failed its tries, with the error, kept until a retry
// pass writes it. It is checkpointed to the object store as one small
// JSON object each time a page is finished with every page before it
// (checkpoints/backfill/<source>/<time>.json)
// whose key the writer publishes with the page's cursor in the same flush
// (cursor entry "<source>#state"), so a new leader starts from exactly the
// state its predecessor published: the page cursor, the failed
// repositories to retry, the counters. Checkpoints older than the
// published one are deleted.

// Repository states.
const (
	RepoPending = "pending"
	RepoDone    = "done"
	RepoFailed  = "failed"
	RepoGone    = "gone" // deleted, taken down or deactivated: its revocation stands
)

// RepoState is one repository's backfill state.
type RepoState struct {
	DID      string `json:"did"`
	State    string `json:"state"`
	Rev      string `json:"rev,omitempty"`   // the repository revision written (done)
	Error    string `json:"error,omitempty"` // the last error (failed)
	Attempts int    `json:"attempts,omitempty"`
	At       string `json:"at,omitempty"` // RFC 3339 time of the last change
}

// BackfillCheckpoint is the published backfill state.
type BackfillCheckpoint struct {
	V      int    `json:"v"`
	Source string `json:"source"`
	Cursor string `json:"cursor"` // the listRepos cursor of the last page written (EOFCursor of it at the end)
	// Counters over the whole backfill (every leader's share; a page a new
	// leader redoes counts again).
	Listed int `json:"listed"`
	Done   int `json:"done"`
	Gone   int `json:"gone"`
	// Inactive counts the repositories the relay listed as gone
	// (deactivated, taken down, ...): not fetched.
	Inactive int `json:"inactive,omitempty"`
	// Failed lists the repositories that failed every try and wait for a
	// retry pass (at the end of the listing, and on each new leader).
	Failed []RepoState `json:"failed,omitempty"`
	// Page is the pages the checkpoint closes: each repository's outcome
	// (done with the rev written, gone, failed).
	Page []RepoState `json:"page,omitempty"`
}

// backfillCheckpointVersion is the checkpoint format version.
const backfillCheckpointVersion = 1

// StateCursorSuffix ends the name of the cursor entry holding a backfill
// checkpoint's key ("<source>#state"): not a source of its own.
const StateCursorSuffix = "#state"

// backfillFailedMax bounds the failed repositories a checkpoint lists (the
// rest are counted only; they are retried by a resync when their accounts
// next change).
const backfillFailedMax = 100_000

// backfillState is the backfill's state in memory.
type backfillState struct {
	mu     sync.Mutex
	cp     BackfillCheckpoint
	page   map[string]*RepoState // the repositories of the pages in flight
	pageOf map[string]int        // the page (its number in the pass) each is of
	failed map[string]*RepoState
	lost   int // failed past backfillFailedMax
}

// allPages is past every page's number: a checkpoint that closes every
// page in flight.
const allPages = math.MaxInt

func newBackfillState(source string) *backfillState {
	return &backfillState{cp: BackfillCheckpoint{V: backfillCheckpointVersion, Source: source},
		page: map[string]*RepoState{}, pageOf: map[string]int{}, failed: map[string]*RepoState{}}
}

func checkpointPrefix(source string) string {
	h := sha256.Sum256([]byte(source))
	return "checkpoints/backfill/" + hex.EncodeToString(h[:8]) + "/"
}

// loadBackfillState reads the checkpoint whose key was published (empty:
// a fresh state).
func loadBackfillState(ctx context.Context, store objstore.Store, source, key string) (*backfillState, error) {
	s := newBackfillState(source)
	if key == "" {
		return s, nil
	}
	cp, err := readCheckpoint(ctx, store, key)
	if err != nil {
		return nil, err
	}
	s.cp = cp
	for i := range cp.Failed {
		r := cp.Failed[i]
		s.failed[r.DID] = &r
	}
	s.cp.Failed, s.cp.Page = nil, nil
	return s, nil
}

// readCheckpoint reads one published checkpoint.
func readCheckpoint(ctx context.Context, store objstore.Store, key string) (BackfillCheckpoint, error) {
	var cp BackfillCheckpoint
	b, err := store.Get(ctx, key)
	if err != nil {
		return cp, fmt.Errorf("backfill checkpoint %s: %w", key, err)
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return cp, fmt.Errorf("backfill checkpoint %s: %w", key, err)
	}
	if cp.V != backfillCheckpointVersion {
		return cp, fmt.Errorf("backfill checkpoint %s: version %d, this binary reads %d", key, cp.V, backfillCheckpointVersion)
	}
	return cp, nil
}

// set records a repository's new state.
func (s *backfillState) set(did, state, rev string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.entryLocked(did, state)
	switch state {
	case RepoPending: // a page's repository joined it first; a resync joins none
		return
	case RepoDone:
		r.Rev, r.Error = rev, ""
		s.cp.Done++
	case RepoGone:
		r.Error = ""
		s.cp.Gone++
	case RepoFailed:
		r.Attempts++
		if err != nil {
			r.Error = err.Error()
		}
	}
	if state == RepoFailed {
		if _, ok := s.failed[did]; ok || len(s.failed) < backfillFailedMax {
			s.failed[did] = r
		} else {
			s.lost++
		}
	} else {
		delete(s.failed, did)
	}
	if _, ok := s.page[did]; ok {
		s.page[did] = r
	}
}

// join makes did a repository of page seq (allPages: the retry pass's),
// pending: the checkpoint that closes the page keeps its outcome.
func (s *backfillState) join(did string, seq int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.page[did], s.pageOf[did] = s.entryLocked(did, RepoPending), seq
}

// entryLocked is did's record (of a page in flight, else of the failed,
// else a new one), now in state.
func (s *backfillState) entryLocked(did, state string) *RepoState {
	r := s.page[did]
	if r == nil {
		r = s.failed[did]
	}
	if r == nil {
		r = &RepoState{DID: did}
	}
	r.State, r.At = state, time.Now().UTC().Format(time.RFC3339)
	return r
}

// snapshot returns the checkpoint as of now, at cursor, closing the pages
// up to upTo (their repositories' outcomes: Page).
func (s *backfillState) snapshot(cursor string, upTo int) BackfillCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := s.cp
	cp.Cursor = cursor
	cp.Failed = make([]RepoState, 0, len(s.failed))
	for _, r := range s.failed {
		cp.Failed = append(cp.Failed, *r)
	}
	slices.SortFunc(cp.Failed, func(a, b RepoState) int { return strings.Compare(a.DID, b.DID) })
	for did, r := range s.page {
		if s.pageOf[did] <= upTo {
			cp.Page = append(cp.Page, *r)
		}
	}
	slices.SortFunc(cp.Page, func(a, b RepoState) int { return strings.Compare(a.DID, b.DID) })
	return cp
}

// failedDIDs lists the repositories waiting for a retry.
func (s *backfillState) failedDIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.failed))
	for did := range s.failed {
		out = append(out, did)
	}
	slices.Sort(out)
	return out
}

// checkpoint writes the state at cursor, closing the pages up to upTo, to
// the store and hands the page cursor and the checkpoint's key to the
// writer (published together by the next flush), then deletes the
// checkpoints older than the one already published.
func (s *backfillState) checkpoint(ctx context.Context, store objstore.Store, w *Writer, source, cursor string, upTo int) error {
	cp := s.snapshot(cursor, upTo)
	s.mu.Lock()
	for did, seq := range s.pageOf { // written (the checkpoint keeps their outcomes)
		if seq <= upTo {
			delete(s.page, did)
			delete(s.pageOf, did)
		}
	}
	s.mu.Unlock()
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	// Keys sort by the generation committed when they were written, then
	// by time: a newer leader's keys sort after every key published
	// before it, whatever the nodes' clocks say.
	prefix := checkpointPrefix(source)
	key := fmt.Sprintf("%s%020d-%020d.json", prefix, w.cfg.Node.FSM.Manifest().Generation, time.Now().UnixNano())
	if err := store.Put(ctx, key, b); err != nil {
		return fmt.Errorf("backfill checkpoint: %w", err)
	}
	w.mu.Lock()
	w.mu.cursors[source] = cursor
	w.mu.cursors[source+StateCursorSuffix] = key
	w.mu.Unlock()
	// Garbage: every checkpoint older than the one published (never the
	// published one, nor the one just written).
	published := w.cfg.Node.FSM.Cursor(source + StateCursorSuffix)
	if published == "" {
		return nil
	}
	var keys []string
	if err := store.List(ctx, prefix, func(k string, _ int64) error { keys = append(keys, k); return nil }); err != nil {
		return nil // garbage stays; the next checkpoint tries again
	}
	for _, k := range keys {
		if k < published && k != key {
			if err := store.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				break
			}
		}
	}
	return nil
}

// progressFailedMax bounds the failed repositories a status shows.
const progressFailedMax = 50

// Progress reports the backfill's counters over every leader (listed,
// done, gone, failed: waiting for a retry) and the first failed
// repositories; before this leader loaded the state, its own counters.
func (b *Backfill) Progress() (map[string]int, []RepoState) {
	st := b.state.Load()
	if st == nil {
		return b.Stats().Snapshot(), nil
	}
	cp := st.snapshot("", allPages)
	pending := 0
	for _, r := range cp.Page {
		if r.State == RepoPending {
			pending++
		}
	}
	counts := map[string]int{"listed": cp.Listed, "done": cp.Done, "gone": cp.Gone, "inactive": cp.Inactive, "failed": len(cp.Failed) + st.lostCount(), "pending": pending}
	return counts, cp.Failed[:min(len(cp.Failed), progressFailedMax)]
}

func (s *backfillState) lostCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}
