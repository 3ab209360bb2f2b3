package ingest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Any page of a PLC directory's export is read without a crash: every
// line is taken or skipped with a counted reason, the cursor never goes
// back, and a page cut mid-line is an error that the next poll repeats
// (the cursor stays before the cut line). Seeds: real-shaped lines and
// broken ones; make fuzz runs it for FUZZTIME.
func FuzzPLCExport(f *testing.F) {
	ctx := context.Background()
	var body atomic.Value
	body.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(body.Load().(string)))
	}))
	defer srv.Close()
	dir, err := ParsePLCFlag(srv.URL)
	if err != nil {
		f.Fatal(err)
	}
	w, _, _, _ := plcWriter(f, ctx, dir)
	w.log = hclog.NewNullLogger() // the skips are counted; the log would flood the fuzzer's output
	genesis := `{"did":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","operation":{"sig":"x","prev":null,"type":"plc_operation","services":{},"alsoKnownAs":[],"rotationKeys":[],"verificationMethods":{}},"cid":"bafyreia","nullified":false,"createdAt":"2023-01-01T00:00:00.000Z","seq":%d,"type":"sequenced_op"}`
	f.Add(strings.ReplaceAll(genesis, "%d", "5")+"\n"+strings.ReplaceAll(genesis, "%d", "6")+"\n", int64(0))
	f.Add(`{"did":"did:plc:x","operation":{"prev":"bafy"},"seq":3}`+"\n"+`{"seq":2}`+"\n{not json\n\n", int64(1))
	f.Add(`{"did":"did:web:example.com","operation":{"prev":null},"seq":9,"type":"other"}`, int64(4))
	f.Add(strings.ReplaceAll(genesis, "%d", "12")[:40], int64(0))
	f.Fuzz(func(t *testing.T, page string, after int64) {
		body.Store(page)
		fl := newPLCFollower(ctx, dir, w)
		counted := func() float64 { return sumCounters(t, w.metrics.Skipped) + sumCounters(t, w.metrics.Events) }
		before := counted()
		lines, cursor, err := fl.page(ctx, srv.Client(), after, 1000)
		if cursor < after {
			t.Fatalf("cursor went back: %d after %d", cursor, after)
		}
		if lines < 0 || lines > strings.Count(page, "\n")+1 {
			t.Fatalf("%d lines read of a page of %d newlines", lines, strings.Count(page, "\n"))
		}
		if err != nil && !strings.Contains(err.Error(), "cut mid-line") {
			t.Fatalf("page: %v", err)
		}
		if got := counted() - before; got < float64(lines) {
			t.Fatalf("%d lines read, %v taken or skipped (counted)", lines, got)
		}
	})
}

// sumCounters sums every counter a collector holds.
func sumCounters(t *testing.T, c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		sum += pb.GetCounter().GetValue()
	}
	return sum
}
