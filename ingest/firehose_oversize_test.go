package ingest

import (
	"bytes"
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

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/gorilla/websocket"
	"github.com/ipfs/go-cid"
)

// commitFrame is a #commit frame of did at seq flagged tooBig, whose
// blocks are blocks bytes of zeros (written in by hand: cbor-gen refuses
// byte strings past 2 MiB).
func commitFrame(t *testing.T, did string, seq int64, blocks int) []byte {
	t.Helper()
	root, err := cid.Decode("bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza")
	if err != nil {
		t.Fatal(err)
	}
	commit := &comatproto.SyncSubscribeRepos_Commit{Repo: did, Seq: seq, Rev: "3mpsjbtci2c2q", TooBig: true, Time: "2026-07-04T14:38:08.999Z",
		Commit: lexutil.LexLink(root), Ops: []*comatproto.SyncSubscribeRepos_RepoOp{}, Blobs: []lexutil.LexLink{}, Blocks: []byte{}}
	var frame bytes.Buffer
	frame.Write([]byte{0xa2, 0x61, 't', 0x67, '#', 'c', 'o', 'm', 'm', 'i', 't', 0x62, 'o', 'p', 0x01}) // {"t": "#commit", "op": 1}
	if err := commit.MarshalCBOR(&frame); err != nil {
		t.Fatal(err)
	}
	if blocks == 0 {
		return frame.Bytes()
	}
	empty := []byte("\x66blocks\x40")
	i := bytes.Index(frame.Bytes(), empty)
	if i < 0 {
		t.Fatal("no empty blocks in the frame")
	}
	out := append([]byte{}, frame.Bytes()[:i+len(empty)-1]...)
	out = append(out, 0x5a, byte(blocks>>24), byte(blocks>>16), byte(blocks>>8), byte(blocks))
	out = append(out, make([]byte, blocks)...)
	return append(out, frame.Bytes()[i+len(empty):]...)
}

// wsServer is a websocket server on loopback that sends each connection
// the messages of send(cursor asked) (binary ones if binary), then holds it
// open; asked lists the cursors the connections asked.
type wsServer struct {
	*httptest.Server
	mu    sync.Mutex
	asked []string
}

func newWSServer(t *testing.T, binary bool, send func(cursor string) [][]byte) *wsServer {
	s := &wsServer{}
	kind := websocket.TextMessage
	if binary {
		kind = websocket.BinaryMessage
	}
	up := websocket.Upgrader{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		cur := r.URL.Query().Get("cursor")
		s.mu.Lock()
		s.asked = append(s.asked, cur)
		s.mu.Unlock()
		for _, m := range send(cur) {
			if c.WriteMessage(kind, m) != nil {
				return
			}
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

// connections returns the cursors the connections asked.
func (s *wsServer) connections() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asked)
}

func (s *wsServer) url() string { return "ws" + strings.TrimPrefix(s.URL, "http") }

// A relay frame past the read bound is read past, counted, and stands for
// a resync of its repository at its seq: the stream goes on after it. (The
// connection failed on it, and each reconnection asked the same cursor and
// got the same frame: the source stopped for good; found by review.) First
// bytes that do not say the seq give no op (the source then reconnects).
func TestFirehoseFramePastTheBound(t *testing.T) {
	const big, small = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", "did:plc:cccccccccccccccccccccccc"
	frames := map[int64][]byte{
		6: commitFrame(t, big, 6, event.MaxFrameSize+1<<20),
		7: commitFrame(t, small, 7, 0),
	}
	srv := newWSServer(t, true, func(cur string) (out [][]byte) {
		after, _ := strconv.ParseInt(cur, 10, 64)
		for seq := after + 1; frames[seq] != nil; seq++ {
			out = append(out, frames[seq])
		}
		return out
	})
	f, err := NewFirehose(srv.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	skips := map[string]int{}
	f.OnSkip = func(reason string) { skips[reason]++ }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	f.Run(ctx, firehoseCursor(5, urlHost(f.URL)), func(op *event.Op, c string) error {
		got = append(got, op.Kind.String()+" "+op.DID+" "+strconv.FormatInt(op.Seq, 10)+" "+c)
		if op.Seq == 7 {
			cancel()
		}
		return nil
	})
	host := urlHost(f.URL)
	want := []string{"sync " + big + " 6 6@" + host, "sync " + small + " 7 7@" + host}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || skips["frame_too_big"] != 1 {
		t.Fatalf("emitted\n%s\nwant\n%s\nskips %v", strings.Join(got, "\n"), strings.Join(want, "\n"), skips)
	}
	if asked := srv.connections(); len(asked) != 1 {
		t.Fatalf("connections asked %v: want one", asked)
	}
	if _, err := event.OversizeFrameOp(make([]byte, 1<<10)); err == nil {
		t.Fatal("a prefix of zeros gave an op")
	}
}

// A Jetstream message past the read bound is read past and counted
// (event_too_big), and the events after it are applied on the same
// connection. (The connection failed on it, and every reconnection got
// the same message: the source stopped for good; found by review.)
func TestJetstreamMessagePastTheBound(t *testing.T) {
	message := func(seq int64, pad int) []byte {
		return fmt.Appendf(nil, `{"did":"did:plc:%024d","time_us":%d,"kind":"account","account":{"active":true,"did":"did:plc:%024d","seq":%d,"time":"2026-01-01T00:00:00Z"},"pad":"%s"}`,
			seq, 1_767_225_600_000_000+seq, seq, seq, strings.Repeat("x", pad))
	}
	srv := newWSServer(t, false, func(string) [][]byte {
		return [][]byte{message(1, 0), message(2, event.MaxJetstreamMessageSize), message(3, 0)}
	})
	j, err := NewJetstream([]string{srv.url() + "/subscribe"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	skips := map[string]int{}
	j.OnSkip = func(reason string) { skips[reason]++ }
	got := follow(t, j, "", 2)
	if !slices.Equal(got, []int64{1, 3}) || skips["event_too_big"] != 1 {
		t.Fatalf("applied relay seqs %v, skips %v; want [1 3] and one event_too_big", got, skips)
	}
	if asked := srv.connections(); len(asked) != 1 {
		t.Fatalf("connections asked %v: want one", asked)
	}
}
