package lsm

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// model is the reference: every link ever written with its rev, and the
// highest revocation per record and per repository. Only flushed writes
// are visible, as in the DB.
type model struct {
	links   map[link.RecordID]map[Cursor]uint64 // target -> (source, location) -> newest rev
	revoked map[link.RecordID]uint64            // record or repo -> threshold
	pending []func()
}

func newModel() *model {
	return &model{links: map[link.RecordID]map[Cursor]uint64{}, revoked: map[link.RecordID]uint64{}}
}

func (m *model) addLink(l link.Backlink) {
	m.pending = append(m.pending, func() {
		ls := m.links[l.Target]
		if ls == nil {
			ls = map[Cursor]uint64{}
			m.links[l.Target] = ls
		}
		k := Cursor{l.Source, l.Location}
		ls[k] = max(ls[k], l.SourceRev)
	})
}

func (m *model) revoke(v link.Revocation) {
	m.pending = append(m.pending, func() { m.revoked[v.Source] = max(m.revoked[v.Source], v.Rev) })
}

// flushAndCompactAll ends a model run: the last writes flushed (in the DB
// and the model), then compactions until none is due.
func flushAndCompactAll(t *testing.T, ctx context.Context, db *DB, m *model) {
	t.Helper()
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m.flush()
	for {
		did, err := db.Compact(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			return
		}
	}
}

func (m *model) flush() {
	for _, f := range m.pending {
		f()
	}
	m.pending = nil
}

// live returns the live links of target in source order, filtered.
func (m *model) live(target link.RecordID, f Filter) []link.Backlink {
	var out []link.Backlink
	for k, rev := range m.links[target] {
		if !link.Live(rev, m.revoked[k.Source], m.revoked[k.Source.Repo()]) {
			continue
		}
		l := link.Backlink{Target: target, Source: k.Source, Location: k.Location, SourceRev: rev}
		if f.empty() || f.match(&l) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b link.Backlink) int { return a.Compare(&b) })
	return out
}

// modelWorld draws records from small domains so that links collide,
// repeat and get revoked often.
type modelWorld struct {
	r     *rand.Rand
	stamp uint64
}

func (w *modelWorld) record() link.RecordID {
	return link.RecordID{RKey: uint64(w.r.IntN(40)), Collection: link.CollectionFirst + uint64(w.r.IntN(3)), DID: uint64(1 + w.r.IntN(6))}
}

func (w *modelWorld) target() link.RecordID {
	switch w.r.IntN(4) {
	case 0:
		return link.RepoID(uint64(1 + w.r.IntN(6)))
	case 1:
		return link.HashTarget(fmt.Sprintf("https://example.com/%d", w.r.IntN(5)))
	default:
		return link.RecordID{RKey: uint64(w.r.IntN(5)), Collection: link.CollectionFirst, DID: uint64(1 + w.r.IntN(3))}
	}
}

func newLocalStore(t *testing.T) objstore.Store {
	s, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runModel drives random creates, updates, deletes, repository resets,
// flushes, compactions and reopenings against the DB and the model, and
// compares every target's pages and counts after each step that changes
// what is visible.
func runModel(t *testing.T, seed uint64, steps int, newStore func(t *testing.T) objstore.Store) {
	runModelCache(t, seed, steps, newStore, -1)
}

// runModelCache is runModel with a table meta cache of metaCache bytes
// (Options.MetaCacheBytes); it returns the cache's figures at the end.
func runModelCache(t *testing.T, seed uint64, steps int, newStore func(t *testing.T) objstore.Store, metaCache int64) CatalogStats {
	ctx := context.Background()
	store := newStore(t)
	opts := Options{Store: store, Dir: t.TempDir(), CompactionFanIn: 3, ShardTargetBytes: 2 << 10, NoGCGrace: true, MemtableBytes: 1 << 20, MetaCacheBytes: metaCache}
	db, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := newModel()
	w := &modelWorld{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	var targets []link.RecordID
	seen := map[link.RecordID]bool{}
	addLinks := func(src link.RecordID, rev uint64) {
		for n := w.r.IntN(3); n >= 0; n-- {
			l := link.Backlink{Target: w.target(), Source: src, Location: link.MakeLocation(uint64(1+w.r.IntN(3)), w.r.IntN(2) == 0), SourceRev: rev}
			if err := db.AddBacklink(&l); err != nil {
				t.Fatal(err)
			}
			m.addLink(l)
			if !seen[l.Target] {
				seen[l.Target] = true
				targets = append(targets, l.Target)
			}
		}
	}
	revoke := func(src link.RecordID, rev uint64) {
		v := link.Revocation{Source: src, Rev: rev}
		if err := db.AddRevocation(&v); err != nil {
			t.Fatal(err)
		}
		m.revoke(v)
	}
	check := func(step int) {
		t.Helper()
		checkModel(t, db, m, w, targets, seed, step)
	}
	for step := 0; step < steps; step++ {
		w.stamp++
		switch op := w.r.IntN(100); {
		case op < 45: // create
			addLinks(w.record(), w.stamp)
		case op < 60: // update: revocation then links, same stamp
			src := w.record()
			revoke(src, w.stamp)
			addLinks(src, w.stamp)
		case op < 72: // delete
			revoke(w.record(), w.stamp)
		case op < 76: // repository reset: repo revocation, then the repo's links again
			did := uint64(1 + w.r.IntN(6))
			revoke(link.RepoID(did), w.stamp)
			src := w.record()
			src.DID = did
			addLinks(src, w.stamp)
		case op < 90:
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			m.flush()
			check(step)
		case op < 94:
			if _, err := db.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			check(step)
		case op < 96:
			if _, err := db.CompactFull(ctx); err != nil {
				t.Fatal(err)
			}
			for _, tr := range []Tree{TreeLinks, TreeRevocations} {
				if n := len(db.View().Manifest.RunsOf(tr)); n > 1 {
					t.Fatalf("seed %d step %d: %d runs of %s after a full compaction", seed, step, n, tr)
				}
			}
			check(step)
		default: // reopen: from the same directory, or a fresh node
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			m.flush()
			db.Close()
			o := opts
			if w.r.IntN(2) == 0 {
				o.Dir = t.TempDir() // a node that never saw these tables
			}
			if db, err = Open(ctx, o); err != nil {
				t.Fatal(err)
			}
			check(step)
		}
	}
	flushAndCompactAll(t, ctx, db, m)
	check(steps)
	if len(db.View().Manifest.Runs) == 0 || len(targets) == 0 {
		t.Fatal("the model test wrote nothing")
	}
	return db.CatalogStats()
}

// checkModel compares every target's pages (in random directions, limits
// and filters) and counts with the model's.
func checkModel(t *testing.T, db *DB, m *model, w *modelWorld, targets []link.RecordID, seed uint64, step int) {
	t.Helper()
	ctx := context.Background()
	for _, tg := range targets {
		f := Filter{}
		if w.r.IntN(3) == 0 {
			f.Collections = []uint64{link.CollectionFirst + uint64(w.r.IntN(3))}
		}
		want := m.live(tg, f)
		reverse := w.r.IntN(2) == 0
		if reverse {
			slices.Reverse(want)
		}
		var got []link.Backlink
		var after *Cursor
		for page := 0; ; page++ {
			res, err := db.Backlinks(ctx, Query{Target: tg, After: after, Reverse: reverse, Limit: 1 + w.r.IntN(4), Filter: f})
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			got = append(got, res.Links...)
			if res.Next == nil {
				break
			}
			after = res.Next
			if page > 1000 {
				t.Fatal("paging does not end")
			}
		}
		if !slices.Equal(got, want) {
			t.Log(dumpRuns(t, db, TreeLinks))
			t.Log(dumpRuns(t, db, TreeRevocations))
			t.Fatalf("seed %d step %d target %v (reverse %v, filter %+v):\n got %v\nwant %v", seed, step, tg, reverse, f, got, want)
		}
		n, _, err := db.Count(ctx, tg, f)
		if err != nil || n != uint64(len(want)) {
			t.Fatalf("seed %d step %d: count %d (%v), want %d", seed, step, n, err, len(want))
		}
	}
}

// -lsm.seed=N gives the model tests' extra run its seed; without it each
// test binary draws a fresh one, which every model test logs, so that a
// failure can be replayed.
var modelSeedFlag = flag.Uint64("lsm.seed", 0, "seed of the model tests' extra run (0: a fresh random seed, logged)")

var drawnModelSeed = sync.OnceValue(func() uint64 {
	for {
		if s := rand.Uint64(); s != 0 {
			return s
		}
	}
})

// modelSeeds returns the seeds a model test runs: its fixed ones, then
// -lsm.seed or, without it, a fresh random seed, which it logs with the
// command that replays it.
func modelSeeds(t *testing.T, fixed ...uint64) []uint64 {
	t.Helper()
	seed, how := *modelSeedFlag, "from -lsm.seed"
	if seed == 0 {
		seed, how = drawnModelSeed(), "drawn"
	}
	t.Logf("seeds %v and %d (%s); replay: go test ./lsm -run '^%s$/^%d$' -lsm.seed=%d", fixed, seed, how, t.Name(), seed, seed)
	return append(fixed, seed)
}

func TestModelLocal(t *testing.T) {
	for _, seed := range modelSeeds(t, 1, 2, 3, 4, 5, 6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, 400, newLocalStore)
		})
	}
}

// With a meta cache too small for two metas, every query decodes what
// it needs again from local disk: the answers are the model's all the
// same, and the cache stays within one meta of its budget.
func TestModelMetaCacheBounded(t *testing.T) {
	for _, seed := range modelSeeds(t, 11) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			st := runModelCache(t, seed, 250, newLocalStore, 1)
			if st.Evictions == 0 || st.Misses == 0 || st.Metas > 1 || st.Budget != 1 {
				t.Fatalf("meta cache: %+v, want evictions, misses and at most one meta held", st)
			}
		})
	}
}

func TestModelS3(t *testing.T) {
	endpoint, _, _ := miniotest.StartMinIO(t)
	for _, seed := range modelSeeds(t, 101, 102) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, 400, func(t *testing.T) objstore.Store {
				s, err := s3.New(s3.Config{
					Endpoint: endpoint, Region: "us-east-1", Bucket: miniotest.Bucket, Prefix: fmt.Sprintf("model-%d", seed),
					Insecure: true, PathStyle: true, AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

// mustMeta returns a view table's meta or fails the test.
func mustMeta(t testing.TB, vt *viewTable) *TableMeta {
	t.Helper()
	m, err := vt.load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m
}
