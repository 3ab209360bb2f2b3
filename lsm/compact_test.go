package lsm

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

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
			meta := mustMeta(t, vt)
			fmt.Fprintf(&b, "\n  table shard=%d/%d records=%d frames=%d", vt.ref.Shard, 1<<vt.ref.ShardBits, vt.ref.Records, meta.NumFrames())
			g := &fetchGroup{t: vt, meta: meta, first: 0, last: meta.NumFrames() - 1}
			if _, err := db.reader.fetch(ctx, g); err != nil {
				t.Fatal(err)
			}
			for _, recs := range g.frames {
				for o := 0; o < len(recs); o += meta.Format.Width {
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
			var db *DB
			runDD(t, path, func(t *testing.T, c *ddCase) string { return compactionRunDD(t, &db, c) })
		})
	}
}

// compactionRunDD runs one command of a compaction datadriven file on *db
// (which "open" sets) and returns its output.
func compactionRunDD(t *testing.T, db **DB, c *ddCase) string {
	ctx := context.Background()
	switch c.cmd {
	case "open":
		opts := Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true}
		if v, ok := c.kv["fanin"]; ok {
			opts.CompactionFanIn, _ = strconv.Atoi(v)
		}
		if v, ok := c.kv["shard-bytes"]; ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			opts.ShardTargetBytes = n
		}
		var err error
		if *db, err = Open(ctx, opts); err != nil {
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
			if err := (*db).AddBacklink(&bl); err != nil {
				t.Fatal(err)
			}
		}
	case "revoke":
		for _, l := range c.input {
			f := strings.Fields(l)
			rev, _ := strconv.ParseUint(f[1], 10, 64)
			v := link.Revocation{Source: parseRID(t, f[0]), Rev: rev}
			if err := (*db).AddRevocation(&v); err != nil {
				t.Fatal(err)
			}
		}
	case "flush":
		if err := (*db).Flush(ctx); err != nil {
			t.Fatal(err)
		}
	case "compact":
		did, err := (*db).Compact(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("compacted: %v", did)
	case "runs":
		return dumpRuns(t, *db, Tree(c.kv["tree"]))
	case "query":
		res, err := (*db).Backlinks(ctx, Query{Target: parseRID(t, c.kv["target"])})
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range res.Links {
			lines = append(lines, fmt.Sprintf("%s loc=%d rev=%d", fmtRID(l.Source), l.Location, l.SourceRev))
		}
		if len(lines) == 0 {
			return "(none)"
		}
		return strings.Join(lines, "\n")
	default:
		t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
	}
	return ""
}

// TestPickRatioKeepsRevocationRunsFew: the revocation tree merges its
// newest runs into an older one by size ratio, so however many flushes
// it took, its runs grow by more than revocationMergeRatio from newest
// to oldest and stay about log2(bytes / flush) in number, where
// size-tiered compaction (the links tree's) keeps up to fan-in minus one
// runs in every tier.
func TestPickRatioKeepsRevocationRunsFew(t *testing.T) {
	mkRun := func(id int, tree Tree, bytes uint64) Run {
		return Run{ID: strconv.Itoa(id), Tree: tree, Seq: uint64(id), Tables: []TableRef{{ID: strconv.Itoa(id), DataBytes: bytes}}}
	}
	for _, flush := range []uint64{4 << 10, 1600 << 10} {
		m := &Manifest{}
		id := 0
		var total, merged uint64
		maxRuns := 0
		for range 3000 {
			id++
			m.Runs = append(m.Runs, mkRun(id, TreeRevocations, flush))
			total += flush
			for {
				in := PickCompaction(m, TreeRevocations, DefaultCompactionFanIn)
				if in == nil {
					break
				}
				if len(in) < 2 {
					t.Fatalf("a merge of %d run", len(in))
				}
				drop := map[string]bool{}
				var sum uint64
				for _, r := range in {
					drop[r.ID] = true
					sum += r.Bytes()
				}
				var keep []Run
				for _, r := range m.Runs {
					if !drop[r.ID] {
						keep = append(keep, r)
					}
				}
				id++
				m.Runs = append(keep, mkRun(id, TreeRevocations, sum))
				merged += sum
			}
			runs := m.RunsOf(TreeRevocations)
			maxRuns = max(maxRuns, len(runs))
			for i := 0; i < len(runs); i++ {
				var newer uint64
				for _, r := range runs[i:] {
					newer += r.Bytes()
				}
				newer -= runs[i].Bytes()
				if i < len(runs)-1 && newer*revocationMergeRatio >= runs[i].Bytes() {
					t.Fatalf("flush %d: run %d of %d (%d bytes) has %d bytes newer than it and was not merged", flush, i, len(runs), runs[i].Bytes(), newer)
				}
			}
		}
		// log2(3000) ~ 11.6: the bound of the ratio rule is about that plus one.
		if maxRuns > 13 {
			t.Errorf("flush %d: %d runs at most, want <= 13", flush, maxRuns)
		}
		if amp := float64(merged+total) / float64(total); amp > 16 {
			t.Errorf("flush %d: write amplification %.1f, want <= 16", flush, amp)
		}
		t.Logf("flush %d B: at most %d runs, %d at the end, write amplification %.1f", flush, maxRuns, len(m.RunsOf(TreeRevocations)), float64(merged+total)/float64(total))
	}
	// As a cluster publishes: a merge's output goes out with the next
	// flush, after its run, so its Seq is the newer; the next pick must
	// not take the whole tree again with that flush.
	for _, flush := range []uint64{4 << 10, 1600 << 10} {
		m := &Manifest{}
		id := 0
		mk := func(bytes uint64, kind RunKind) Run {
			id++
			return Run{ID: strconv.Itoa(id), Tree: TreeRevocations, Kind: kind, Tables: []TableRef{{ID: strconv.Itoa(id), DataBytes: bytes}}}
		}
		var pending *Edit // a merge done, waiting for the next flush
		var total, merged uint64
		for range 3000 {
			e := Edit{Base: m.Generation, Add: []Run{mk(flush, RunDelta)}}
			total += flush
			if pending != nil {
				e.Add, e.Remove, pending = append(e.Add, pending.Add...), pending.Remove, nil
			}
			next, _, err := m.Apply(e)
			if err != nil {
				t.Fatal(err)
			}
			m = next
			if in := PickCompaction(m, TreeRevocations, DefaultCompactionFanIn); in != nil {
				var sum uint64
				var ids []string
				for _, r := range in {
					sum += r.Bytes()
					ids = append(ids, r.ID)
				}
				merged += sum
				pending = &Edit{Add: []Run{mk(sum, RunCompacted)}, Remove: ids}
			}
		}
		runs := len(m.RunsOf(TreeRevocations))
		if amp := float64(merged+total) / float64(total); amp > 16 || runs > 13 {
			t.Errorf("published with flushes, flush %d: write amplification %.1f, %d runs at the end; want <= 16 and <= 13", flush, amp, runs)
		}
	}
	// The links tree is still size-tiered: eight runs of one tier merge.
	m := &Manifest{}
	for i := range 7 {
		m.Runs = append(m.Runs, mkRun(i+1, TreeLinks, 4<<10))
	}
	if in := PickCompaction(m, TreeLinks, 8); in != nil {
		t.Fatalf("links: picked %d of 7 runs of one tier", len(in))
	}
	m.Runs = append(m.Runs, mkRun(8, TreeLinks, 4<<10))
	if in := PickCompaction(m, TreeLinks, 8); len(in) != 8 {
		t.Fatalf("links: picked %d of 8 runs of one tier, want 8", len(in))
	}
}
