package ingest

import (
	"strings"
	"testing"
	"time"
)

// PerHostRate spaces the fetches started on one host; other hosts have
// their own budget, and a host idle for a while starts at once.
func TestBackfillPerHostRate(t *testing.T) {
	b := &Backfill{PerHostRate: 4} // one start every 250 ms per host
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []time.Duration
	for range 5 {
		got = append(got, b.hostDelay("pds1.example", t0))
	}
	for i, d := range got {
		if want := time.Duration(i) * 250 * time.Millisecond; d != want {
			t.Errorf("fetch %d on one host waits %v, want %v", i, d, want)
		}
	}
	if d := b.hostDelay("pds2.example", t0); d != 0 {
		t.Errorf("another host waits %v, want 0", d)
	}
	if d := b.hostDelay("pds1.example", t0.Add(10*time.Second)); d != 0 {
		t.Errorf("after an idle while the host waits %v, want 0", d)
	}
	if d := (&Backfill{}).hostDelay("pds1.example", t0); d != 0 {
		t.Errorf("no rate set: waits %v", d)
	}
}

func TestParseBackfillSource(t *testing.T) {
	s, err := ParseSource("backfill+https://relay.example?plc=https://plc.example&per_host=2&rate=5.5&concurrency=8", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.(*Backfill)
	if b.Relay != "https://relay.example" || b.PLC != "https://plc.example" || b.PerHost != 2 || b.PerHostRate != 5.5 || b.Concurrency != 8 || b.NoCompaction {
		t.Fatalf("parsed %+v", b)
	}
	if s, err := ParseSource("backfill+https://relay.example?compact=false", nil); err != nil || !s.(*Backfill).NoCompaction {
		t.Fatalf("compact=false: %v", err)
	}
	if s, err := ParseSource("backfill+https://relay.example?memory_mb=64", nil); err != nil || s.(*Backfill).Memory != 64<<20 {
		t.Fatalf("memory_mb=64: %v", err)
	}
	for _, bad := range []string{"compact=maybe", "per_host=0", "per_host=x", "rate=0", "rate=-1", "rate=NaN", "concurrency=5000", "resyncOnly=true", "memory_mb=8", "memory_mb=x"} {
		if _, err := ParseSource("backfill+https://relay.example?"+bad, nil); err == nil || !strings.Contains(err.Error(), strings.SplitN(bad, "=", 2)[0]) {
			t.Errorf("%s: err %v, want one naming the parameter", bad, err)
		}
	}
}
