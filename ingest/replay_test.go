package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/ingest/event"
)

const corpus = "../testdata/jetstream/corpus/"

// replayAll runs a replay of path from its start and returns the
// operations' records' URIs and actions, the last cursor, and the skips by
// reason.
func replayAll(t *testing.T, path string) ([]string, string, map[string]int) {
	t.Helper()
	skips := map[string]int{}
	r := &Replay{Path: path, OnSkip: func(reason string) { skips[reason]++ }}
	var ops []string
	last := ""
	err := r.Run(context.Background(), "", func(op *event.Op, c string) error {
		if op != nil {
			ops = append(ops, op.DID+"/"+op.Collection+"/"+op.RKey+" "+op.Action.String())
		}
		last = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ops, last, skips
}

// A line past the Jetstream message bound in a replayed capture is
// counted and read past: every line after it is read, and the capture's
// end is its last line. (It ended the replay, published as read to the
// end: the rest of the file was lost.)
func TestReplayReadsPastALongLine(t *testing.T) {
	b, err := os.ReadFile(corpus + "expected_v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.jsonl")
	if err := os.WriteFile(whole, b, 0o644); err != nil {
		t.Fatal(err)
	}
	want, wantLast, _ := replayAll(t, whole)
	if n := strconv.Itoa(len(lines)); len(want) < 100 || wantLast != EOFCursor(n) {
		t.Fatalf("the corpus replayed as %d operations to %q, want to %q", len(want), wantLast, EOFCursor(n))
	}
	long := `{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","pad":"` + strings.Repeat("x", event.MaxJetstreamMessageSize) + `"}` + "\n"
	cut := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(cut, []byte(lines[0]+long+strings.Join(lines[1:], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	got, last, skips := replayAll(t, cut)
	if n := strconv.Itoa(len(lines) + 1); strings.Join(got, "\n") != strings.Join(want, "\n") || last != EOFCursor(n) || skips["line_too_long"] != 1 {
		t.Fatalf("with a long second line: %d operations (want %d), last cursor %q (want %q), skips %v", len(got), len(want), last, EOFCursor(n), skips)
	}
	// Read again from a cursor past the long line: the same tail.
	r := &Replay{Path: cut}
	var tail int
	if err := r.Run(context.Background(), "2", func(op *event.Op, c string) error {
		if op != nil {
			tail++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := replayAll(t, writeLines(t, dir, lines[:1])); tail != len(want)-len(first) {
		t.Fatalf("from cursor 2: %d operations, want %d", tail, len(want)-len(first))
	}
}

func writeLines(t *testing.T, dir string, lines []string) string {
	p := filepath.Join(dir, "first.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A frame past MaxFrameSize in a replayed capture of relay frames is
// counted and read past; a truncated last frame ends the capture, counted.
func TestReplayReadsPastABigFrame(t *testing.T) {
	b, err := os.ReadFile(corpus + "frames.bin")
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	if err := event.ReadFrames(bufio.NewReader(bytes.NewReader(b)), func(f []byte) error {
		frames = append(frames, append([]byte(nil), f...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	record := func(f []byte) []byte {
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(f))), f...)
	}
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.bin")
	if err := os.WriteFile(whole, b, 0o644); err != nil {
		t.Fatal(err)
	}
	want, wantLast, _ := replayAll(t, whole)
	if len(want) < 100 || wantLast != EOFCursor("150") {
		t.Fatalf("the corpus replayed as %d operations to %q", len(want), wantLast)
	}
	var out []byte
	for i, f := range frames {
		out = append(out, record(f)...)
		if i == 9 {
			out = append(out, record(make([]byte, event.MaxFrameSize+1))...)
		}
	}
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, out, 0o644); err != nil {
		t.Fatal(err)
	}
	got, last, skips := replayAll(t, big)
	if strings.Join(got, "\n") != strings.Join(want, "\n") || last != EOFCursor("151") || skips["frame_too_big"] != 1 {
		t.Fatalf("with a big eleventh frame: %d operations (want %d), last cursor %q (want %q), skips %v", len(got), len(want), last, EOFCursor("151"), skips)
	}
	cut := filepath.Join(dir, "cut.bin")
	if err := os.WriteFile(cut, out[:len(out)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, last, skips := replayAll(t, cut); last != EOFCursor("150") || skips["truncated"] != 1 {
		t.Fatalf("with its last frame cut short: last cursor %q, skips %v", last, skips)
	}
}
