package lsm

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// -rewrite regenerates the expected output of the datadriven files under
// testdata (go test ./lsm -run 'TestTableDataDriven|TestCompactionDatadriven'
// -rewrite); everything else in the files (comments, blank lines, command
// lines, input) is kept as written.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of datadriven tests")

// A datadriven test file is a sequence of cases:
//
//	command arg key=value ...
//	input lines (optional)
//	----
//	expected output
//	<blank line>
//
// Lines starting with # between cases are comments. An expected output
// containing blank lines is written between "----" and "----" twice, as in
// cockroachdb/datadriven.
type ddCase struct {
	pos      string // file:line
	line     string // the command line as written
	cmd      string
	args     []string          // the command's arguments without '='
	kv       map[string]string // its key=value arguments
	input    []string
	expected string // the expected output, each line ending in "\n"; "" for none

	// The expected output's lines in the file: [outFrom, outTo), its
	// "----" delimiters included when it has them.
	outFrom, outTo int
}

// ddFile is a parsed datadriven file.
type ddFile struct {
	path  string
	lines []string // the file's bytes, split at "\n"
	cases []*ddCase
}

// parseDD reads the datadriven file at path.
func parseDD(path string) (*ddFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := &ddFile{path: path, lines: strings.Split(string(data), "\n")}
	lines := f.lines
	for i := 0; i < len(lines); {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			i++
			continue
		}
		c := &ddCase{pos: fmt.Sprintf("%s:%d", filepath.Base(path), i+1), line: l, kv: map[string]string{}}
		fields := strings.Fields(l)
		c.cmd = fields[0]
		for _, a := range fields[1:] {
			if k, v, ok := strings.Cut(a, "="); ok {
				c.kv[k] = v
			} else {
				c.args = append(c.args, a)
			}
		}
		i++
		for i < len(lines) && lines[i] != "----" {
			c.input = append(c.input, lines[i])
			i++
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s: no ---- separator", c.pos)
		}
		i++
		c.outFrom = i
		var out []string
		if i < len(lines) && lines[i] == "----" {
			// Output with blank lines: ends at "----\n----".
			i++
			for i < len(lines) && !(lines[i] == "----" && i+1 < len(lines) && lines[i+1] == "----") {
				out = append(out, lines[i])
				i++
			}
			if i == len(lines) {
				return nil, fmt.Errorf("%s: output not closed by ----, ----", c.pos)
			}
			i += 2
		} else {
			for i < len(lines) && lines[i] != "" {
				out = append(out, lines[i])
				i++
			}
		}
		c.outTo = i
		if len(out) > 0 {
			c.expected = strings.Join(out, "\n") + "\n"
		}
		f.cases = append(f.cases, c)
	}
	return f, nil
}

// render returns the file with the expected output of each case replaced
// by outputs[i] (as ddOutput returns it), everything else as it was.
func (f *ddFile) render(outputs []string) string {
	var b strings.Builder
	prev := 0
	for i, c := range f.cases {
		for _, l := range f.lines[prev:c.outFrom] {
			b.WriteString(l + "\n")
		}
		out := outputs[i]
		if strings.Contains(strings.TrimRight(out, "\n"), "\n\n") || strings.HasPrefix(out, "\n") {
			b.WriteString("----\n" + out + "----\n----\n")
		} else {
			b.WriteString(out)
		}
		prev = c.outTo
	}
	b.WriteString(strings.Join(f.lines[prev:], "\n"))
	return b.String()
}

// ddOutput is a command's output as a file holds it: "" for none, else
// lines each ending in "\n".
func ddOutput(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}

// runDD runs every case of the datadriven file at path through run, in
// order, and compares each output with the case's expected output; with
// -rewrite it writes the outputs back into the file instead.
func runDD(t *testing.T, path string, run func(t *testing.T, c *ddCase) string) {
	t.Helper()
	f, err := parseDD(path)
	if err != nil {
		t.Fatal(err)
	}
	outputs := make([]string, len(f.cases))
	for i, c := range f.cases {
		out := ddOutput(run(t, c))
		outputs[i] = out
		if !*rewrite && out != c.expected {
			t.Errorf("%s: %s\nwant:\n%sgot:\n%s", c.pos, c.line, c.expected, out)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(f.render(outputs)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// atoi returns the integer argument k of the case, or def without one.
func (c *ddCase) atoi(t *testing.T, k string, def int) int {
	t.Helper()
	v, ok := c.kv[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", c.pos, k, v, err)
	}
	return n
}

// ddSuites are the datadriven files, with the commands of each that print
// nothing.
var ddSuites = []struct {
	glob   string
	silent map[string]bool
}{
	{"testdata/table/*", nil},
	{"testdata/compaction/*.txt", map[string]bool{"open": true, "links": true, "revoke": true, "flush": true}},
}

// The datadriven files must be complete: every file parses into cases,
// every case of a command that prints has its expected output, and the
// rewriter, given each case's expected output, writes the file back byte
// for byte (so -rewrite changes expected outputs only).
func TestDataDrivenFilesParse(t *testing.T) {
	for _, suite := range ddSuites {
		files, err := filepath.Glob(suite.glob)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no datadriven files (%v)", suite.glob, err)
		}
		for _, path := range files {
			f, err := parseDD(path)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			if len(f.cases) == 0 {
				t.Errorf("%s: no cases", path)
			}
			outputs := make([]string, len(f.cases))
			for i, c := range f.cases {
				outputs[i] = c.expected
				if c.expected == "" && !suite.silent[c.cmd] {
					t.Errorf("%s: %s has no expected output", c.pos, c.cmd)
				}
				if c.expected != "" && suite.silent[c.cmd] {
					t.Errorf("%s: %s prints nothing, but the file expects output", c.pos, c.cmd)
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.render(outputs); got != string(data) {
				t.Errorf("%s: rewriting the file with its own expected outputs changes it", path)
			}
		}
	}
}

// The rewriter replaces expected outputs only: comments, blank lines,
// command lines and input stay as written, and an output with blank lines
// gets the double "----" delimiters.
func TestDataDrivenRewriteKeepsComments(t *testing.T) {
	const file = `# A comment, then a blank line.

cmd a b=1
input line
----
old output

# Two comments
# before a case without output.
silent
----


two-lines
----
----
x

y
----
----

# The end.
`
	path := filepath.Join(t.TempDir(), "dd")
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := parseDD(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.cases) != 3 {
		t.Fatalf("%d cases", len(f.cases))
	}
	c := f.cases[0]
	if c.cmd != "cmd" || len(c.args) != 1 || c.args[0] != "a" || c.kv["b"] != "1" || len(c.input) != 1 || c.expected != "old output\n" {
		t.Fatalf("first case: %+v", c)
	}
	if f.cases[1].expected != "" || f.cases[2].expected != "x\n\ny\n" {
		t.Fatalf("expected outputs %q, %q", f.cases[1].expected, f.cases[2].expected)
	}
	if got := f.render([]string{"old output\n", "", "x\n\ny\n"}); got != file {
		t.Fatalf("unchanged outputs: the file changed:\n%s", got)
	}
	want := strings.NewReplacer("old output\n", "new\noutput\n", "----\n----\nx\n\ny\n----\n----\n", "----\nz\n").Replace(file)
	want = strings.Replace(want, "silent\n----\n", "silent\n----\n----\nnow\n\nprints\n----\n----\n", 1)
	if got := f.render([]string{"new\noutput\n", "now\n\nprints\n", "z\n"}); got != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", got, want)
	}
}
