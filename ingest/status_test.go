package ingest

import (
	"strconv"
	"testing"
	"time"
)

func TestSourcesStatus(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	js, err := NewJetstream([]string{"ws://127.0.0.1:1/subscribe"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fh, err := NewFirehose("ws://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	fh.last.see(now.Add(-3 * time.Second))
	fh.last.see(now.Add(-9 * time.Second)) // older: ignored
	rp := &Replay{Path: "/tmp/capture.jsonl"}
	bf := &Backfill{Relay: "http://127.0.0.1:1"}
	bf.stats.add(func(s *BackfillStats) { s.Listed, s.Done, s.Failed = 10, 7, 1 })
	cursors := map[string]string{
		"jetstream":                   strconv.FormatInt(now.Add(-90*time.Second).UnixMicro(), 10),
		"firehose":                    "42",
		"replay:/tmp/capture.jsonl":   "eof:152",
		"backfill:http://127.0.0.1:1": "did:plc:abc",
	}
	got := SourcesStatus([]Source{js, fh, rp, bf}, func(n string) string { return cursors[n] }, now)
	if len(got) != 4 {
		t.Fatalf("got %d sources", len(got))
	}
	check := func(i int, kind, cursor string, done bool, lag float64) {
		t.Helper()
		s := got[i]
		if s.Kind != kind || s.Cursor != cursor || s.Done != done {
			t.Errorf("source %d = %+v, want kind %s cursor %s done %v", i, s, kind, cursor, done)
		}
		switch {
		case lag < 0 && s.LagSeconds != nil:
			t.Errorf("source %d: lag %v, want none", i, *s.LagSeconds)
		case lag >= 0 && (s.LagSeconds == nil || *s.LagSeconds != lag):
			t.Errorf("source %d: lag %v, want %v", i, s.LagSeconds, lag)
		}
	}
	check(0, "jetstream", cursors["jetstream"], false, 90)
	check(1, "firehose", "42", false, 3)
	check(2, "replay", "eof:152", true, -1)
	check(3, "backfill", "did:plc:abc", false, -1)
	if got[1].LastEvent != "2026-11-30T11:59:57Z" {
		t.Errorf("firehose last event %q", got[1].LastEvent)
	}
	if b := got[3].Backfill; b["listed"] != 10 || b["done"] != 7 || b["failed"] != 1 {
		t.Errorf("backfill counters %v", b)
	}
}
