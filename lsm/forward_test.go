package lsm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// writeRecord writes the links of src at rev as the ingest writer does:
// each backlink, and when there are two or more of them, one forward entry
// per backlink at the same stamp. The model hears of the backlinks alone.
func writeRecord(t *testing.T, db *DB, m *model, src link.RecordID, rev uint64, links []link.Backlink) {
	t.Helper()
	for i := range links {
		l := links[i]
		l.Source, l.SourceRev = src, rev
		if err := db.AddBacklink(&l); err != nil {
			t.Fatal(err)
		}
		m.addLink(l)
	}
	if len(links) < 2 {
		return
	}
	for i := range links {
		f := link.Backlink{Target: link.ForwardKey(src), Source: links[i].Target, Location: links[i].Location, SourceRev: rev}
		if err := db.AddBacklink(&f); err != nil {
			t.Fatal(err)
		}
	}
}

// liveBySource inverts the model: the live links out of each source, in
// (target, location) order.
func (m *model) liveBySource() map[link.RecordID][]link.Backlink {
	out := map[link.RecordID][]link.Backlink{}
	for tg := range m.links {
		for _, l := range m.live(tg, Filter{}) {
			out[l.Source] = append(out[l.Source], l)
		}
	}
	for _, ls := range out {
		slices.SortFunc(ls, func(a, b link.Backlink) int {
			if c := a.Target.Compare(b.Target); c != 0 {
				return c
			}
			return cmpPos(link.RecordID{}, a.Location, link.RecordID{}, b.Location)
		})
	}
	return out
}

// checkTargets demands that every real target's pages, All and Count are
// the model's: no forward entry ever shows up among a target's links.
func checkTargets(t *testing.T, db *DB, m *model) {
	t.Helper()
	ctx := context.Background()
	for tg := range m.links {
		want := m.live(tg, Filter{})
		all, _, err := db.Reader().All(ctx, db.View(), tg, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := db.Backlinks(ctx, Query{Target: tg})
		if err != nil {
			t.Fatal(err)
		}
		n, _, err := db.Count(ctx, tg, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(all, want) || !slices.Equal(res.Links, want) || n != uint64(len(want)) {
			t.Fatalf("target %v: All %v, page %v, count %d; want %v", tg, all, res.Links, n, want)
		}
		for _, l := range all {
			if l.Target.IsForward() || l.Source.IsForward() {
				t.Fatalf("target %v: a forward entry among its links: %v", tg, l)
			}
		}
	}
}

// Forward over hand-made records, in delta runs and then in one compacted
// run: a record with 3 links returns them with their targets and
// locations; one link gets no forward entry (empty); a deleted record, a
// record of a reset repository and an unknown one are empty; an updated
// record returns its new links only; a deleted target does not hide the
// links to it; the answer follows the order of the sources asked, repeats
// included; no real target's links include a forward entry.
func TestForward(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true, CompactionFanIn: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel()
	rec := func(rkey, did uint64) link.RecordID {
		return link.RecordID{RKey: 1<<40 + rkey, Collection: link.CollectionFirst + 1, DID: did}
	}
	list, account, url := rec(1, 50), link.RepoID(51), link.HashTarget("https://example.com/x")
	post := rec(2, 52)
	loc := func(p uint64) link.Location { return link.MakeLocation(p, p == 3) }
	to := func(tg link.RecordID, p uint64) link.Backlink { return link.Backlink{Target: tg, Location: loc(p)} }

	three, one, deleted, updated, reset := rec(10, 1), rec(11, 1), rec(12, 1), rec(13, 1), rec(14, 9)
	unknown := rec(99, 1)
	stamp := uint64(100)
	revoke := func(src link.RecordID) {
		v := link.Revocation{Source: src, Rev: stamp}
		if err := db.AddRevocation(&v); err != nil {
			t.Fatal(err)
		}
		m.revoke(v)
	}
	flush := func() {
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		m.flush()
	}
	stamp++
	writeRecord(t, db, m, three, stamp, []link.Backlink{to(list, 1), to(account, 2), to(url, 3)})
	stamp++
	writeRecord(t, db, m, one, stamp, []link.Backlink{to(post, 1)})
	stamp++
	writeRecord(t, db, m, deleted, stamp, []link.Backlink{to(post, 1), to(list, 2)})
	stamp++
	writeRecord(t, db, m, updated, stamp, []link.Backlink{to(post, 1), to(list, 2), to(url, 3)})
	stamp++
	writeRecord(t, db, m, reset, stamp, []link.Backlink{to(post, 1), to(account, 2)})
	flush()
	stamp++
	revoke(deleted)
	stamp++
	revoke(updated) // an update: the revocation, then the new links at its stamp
	writeRecord(t, db, m, updated, stamp, []link.Backlink{to(account, 1), to(post, 2)})
	stamp++
	revoke(link.RepoID(9))
	stamp++
	revoke(list) // a target deleted: the links to it stay
	stamp++
	revoke(link.RepoID(51))
	flush()

	want := map[link.RecordID][]link.Backlink{}
	for _, l := range []link.Backlink{
		{Target: list, Source: three, Location: loc(1), SourceRev: 101},
		{Target: account, Source: three, Location: loc(2), SourceRev: 101},
		{Target: url, Source: three, Location: loc(3), SourceRev: 101},
		{Target: account, Source: updated, Location: loc(1), SourceRev: 107},
		{Target: post, Source: updated, Location: loc(2), SourceRev: 107},
	} {
		want[l.Source] = append(want[l.Source], l)
	}
	for _, ls := range want {
		slices.SortFunc(ls, func(a, b link.Backlink) int { return a.Target.Compare(b.Target) })
	}
	ask := []link.RecordID{unknown, three, one, deleted, updated, reset, three}
	check := func(when string) {
		t.Helper()
		for _, r := range []*Reader{db.Reader(), NewReader(db.store, nil)} { // warm and cold
			got, st, err := r.Forward(ctx, db.View(), ask)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ask) {
				t.Fatalf("%s: %d answers for %d sources", when, len(got), len(ask))
			}
			for i, src := range ask {
				if !slices.Equal(got[i], want[src]) {
					t.Fatalf("%s: source %d (%v):\n got %v\nwant %v", when, i, src, got[i], want[src])
				}
			}
			// three twice, deleted 2, updated 3 old and 2 new, reset 2.
			if st.Candidates != 2*3+2+5+2 || st.Revoked != 2+3+2 || st.Round2Passes != 1 {
				t.Fatalf("%s: stats %+v", when, st)
			}
		}
		// Every live link of a source with two or more is its forward
		// answer.
		for src, ls := range m.liveBySource() {
			if len(ls) >= 2 && !slices.Equal(ls, want[src]) {
				t.Fatalf("%s: source %v: model %v, want %v", when, src, ls, want[src])
			}
		}
		checkTargets(t, db, m)
	}
	check("delta runs")
	if n := len(db.View().Manifest.RunsOf(TreeLinks)); n != 2 {
		t.Fatalf("%d link runs, want 2", n)
	}
	if did, err := db.Compact(ctx); err != nil || !did {
		t.Fatalf("compact: %v %v", did, err)
	}
	check("compacted")

	got, _, err := db.Reader().Forward(ctx, db.View(), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("no sources: %v %v", got, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := db.Reader().Forward(cctx, db.View(), ask); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// Forward against the model over random records (many more sources than
// the lookups run at once, asked in random order with repeats), updates,
// deletes, repository resets, flushes and compactions, warm and cold: a
// source with two or more live links gets exactly them, one with fewer
// gets nothing or its one link (written twice at one location); real
// targets never see a forward entry.
func TestForwardModel(t *testing.T) {
	for _, seed := range modelSeeds(t, 1, 2, 3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runForwardModel(t, seed, 600)
		})
	}
}

func runForwardModel(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	store := newLocalStore(t)
	db, err := Open(ctx, Options{Store: store, Dir: t.TempDir(), CompactionFanIn: 3, ShardTargetBytes: 2 << 10, NoGCGrace: true, MemtableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel()
	w := &modelWorld{r: rand.New(rand.NewPCG(seed, seed^0x5bd1e995))}
	var sources []link.RecordID
	seen := map[link.RecordID]bool{}
	write := func(src link.RecordID) {
		if !seen[src] {
			seen[src] = true
			sources = append(sources, src)
		}
		// An update: the revocation, then the links at the same stamp.
		v := link.Revocation{Source: src, Rev: w.stamp}
		if err := db.AddRevocation(&v); err != nil {
			t.Fatal(err)
		}
		m.revoke(v)
		var ls []link.Backlink
		for n := w.r.IntN(5); n > 0; n-- {
			ls = append(ls, link.Backlink{Target: w.target(), Location: link.MakeLocation(uint64(1+w.r.IntN(3)), w.r.IntN(2) == 0)})
		}
		writeRecord(t, db, m, src, w.stamp, ls)
	}
	check := func(step int) {
		t.Helper()
		ask := slices.Clone(sources)
		w.r.Shuffle(len(ask), func(i, j int) { ask[i], ask[j] = ask[j], ask[i] })
		for range len(ask) / 10 {
			ask = append(ask, ask[w.r.IntN(len(ask))])
		}
		r := db.Reader()
		if w.r.IntN(2) == 0 {
			r = NewReader(store, nil)
		}
		got, st, err := r.Forward(ctx, db.View(), ask)
		if err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		live := m.liveBySource()
		for i, src := range ask {
			want := live[src]
			if len(want) >= 2 || len(got[i]) > 0 {
				if !slices.Equal(got[i], want) {
					t.Fatalf("seed %d step %d source %v:\n got %v\nwant %v", seed, step, src, got[i], want)
				}
			}
		}
		if st.Round2Passes > 1 || (st.Candidates > 0) != (st.Round2Passes == 1) {
			t.Fatalf("stats %+v", st)
		}
		checkTargets(t, db, m)
	}
	for step := range steps {
		w.stamp++
		switch op := w.r.IntN(100); {
		case op < 55:
			write(w.record())
		case op < 68: // delete
			v := link.Revocation{Source: w.record(), Rev: w.stamp}
			if err := db.AddRevocation(&v); err != nil {
				t.Fatal(err)
			}
			m.revoke(v)
		case op < 72: // repository reset, then one of its records again
			did := uint64(1 + w.r.IntN(6))
			v := link.Revocation{Source: link.RepoID(did), Rev: w.stamp}
			if err := db.AddRevocation(&v); err != nil {
				t.Fatal(err)
			}
			m.revoke(v)
			src := w.record()
			src.DID = did
			write(src)
		case op < 90:
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			m.flush()
			check(step)
		default:
			if _, err := db.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			check(step)
		}
	}
	flushAndCompactAll(t, ctx, db, m)
	check(steps)
	n := 0
	for _, ls := range m.liveBySource() {
		if len(ls) >= 2 {
			n++
		}
	}
	if len(sources) <= forwardConcurrency || n == 0 {
		t.Fatalf("%d sources, %d with two or more live links: too few", len(sources), n)
	}
	t.Logf("%d sources, %d with two or more live links", len(sources), n)
}
