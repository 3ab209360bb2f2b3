package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
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
	var out, errb bytes.Buffer
	args := []string{"--url", "http://" + ln.Addr().String(), "--conns", "4", "--targets", "5", "--limit", "7", "--seconds", "1", "--rate", "2000"}
	if err := clientsFloodMain(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var f floodResult
	if err := json.Unmarshal(out.Bytes(), &f); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	t.Logf("%+v; served %d, closed by the server %d", f, served.Load(), closedByServer.Load())
	// Open loop: asked at the rate, though the server answers ~4 conns /
	// 2 ms = 2,000 a second at best and closes every tenth connection.
	if want := rate * seconds; float64(f.Asked) < 0.9*want || float64(f.Asked) > 1.1*want {
		t.Errorf("asked %d, want ~%.0f", f.Asked, want)
	}
	if f.Sent == 0 || f.Sent > f.Asked {
		t.Errorf("sent %d of %d asked", f.Sent, f.Asked)
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
