package ingest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestSkipLoggerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	s := skipLogger{now: func() time.Time { return now }}

	s.log(log, "jetstream", "bad_event", "position", 10)
	for i := 0; i < 5; i++ {
		now = now.Add(100 * time.Millisecond)
		s.log(log, "jetstream", "bad_event", "position", 11+i)
	}
	s.log(log, "firehose", "bad_event", "position", 3) // another source: its own budget
	now = t0.Add(2 * time.Second)
	s.log(log, "jetstream", "bad_event", "position", 99)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"position=10", "source=firehose", "position=99"} {
		if !strings.Contains(lines[i], "skipped bad input") || !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %q, want %q in it", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[2], "not_logged_since_last=5") {
		t.Errorf("last line does not count the 5 lines not logged: %q", lines[2])
	}
}
