package lsm

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of datadriven tests")

// ddCase is one datadriven command: a command line, input lines, expected
// output.
type ddCase struct {
	pos      string
	cmd      string
	args     map[string]string
	input    []string
	expected string
}

// parseDD reads a datadriven file:
//
//	command key=value ...
//	input line
//	----
//	expected output
//	<blank line>
func parseDD(t *testing.T, path string) []ddCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []ddCase
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		c := ddCase{pos: fmt.Sprintf("%s:%d", path, i+1), args: map[string]string{}}
		f := strings.Fields(l)
		c.cmd = f[0]
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			c.args[k] = v
		}
		i++
		for ; i < len(lines) && lines[i] != "----"; i++ {
			c.input = append(c.input, lines[i])
		}
		i++
		var exp []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			exp = append(exp, lines[i])
		}
		c.expected = strings.Join(exp, "\n")
		out = append(out, c)
	}
	return out
}

func writeDD(t *testing.T, path string, cases []ddCase, got []string) {
	var b strings.Builder
	for i, c := range cases {
		b.WriteString(c.cmd)
		keys := make([]string, 0, len(c.args))
		for k := range c.args {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if c.args[k] == "" {
				fmt.Fprintf(&b, " %s", k)
			} else {
				fmt.Fprintf(&b, " %s=%s", k, c.args[k])
			}
		}
		b.WriteString("\n")
		for _, l := range c.input {
			b.WriteString(l + "\n")
		}
		b.WriteString("----\n")
		if got[i] != "" {
			b.WriteString(got[i] + "\n")
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func parseRID(t *testing.T, s string) link.RecordID {
	f := strings.Split(s, ".")
	if len(f) != 3 {
		t.Fatalf("record id %q: want rkey.collection.did", s)
	}
	var v [3]uint64
	for i := range f {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		v[i] = n
	}
	return link.RecordID{RKey: v[0], Collection: v[1], DID: v[2]}
}

func fmtRID(r link.RecordID) string { return fmt.Sprintf("%d.%d.%d", r.RKey, r.Collection, r.DID) }

// dumpRuns prints every run of the current manifest and the records of its
// tables, decoded from the store.
func dumpRuns(t *testing.T, db *DB, tree Tree) string {
	ctx := context.Background()
	v := db.View()
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d", v.Generation())
	for _, vr := range v.trees[tree] {
		fmt.Fprintf(&b, "\nrun seq=%d kind=%s tables=%d records=%d", vr.run.Seq, kindName(vr.run.Kind), len(vr.run.Tables), vr.run.Records())
		for _, vt := range vr.tables {
			if vt == nil {
				continue
			}
			fmt.Fprintf(&b, "\n  table shard=%d/%d records=%d frames=%d", vt.ref.Shard, 1<<vt.ref.ShardBits, vt.ref.Records, len(vt.meta.Frames))
			g := &fetchGroup{t: vt, first: 0, last: len(vt.meta.Frames) - 1}
			if _, err := db.reader.fetch(ctx, g); err != nil {
				t.Fatal(err)
			}
			for _, recs := range g.frames {
				for o := 0; o < len(recs); o += vt.meta.Format.Width {
					if tree == TreeLinks {
						l := link.GetBacklink(recs[o:])
						fmt.Fprintf(&b, "\n    %s <- %s loc=%d rev=%d", fmtRID(l.Target), fmtRID(l.Source), l.Location, l.SourceRev)
					} else {
						r := link.GetRevocation(recs[o:])
						fmt.Fprintf(&b, "\n    %s rev=%d", fmtRID(r.Source), r.Rev)
					}
				}
			}
		}
	}
	return b.String()
}

func kindName(k RunKind) string {
	switch k {
	case RunDelta:
		return "delta"
	case RunCompacted:
		return "compacted"
	}
	return "unknown"
}

// TestCompactionDatadriven pins flush and compaction results: folding of
// identical links to the newest rev, revocations to the newest per source,
// shard splits, and which runs a size tier picks.
func TestCompactionDatadriven(t *testing.T) {
	files, _ := filepath.Glob("testdata/compaction/*.txt")
	if len(files) == 0 {
		t.Fatal("no datadriven files")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ctx := context.Background()
			cases := parseDD(t, path)
			got := make([]string, len(cases))
			var db *DB
			for i, c := range cases {
				var out string
				switch c.cmd {
				case "open":
					opts := Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true}
					if v, ok := c.args["fanin"]; ok {
						opts.CompactionFanIn, _ = strconv.Atoi(v)
					}
					if v, ok := c.args["shard-bytes"]; ok {
						n, _ := strconv.ParseUint(v, 10, 64)
						opts.ShardTargetBytes = n
					}
					var err error
					if db, err = Open(ctx, opts); err != nil {
						t.Fatal(err)
					}
				case "links":
					for _, l := range c.input {
						f := strings.Fields(l)
						if len(f) != 4 {
							t.Fatalf("%s: link wants: target source location rev", c.pos)
						}
						loc, _ := strconv.ParseUint(f[2], 10, 64)
						rev, _ := strconv.ParseUint(f[3], 10, 64)
						bl := link.Backlink{Target: parseRID(t, f[0]), Source: parseRID(t, f[1]), Location: link.Location(loc), SourceRev: rev}
						if err := db.AddBacklink(&bl); err != nil {
							t.Fatal(err)
						}
					}
				case "revoke":
					for _, l := range c.input {
						f := strings.Fields(l)
						rev, _ := strconv.ParseUint(f[1], 10, 64)
						v := link.Revocation{Source: parseRID(t, f[0]), Rev: rev}
						if err := db.AddRevocation(&v); err != nil {
							t.Fatal(err)
						}
					}
				case "flush":
					if err := db.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				case "compact":
					did, err := db.Compact(ctx)
					if err != nil {
						t.Fatal(err)
					}
					out = fmt.Sprintf("compacted: %v", did)
				case "runs":
					out = dumpRuns(t, db, Tree(c.args["tree"]))
				case "query":
					res, err := db.Backlinks(ctx, Query{Target: parseRID(t, c.args["target"])})
					if err != nil {
						t.Fatal(err)
					}
					var lines []string
					for _, l := range res.Links {
						lines = append(lines, fmt.Sprintf("%s loc=%d rev=%d", fmtRID(l.Source), l.Location, l.SourceRev))
					}
					out = strings.Join(lines, "\n")
					if out == "" {
						out = "(none)"
					}
				default:
					t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
				}
				got[i] = out
				if !*rewrite && out != c.expected {
					t.Errorf("%s: %s:\n got:\n%s\nwant:\n%s", c.pos, c.cmd, out, c.expected)
				}
			}
			if *rewrite {
				writeDD(t, path, cases, got)
			}
		})
	}
}
