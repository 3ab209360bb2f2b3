package ingest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/gorilla/websocket"
)

// jsServer is a Jetstream on loopback serving account events at the
// given times (inclusive cursor), cutting each connection after cut
// events (0: never; only the first cutConns connections when that is
// set), recording the cursor each connection asked for.
type jsServer struct {
	*httptest.Server
	mu       sync.Mutex
	times    []int64 // the relay's clock: each account event's seq
	offset   int64   // this instance's clock: time_us = time + offset
	cut      int
	cutConns int
	cursors  []int64
	maxSent  []int64 // per connection, the latest time_us it sent
	// seqs: the server numbers its events as a Jetstream v2 server's v1
	// endpoint does ("cursor": position from 1) and reads a cursor below
	// 1e15 as such a seq (inclusive).
	seqs bool
}

func newJSServer(t *testing.T, times []int64, offset int64, cut int) *jsServer {
	s := &jsServer{times: times, offset: offset, cut: cut}
	up := websocket.Upgrader{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		cur := int64(-1)
		if v := r.URL.Query().Get("cursor"); v != "" {
			cur, _ = strconv.ParseInt(v, 10, 64)
		}
		s.mu.Lock()
		s.cursors = append(s.cursors, cur)
		s.maxSent = append(s.maxSent, 0)
		k := len(s.maxSent) - 1
		cut := s.cut
		if s.cutConns > 0 && k >= s.cutConns {
			cut = 0
		}
		s.mu.Unlock()
		sent := 0
		for i, seq := range s.times {
			tu := seq + s.offset
			if s.seqs && cur > 0 && cur < 1e15 {
				if int64(i+1) < cur {
					continue
				}
			} else if tu < cur {
				continue
			}
			if cut > 0 && sent == cut {
				return // the connection drops
			}
			number := ""
			if s.seqs {
				number = fmt.Sprintf(`"cursor":%d,`, i+1)
			}
			msg := fmt.Sprintf(`{"did":"did:plc:%024d","time_us":%d,%s"kind":"account","account":{"active":true,"did":"did:plc:%024d","seq":%d,"time":"2026-01-01T00:00:00Z"}}`, seq, tu, number, seq, seq)
			if c.WriteMessage(websocket.TextMessage, []byte(msg)) != nil {
				return
			}
			s.mu.Lock()
			if k < len(s.maxSent) { // not a connection of a run before the test reset the lists
				s.maxSent[k] = tu
			}
			s.mu.Unlock()
			sent++
		}
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jsServer) url() string { return "ws" + strings.TrimPrefix(s.URL, "http") + "/subscribe" }

// follow runs j until it has emitted want events (or times out) and
// returns the emitted times in order.
func follow(t *testing.T, j *Jetstream, cursor string, want int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []int64 // relay seqs, in the order emitted
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		j.Run(ctx, cursor, func(op *event.Op, c string) error {
			got = append(got, op.RelaySeq)
			if len(got) == want {
				cancel()
			}
			return nil
		})
	}()
	<-finished // Run returned: got is no longer written
	if len(got) < want {
		t.Fatalf("emitted %d of %d events: %v", len(got), want, got)
	}
	return got
}

// A reconnect to the same instance resumes a little before the cursor and
// never applies an event twice: replays would publish older answers for a
// while.
func TestJetstreamResumeSameInstance(t *testing.T) {
	base := int64(1_767_225_600_000_000)
	var times []int64
	for i := range 30 {
		times = append(times, base+int64(i)*400_000) // 2.5 events a second
	}
	srv := newJSServer(t, times, 0, 12)
	j, err := NewJetstream([]string{srv.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := follow(t, j, "", len(times))
	for i, tu := range got {
		if tu != times[i] {
			t.Fatalf("event %d: time %d, want %d (got %v)", i, tu, times[i], got)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.cursors) < 3 {
		t.Fatalf("%d connections, want the cuts to force at least 3", len(srv.cursors))
	}
	// Each reconnection asks for the second before the last event
	// applied (the latest the previous connection sent).
	for k := 1; k < len(srv.cursors); k++ {
		if want := srv.maxSent[k-1] - jetstreamResumeRewindUs; srv.cursors[k] != want {
			t.Errorf("connection %d asked cursor %d, want %d", k, srv.cursors[k], want)
		}
	}
}

// A new run (a new leader) starts at its predecessor's committed cursor.
// When its connection drops early, the reconnect rewinds a second, but
// never below that cursor: the events before it were applied by the
// predecessor, this run's seen set does not know them, and applying them
// again after this run's later events would undo those (a create applied
// again after its delete, skipped as seen, is a link back for good).
func TestJetstreamResumeNeverBelowRunStart(t *testing.T) {
	base := int64(1_767_225_600_000_000)
	var times []int64
	for i := range 30 {
		times = append(times, base+int64(i)*250_000) // 4 events a second
	}
	srv := newJSServer(t, times, 0, 3)
	srv.cutConns = 1 // the first connection drops after 3 events, 0.5 s past the start
	j, err := NewJetstream([]string{srv.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := times[10]
	got := follow(t, j, strconv.FormatInt(start, 10), len(times)-10)
	if !slices.Equal(got, times[10:]) {
		t.Fatalf("emitted %v\nwant %v (each event from the start cursor once, in order)", got, times[10:])
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.cursors) != 2 {
		t.Fatalf("%d connections (cursors %v), want 2", len(srv.cursors), srv.cursors)
	}
	for k, c := range srv.cursors {
		if c != start {
			t.Errorf("connection %d asked cursor %d, want the run's start %d (the latest event %d less the rewind is below it)", k, c, start, times[12])
		}
	}
}

// A failover to another instance rewinds, skips what was applied, and
// applies what the first instance never delivered.
func TestJetstreamFailoverRewinds(t *testing.T) {
	base := int64(1_767_225_600_000_000)
	var all, partial []int64
	for i := range 20 {
		tu := base + int64(i)*100_000
		all = append(all, tu)
		if i != 5 { // instance A never delivers event 5
			partial = append(partial, tu)
		}
	}
	a := newJSServer(t, partial, 0, 10) // drops after 10 events: events 0-4, 6-10
	// Instance B's clock runs 1.234 ms ahead: its time_us differ from A's
	// for the same events.
	b := newJSServer(t, all, 1234, 0)
	j, err := NewJetstream([]string{a.url(), b.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := follow(t, j, "", len(all))
	seen := map[int64]int{}
	for _, tu := range got {
		seen[tu]++
	}
	for _, tu := range all {
		if seen[tu] != 1 {
			t.Errorf("event %d applied %d times (order %v)", tu, seen[tu], got)
		}
	}
	if !contains(got[10:], all[5]) {
		t.Errorf("the event A missed was not applied, late, after the failover: %v", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if want := all[10] - jetstreamRewindUs; b.cursors[0] != want { // A's time, rewound
		t.Errorf("failover asked cursor %d, want %d (rewound)", b.cursors[0], want)
	}
}

func contains(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestJetstreamCursorForms: the committed cursor is time_us from a v1
// server and "<seq>@<host>:<time_us>" from a v2 server; both read back,
// and a malformed one is an error.
func TestJetstreamCursorForms(t *testing.T) {
	for _, c := range []struct {
		in        string
		us, seq   int64
		host      string
		bad       bool
		formatted string
	}{
		{"", 0, 0, "", false, "0"},
		{"1779719009132431", 1779719009132431, 0, "", false, "1779719009132431"},
		{"5541@js.example:6008:1779719009132431", 1779719009132431, 5541, "js.example:6008", false, "5541@js.example:6008:1779719009132431"},
		{"5541:1779719009132431", 0, 0, "", true, ""},
		{"x@h:1", 0, 0, "", true, ""},
		{"1@h:y", 0, 0, "", true, ""},
		{"-3", 0, 0, "", true, ""},
	} {
		us, seq, host, err := parseJetstreamCursor(c.in)
		if (err != nil) != c.bad || us != c.us || seq != c.seq || host != c.host {
			t.Errorf("%q: %d, %d, %q, %v", c.in, us, seq, host, err)
			continue
		}
		if !c.bad && jetstreamCursor(us, seq, host) != c.formatted {
			t.Errorf("%q formats as %q", c.in, jetstreamCursor(us, seq, host))
		}
	}
}

// A Jetstream v2 server's v1 endpoint numbers its events: the consumer
// commits "<seq>@<host>:<time_us>", each reconnect asks for the seq after
// the last event applied (no rewind, nothing twice), and a new run resumes
// after the committed seq on the same host, by time on another.
func TestJetstreamV2SeqResume(t *testing.T) {
	times := make([]int64, 12)
	for i := range times {
		times[i] = 1_780_000_000_000_000 + int64(i)*1000
	}
	srv := newJSServer(t, times, 0, 3)
	srv.seqs = true
	j, err := NewJetstream([]string{srv.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []int64
	var last string
	j.Run(ctx, "", func(op *event.Op, c string) error {
		got = append(got, op.RelaySeq)
		last = c
		if len(got) == len(times) {
			cancel()
		}
		return nil
	})
	if !slices.Equal(got, times) {
		t.Fatalf("emitted %v, want every event once in order", got)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	if want := fmt.Sprintf("12@%s:%d", host, times[11]); last != want {
		t.Fatalf("last cursor %q, want %q", last, want)
	}
	srv.mu.Lock()
	asked := slices.Clone(srv.cursors)
	srv.mu.Unlock()
	if want := []int64{-1, 4, 7, 10}; !slices.Equal(asked, want) {
		t.Fatalf("connections asked %v, want %v (each the seq after the last applied)", asked, want)
	}

	// A new run: after the committed seq on the same host; by time (the
	// committed time_us, inclusive) when the cursor names another host.
	for _, c := range []struct {
		cursor string
		asked  int64
	}{
		{fmt.Sprintf("5@%s:%d", host, times[4]), 6},
		{fmt.Sprintf("5@elsewhere.example:%d", times[4]), times[4]},
	} {
		srv.mu.Lock()
		srv.cursors, srv.maxSent = nil, nil
		srv.mu.Unlock()
		follow(t, j, c.cursor, 1)
		srv.mu.Lock()
		first := srv.cursors[0]
		srv.mu.Unlock()
		if first != c.asked {
			t.Errorf("a new run from %q asked cursor %d, want %d", c.cursor, first, c.asked)
		}
	}
}

// msTimes is n event times 1 ms apart (13 s for 13,000).
func msTimes(n int) []int64 {
	times := make([]int64, n)
	for i := range times {
		times[i] = 1_767_225_600_000_000 + int64(i)*1000
	}
	return times
}

// distinctInOrder fails unless got is times' relay seqs, each once, in order.
func distinctInOrder(t *testing.T, got, times []int64) {
	t.Helper()
	seen := map[int64]bool{}
	for i, s := range got {
		if seen[s] {
			t.Fatalf("event %d (relay seq %d) applied twice, at %d of %d emitted", s, s, i, len(got))
		}
		seen[s] = true
	}
	if !slices.Equal(got, times) {
		t.Fatalf("emitted %d events, not the %d in order", len(got), len(times))
	}
}

// A failover to an instance whose time_us run 2 s ahead of the last one's
// (its clock, or its lag behind the relay) replays from 7 s before the
// cursor on the last one's clock: a run remembers what it applied for
// twice the failover rewind, so nothing is applied twice. (It remembered
// the rewind's 5 s: 2 s of events came again, after later ones, and a
// create applied again after its delete was a link back for good; found
// by review.)
func TestJetstreamFailoverToAnInstanceAhead(t *testing.T) {
	times := msTimes(13000) // the seen set is pruned thrice
	a := newJSServer(t, times, 0, len(times)-1)
	b := newJSServer(t, times, 2_000_000, 0)
	j, err := NewJetstream([]string{a.url(), b.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	distinctInOrder(t, follow(t, j, "", len(times)), times)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.cursors) == 0 {
		t.Fatal("the run never failed over")
	}
}

// A Jetstream v2 instance (numbering its events), then a v1 one, then the
// first again: the return resumes by time, not at the seq the run last had
// from the first instance, which is far behind what it applied since. (It
// asked for that seq: minutes of events came again, and those older than
// what the run remembers were applied twice; found by review.)
func TestJetstreamFailbackAfterAnotherInstance(t *testing.T) {
	times := msTimes(13000)
	a := newJSServer(t, times, 0, 5)
	a.seqs, a.cutConns = true, 1
	b := newJSServer(t, times, 0, 9000)
	j, err := NewJetstream([]string{a.url(), b.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	distinctInOrder(t, follow(t, j, "", len(times)), times)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cursors) < 2 || a.cursors[1] < 1e15 {
		t.Fatalf("the first instance was asked %v: want a return to it, by time", a.cursors)
	}
}
