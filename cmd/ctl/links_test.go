package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestLinksCommand(t *testing.T) {
	cases := []struct {
		args      []string
		lines     int
		withOp    bool
		firstPath string
	}{
		{[]string{"links", "--car", "../../testdata/jetstream/corpus/repo.car"}, 22, false, ".subject.uri"},
		{[]string{"links", "--jetstream", "../../testdata/jetstream/corpus/expected_v1.jsonl"}, 175 + 4, true, ".subject.uri"},
		{[]string{"links", "--firehose", "../../testdata/jetstream/corpus/frames.bin"}, 175 + 4, true, ".subject.uri"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != c.lines {
			t.Fatalf("%v: %d lines, want %d", c.args, len(lines), c.lines)
		}
		deletes := 0
		for i, l := range lines {
			var v map[string]string
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			if !strings.HasPrefix(v["source"], "at://did:") {
				t.Fatalf("line %d: source %q", i, v["source"])
			}
			if _, ok := v["op"]; ok != c.withOp {
				t.Fatalf("line %d: op present %v", i, ok)
			}
			if v["op"] == "delete" {
				deletes++
				if v["target"] != "" || v["path"] != "" {
					t.Fatalf("delete with target: %s", l)
				}
				continue
			}
			if v["target"] == "" || !strings.HasPrefix(v["path"], ".") {
				t.Fatalf("line %d: %s", i, l)
			}
		}
		if c.withOp && deletes != 4 {
			t.Fatalf("%v: %d deletes", c.args, deletes)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"links"}, &out, &errb); code != 2 {
		t.Fatalf("no input: exit %d", code)
	}
	if code := run([]string{"links", "--car", "/nonexistent.car"}, &out, &errb); code != 1 {
		t.Fatalf("missing file: exit %d", code)
	}
}
