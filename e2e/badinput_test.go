package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Bad input from any source is skipped and counted (a metric and a log
// line naming the position), never stops ingest, never loses the cursor:
// the real capture with garbage spliced in must index exactly what the
// clean capture does, through a replay and through live websocket sources.

// badJetstreamLines are Jetstream events no consumer should index: each
// with the reason the node must count it under.
var badJetstreamLines = []struct{ reason, line string }{
	{"bad_event", `{"did":"did:plc:wq4aajammjtxdomz3e23667t","time_us":17831758`}, // truncated JSON
	{"unknown_kind", `{"did":"did:plc:wq4aajammjtxdomz3e23667t","time_us":1783175888085435,"kind":"mystery","mystery":{}}`},
	{"bad_event", `["not","an","object"]`},
	{"bad_source", `{"did":"did:plc:has space","time_us":1783175888085436,"kind":"commit","commit":{"rev":"3mptbypluud2a","operation":"create","collection":"app.bsky.feed.like","rkey":"3mptbyplj5d2b","record":{"$type":"app.bsky.feed.like","subject":{"uri":"at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/3mpsjbtci2c2o","cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"}},"cid":"bafyreiguce4jh7kcbmof3pmcvasifqtw24b6isakj5ve5ga2b4z4alpc4i"}}`},
	{"invalid_link", `{"did":"did:plc:wq4aajammjtxdomz3e23667t","time_us":1783175888085437,"kind":"commit","commit":{"rev":"3mptbypluud2a","operation":"create","collection":"app.bsky.feed.like","rkey":"3mptbyplj5d2c","record":{"$type":"app.bsky.feed.like","subject":{"uri":"at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/not a key!","cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza"}},"cid":"bafyreiguce4jh7kcbmof3pmcvasifqtw24b6isakj5ve5ga2b4z4alpc4i"}}`},
}

// oversizedRecord is a commit whose record is over the extractor's bound
// (extract.RecordBytesMax, 1 MiB) while the message is within Jetstream's.
func oversizedRecord() string {
	return `{"did":"did:plc:wq4aajammjtxdomz3e23667t","time_us":1783175888085438,"kind":"commit","commit":{"rev":"3mptbypluud2a","operation":"create","collection":"app.bsky.feed.post","rkey":"3mptbyplj5d2d","record":{"$type":"app.bsky.feed.post","text":"` +
		strings.Repeat("x", 1100<<10) + `","embed":{"$type":"app.bsky.embed.external","external":{"uri":"https://example.com/oversized"}}},"cid":"bafyreiguce4jh7kcbmof3pmcvasifqtw24b6isakj5ve5ga2b4z4alpc4i"}}`
}

// wantLinks runs eddy-ctl links on a clean capture: per target, the live
// "source path" pairs.
func wantLinks(t *testing.T, flag, file string) map[string][]string {
	t.Helper()
	out := ctl(t, "links", "--quiet", flag, file)
	deleted := map[string]bool{}
	var lines []linkLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l linkLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Op == "delete" {
			deleted[l.Source] = true
			continue
		}
		lines = append(lines, l)
	}
	want := map[string][]string{}
	for _, l := range lines {
		if !deleted[l.Source] {
			want[l.Target] = append(want[l.Target], l.Source+" "+l.Path)
		}
	}
	for _, v := range want {
		slices.Sort(v)
	}
	if len(want) < 50 {
		t.Fatalf("only %d targets in %s", len(want), file)
	}
	return want
}

// checkAnswers demands the node answers exactly want for every target.
func checkAnswers(t *testing.T, n localNode, want map[string][]string) int {
	t.Helper()
	links := 0
	for tg, exp := range want {
		if have := nodeLinks(t, n, tg); !slices.Equal(have, exp) {
			t.Fatalf("%s target %s:\n have %v\n want %v", n.ID, tg, have, exp)
		}
		links += len(exp)
	}
	return links
}

// skipped scrapes a node's eddy_ingest_skipped_total by reason for source.
func skipped(t *testing.T, n localNode, source string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^eddy_ingest_skipped_total\{(.*)\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		labels := m[1]
		if !strings.Contains(labels, `source="`+source+`"`) {
			continue
		}
		r := regexp.MustCompile(`reason="([^"]*)"`).FindStringSubmatch(labels)
		v, _ := strconv.ParseFloat(m[2], 64)
		if r != nil {
			out[r[1]] += v
		}
	}
	return out
}

// waitCursor waits until the single node's cursor for source satisfies ok
// and it serves what it applied.
func waitCursor(t *testing.T, lc *localCluster, source string, ok func(string) bool) {
	t.Helper()
	lc.waitFor(t, "source "+source+" consumed and published", 60*time.Second, func() error {
		st, err := lc.status(lc.Nodes[0])
		if err != nil {
			return err
		}
		if c := st.Cursors[source]; !ok(c) || st.ViewGeneration != st.Generation {
			return fmt.Errorf("cursor %q, serving %d of %d", c, st.ViewGeneration, st.Generation)
		}
		return nil
	})
}

// checkSkips demands every expected reason was counted at least n times
// and the log names positions.
func checkSkips(t *testing.T, n localNode, source string, reasons map[string]int) {
	t.Helper()
	got := skipped(t, n, source)
	for r, min := range reasons {
		if got[r] < float64(min) {
			t.Errorf("source %s: skipped{reason=%s} = %v, want at least %d (all: %v)", source, r, got[r], min, got)
		}
	}
	log, err := os.ReadFile(n.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`skipped bad input: .*source=` + regexp.QuoteMeta(source) + `.*position=`).Match(log) {
		t.Errorf("no 'skipped bad input' log line naming a position for %s", source)
	}
	t.Logf("source %s: skipped %v", source, got)
}

func TestBadInputJetstream(t *testing.T) {
	clean, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	want := wantLinks(t, "--jetstream", clean)
	raw, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	good := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	// Garbage after every 20th good line, cycling through the kinds.
	var mixed []string
	reasons := map[string]int{"oversized": 0}
	k := 0
	for i, l := range good {
		mixed = append(mixed, l)
		if i%20 == 19 {
			b := badJetstreamLines[k%len(badJetstreamLines)]
			mixed = append(mixed, b.line)
			reasons[b.reason]++
			k++
		}
	}
	// The oversized record is over what the atproto JSON data model takes
	// (atdata refuses it): the decoder marks it, the writer counts it.
	mixed = append(mixed[:40], append([]string{oversizedRecord()}, mixed[40:]...)...)
	delete(reasons, "oversized")
	reasons["record_json"] = 1

	t.Run("replay", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "mixed.jsonl")
		if err := os.WriteFile(file, []byte(strings.Join(mixed, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		source := "replay:" + file
		lc := up(t, "--nodes", "1", "--flush-interval", "200ms", "--source", "replay+file://"+file)
		waitCursor(t, lc, source, func(c string) bool { return strings.HasPrefix(c, "eof:") })
		links := checkAnswers(t, lc.Nodes[0], want)
		checkSkips(t, lc.Nodes[0], source, reasons)
		t.Logf("replay of %d lines (%d bad): %d targets, %d links, equal to the clean capture", len(mixed), len(mixed)-len(good), len(want), links)
	})

	t.Run("live", func(t *testing.T) {
		// A Jetstream on loopback: the mixed lines as text messages, then
		// a binary message that is not zstd, then one good line again
		// (already seen: must fold), then it holds the connection open.
		var lastGood int64
		for _, l := range good {
			var ev struct {
				TimeUS int64 `json:"time_us"`
			}
			if json.Unmarshal([]byte(l), &ev) == nil && ev.TimeUS > lastGood {
				lastGood = ev.TimeUS
			}
		}
		addr := serveWS(t, func(c *websocket.Conn, r *http.Request) {
			for _, l := range mixed {
				if c.WriteMessage(websocket.TextMessage, []byte(l)) != nil {
					return
				}
			}
			c.WriteMessage(websocket.BinaryMessage, []byte("\x28\xb5\x2f\xfdnot really zstd"))
			c.WriteMessage(websocket.TextMessage, []byte(good[0]))
			holdOpen(c)
		})
		lc := up(t, "--nodes", "1", "--flush-interval", "200ms", "--source", "jetstream+ws://"+addr+"/subscribe")
		waitCursor(t, lc, "jetstream", func(c string) bool { return c == strconv.FormatInt(lastGood, 10) })
		links := checkAnswers(t, lc.Nodes[0], want)
		r := map[string]int{"bad_compression": 1}
		for k, v := range reasons {
			r[k] = v
		}
		checkSkips(t, lc.Nodes[0], "jetstream", r)
		t.Logf("live Jetstream of %d messages (%d bad): %d targets, %d links, cursor %d", len(mixed)+2, len(mixed)-len(good)+1, len(want), links, lastGood)
	})
}

func TestBadInputFirehose(t *testing.T) {
	clean, _ := filepath.Abs(corpus + "frames.bin")
	want := wantLinks(t, "--firehose", clean)
	raw, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for len(raw) >= 4 {
		n := binary.LittleEndian.Uint32(raw)
		frames = append(frames, raw[4:4+n])
		raw = raw[4+n:]
	}
	unknownType := []byte("\xa2\x62op\x01\x61t\x68#mystery\xa1\x63seq\x19\x30\x39")
	errorFrame := []byte("\xa1\x62op\x20\xa2\x65error\x6cFutureCursor\x67message\x63bad")
	bad := [][]byte{
		[]byte("garbage, not CBOR at all"),
		frames[3][:len(frames[3])/2], // a frame cut short
		unknownType,
		{0xa2, 0x62, 'o', 'p', 0x01}, // a header without its body
	}
	var mixed [][]byte
	for i, f := range frames {
		mixed = append(mixed, f)
		if i%15 == 14 {
			mixed = append(mixed, bad[(i/15)%len(bad)])
		}
	}

	t.Run("replay", func(t *testing.T) {
		var buf bytes.Buffer
		for _, f := range mixed {
			binary.Write(&buf, binary.LittleEndian, uint32(len(f)))
			buf.Write(f)
		}
		buf.Write([]byte{200, 0, 0, 0, 1, 2, 3}) // a truncated last record
		file := filepath.Join(t.TempDir(), "mixed.bin")
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		source := "replay:" + file
		lc := up(t, "--nodes", "1", "--flush-interval", "200ms", "--source", "replay+file://"+file)
		waitCursor(t, lc, source, func(c string) bool { return strings.HasPrefix(c, "eof:") })
		links := checkAnswers(t, lc.Nodes[0], want)
		checkSkips(t, lc.Nodes[0], source, map[string]int{"bad_frame": 2, "unknown_type": 1, "truncated": 1})
		t.Logf("replay of %d frames (%d bad): %d targets, %d links, equal to the clean capture", len(mixed), len(mixed)-len(frames), len(want), links)
	})

	t.Run("live", func(t *testing.T) {
		var lastSeq int64
		var conns atomic.Int32
		addr := serveWS(t, func(c *websocket.Conn, r *http.Request) {
			if conns.Add(1) == 1 {
				// The first connection ends with an error frame: the
				// consumer must reconnect from its cursor.
				for _, f := range mixed[:len(mixed)/2] {
					c.WriteMessage(websocket.BinaryMessage, f)
				}
				c.WriteMessage(websocket.BinaryMessage, errorFrame)
				return
			}
			cur, _ := strconv.ParseInt(r.URL.Query().Get("cursor"), 10, 64)
			for _, f := range mixed {
				if s := frameSeq(f); s != 0 && s <= cur {
					continue
				}
				c.WriteMessage(websocket.BinaryMessage, f)
			}
			holdOpen(c)
		})
		for _, f := range frames {
			lastSeq = max(lastSeq, frameSeq(f))
		}
		lc := up(t, "--nodes", "1", "--flush-interval", "200ms", "--source", "firehose+ws://"+addr)
		waitCursor(t, lc, "firehose", func(c string) bool { return c == strconv.FormatInt(lastSeq, 10)+"@"+addr })
		links := checkAnswers(t, lc.Nodes[0], want)
		checkSkips(t, lc.Nodes[0], "firehose", map[string]int{"bad_frame": 2, "unknown_type": 1})
		if conns.Load() < 2 {
			t.Fatalf("the consumer did not reconnect after the error frame (%d connections)", conns.Load())
		}
		t.Logf("live firehose: %d frames (%d bad) over %d connections: %d targets, %d links, cursor %d", len(mixed), len(mixed)-len(frames), conns.Load(), len(want), links, lastSeq)
	})
}

// frameSeq reads the seq of a firehose frame's body, 0 if it has none (a
// crude scan for the "seq" key: enough for the capture's frames).
func frameSeq(f []byte) int64 {
	i := bytes.Index(f, []byte("\x63seq"))
	if i < 0 || i+4 >= len(f) {
		return 0
	}
	b := f[i+4:]
	switch {
	case b[0] < 0x18:
		return int64(b[0])
	case b[0] == 0x18 && len(b) > 1:
		return int64(b[1])
	case b[0] == 0x19 && len(b) > 2:
		return int64(binary.BigEndian.Uint16(b[1:]))
	case b[0] == 0x1a && len(b) > 4:
		return int64(binary.BigEndian.Uint32(b[1:]))
	case b[0] == 0x1b && len(b) > 8:
		return int64(binary.BigEndian.Uint64(b[1:]))
	}
	return 0
}

// holdOpen keeps a connection open until the peer goes away.
func holdOpen(c *websocket.Conn) {
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			return
		}
	}
}

// serveWS serves websocket connections on a loopback port with handle and
// returns host:port.
func serveWS(t *testing.T, handle func(*websocket.Conn, *http.Request)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := websocket.Upgrader{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		handle(c, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
