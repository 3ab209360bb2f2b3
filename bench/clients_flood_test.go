package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The open-loop flooder (clients-flood --rate) asks at its rate whatever
// the server answers, pipelines its queries, counts the answers by
// status, and dials again the connections the server closes.
func TestOpenFloodAsksAtItsRate(t *testing.T) {
	var served, closedByServer atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		if r.URL.Path != "/xrpc/blue.cerulea.backlinks.listBacklinks" || r.URL.Query().Get("limit") != "7" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch {
		case n%10 == 0: // an answer that ends its connection
			closedByServer.Add(1)
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusTooManyRequests)
		case n%2 == 0:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.Write([]byte(`{"links":[]}`))
		}
		time.Sleep(2 * time.Millisecond) // slower than asked: answers fall behind
	})}
	go srv.Serve(ln)
	defer srv.Close()

	const rate, seconds, conns = 2000.0, 1.0, 4
	f := openFloodFor(t, ln.Addr().String(), conns, rate)
	t.Logf("%+v; served %d, closed by the server %d", f, served.Load(), closedByServer.Load())
	// Open loop: asked at the rate, though the server answers ~4 conns /
	// 2 ms = 2,000 a second at best and closes every tenth connection.
	if want := rate * seconds; float64(f.Asked) < 0.9*want || float64(f.Asked) > 1.1*want {
		t.Errorf("asked %d, want ~%.0f", f.Asked, want)
	}
	if f.Sent == 0 || f.Sent > f.Asked {
		t.Errorf("sent %d of %d asked", f.Sent, f.Asked)
	}
	if f.Sent < f.OK+f.Limited {
		t.Errorf("sent %d, fewer than the %d answered", f.Sent, f.OK+f.Limited)
	}
	if f.OK == 0 || f.Limited == 0 || f.Other != 0 {
		t.Errorf("answers: %d ok, %d limited, %d other; want both kinds and no other", f.OK, f.Limited, f.Other)
	}
	if got := int64(f.OK + f.Limited); got > served.Load() {
		t.Errorf("%d answers counted, the server answered %d", got, served.Load())
	}
	// Every connection the server closed was dialled again.
	if f.Dials < conns+int(min(closedByServer.Load(), 4)) {
		t.Errorf("%d dials with %d connections and %d closed by the server", f.Dials, conns, closedByServer.Load())
	}
}

// Against a server that answers a connection's query only every 200 ms,
// the flooder still writes at its rate: its queries are pipelined, not
// sent one at a time as the answers come.
func TestOpenFloodPipelines(t *testing.T) {
	var served atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		served.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	f := openFloodFor(t, ln.Addr().String(), 2, 1000)
	t.Logf("%+v; served %d", f, served.Load())
	// Two connections answered every 200 ms: at most ~10 answers; a
	// closed loop would have written ~12 queries, the open loop ~1,000.
	if f.Limited > 12 || f.OK != 0 {
		t.Errorf("%d answered 429, %d 200: want at most ~10, all 429", f.Limited, f.OK)
	}
	if f.Sent < 900 || f.Dials != 2 {
		t.Errorf("sent %d queries over %d dials, want ~1,000 over 2 connections", f.Sent, f.Dials)
	}
}

// openFloodFor runs clients-flood for a second at rate from conns
// connections against addr (queries of limit 7 over five targets).
func openFloodFor(t *testing.T, addr string, conns int, rate float64) floodResult {
	t.Helper()
	var out, errb bytes.Buffer
	args := []string{"--url", "http://" + addr, "--conns", strconv.Itoa(conns), "--targets", "5", "--limit", "7", "--seconds", "1", "--rate", strconv.FormatFloat(rate, 'f', -1, 64)}
	if err := clientsFloodMain(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var f floodResult
	if err := json.Unmarshal(out.Bytes(), &f); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return f
}
