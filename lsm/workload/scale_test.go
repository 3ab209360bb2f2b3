package workload

import (
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

type truthKey struct {
	t, s link.RecordID
	l    link.Location
}

// replay runs a stream and keeps every op, with the truth: each link's
// newest rev and each source's newest revocation.
func replay(t *testing.T, cfg StreamConfig) (*Stream, []Op, [32]byte) {
	t.Helper()
	s, err := NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ops []Op
	h := sha256.New()
	var b [link.BacklinkSize]byte
	var lastRev uint64
	if err := s.Run(func(op *Op) error {
		o := *op
		o.Revoked = slices.Clone(op.Revoked)
		ops = append(ops, o)
		rev := op.Link.SourceRev
		if op.Revoke {
			rev = op.Revocation.Rev
			op.Revocation.Put(b[:link.RevocationSize])
			h.Write(b[:link.RevocationSize])
		} else {
			op.Link.Put(b[:])
			h.Write(b[:])
		}
		if rev < lastRev {
			t.Fatalf("op %d: stamp %d after %d", len(ops), rev, lastRev)
		}
		lastRev = rev
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return s, ops, sum
}

func TestStreamModel(t *testing.T) {
	for _, shape := range []Shape{ShapeBackfill, ShapeLive} {
		t.Run(shape.String(), func(t *testing.T) {
			cfg := StreamConfig{Links: 200_000, Seed: 5, Shape: shape, MegaLinks: 20_000}
			if shape == ShapeBackfill {
				cfg.LiveLinks = 60_000 // a long tail, so deletes and updates of both kinds happen
			}
			s, ops, d1 := replay(t, cfg)
			_, _, d2 := replay(t, cfg)
			cfg.Seed++
			_, _, d3 := replay(t, cfg)
			if d1 != d2 || d1 == d3 {
				t.Fatal("not deterministic from the seed")
			}
			if s.Written != cfg.Links {
				t.Fatalf("%d links written, want %d", s.Written, cfg.Links)
			}
			newest := map[truthKey]uint64{}
			revoked := map[link.RecordID]uint64{}
			var links, revs int
			for _, op := range ops {
				if op.Revoke {
					revs++
					revoked[op.Revocation.Source] = max(revoked[op.Revocation.Source], op.Revocation.Rev)
					continue
				}
				links++
				k := truthKey{op.Link.Target, op.Link.Source, op.Link.Location}
				newest[k] = max(newest[k], op.Link.SourceRev)
			}
			live := map[link.RecordID][]link.Backlink{}
			nLive := 0
			for k, rev := range newest {
				if rev >= revoked[k.s] {
					nLive++
					live[k.t] = append(live[k.t], link.Backlink{Target: k.t, Source: k.s, Location: k.l, SourceRev: rev})
				}
			}
			// A store that deletes by key (Pebble, PostgreSQL in bench
			// peers) deletes each revocation's Revoked links, each with the
			// rev it was written at: it must end with the fold's live links.
			byKey := map[link.Backlink]bool{}
			for _, op := range ops {
				if !op.Revoke {
					byKey[op.Link] = true
					continue
				}
				for _, l := range op.Revoked {
					if l.Source != op.Revocation.Source {
						t.Fatalf("revocation of %v lists a link from %v", op.Revocation.Source, l.Source)
					}
					delete(byKey, l)
				}
			}
			if len(byKey) != s.LiveLinks() {
				t.Fatalf("deleting the revocations' links by key leaves %d links, want %d", len(byKey), s.LiveLinks())
			}
			for l := range byKey {
				if k := (truthKey{l.Target, l.Source, l.Location}); newest[k] < revoked[k.s] {
					t.Fatalf("link %v <- %v survives its revocation when deleted by key", k.t, k.s)
				}
			}
			if nLive != s.LiveLinks() || links != s.Written || revs != s.Revocations {
				t.Fatalf("live %d (stream says %d), links %d (%d), revocations %d (%d)", nLive, s.LiveLinks(), links, s.Written, revs, s.Revocations)
			}
			if s.Revoked == 0 || s.Updates == 0 && shape == ShapeLive || s.BackfillDeletes == 0 && shape == ShapeBackfill {
				t.Fatalf("revoked %d, updates %d, backfill deletes %d", s.Revoked, s.Updates, s.BackfillDeletes)
			}
			kinds := map[string]int{}
			for _, st := range s.Sample {
				want := live[st.ID]
				slices.SortFunc(want, func(a, b link.Backlink) int { return a.Compare(&b) })
				if got := st.Expected(); !slices.Equal(got, want) {
					t.Fatalf("sample %s %s: %d links expected, truth has %d", st.Kind, st.Desc, len(got), len(want))
				}
				if st.LiveCount() > 0 {
					kinds[st.Kind]++
				}
			}
			for _, k := range []string{"mega", "popular", "medium", "query", "account", "url"} {
				if kinds[k] == 0 {
					t.Errorf("no %s sample target with links", k)
				}
			}
			mega := s.Sample[Mega].LiveCount()
			if mega < cfg.MegaLinks/2 || mega > cfg.MegaLinks*2 {
				t.Errorf("mega target has %d live links, want about %d", mega, cfg.MegaLinks)
			}
			// Backfill: each repository at one stamp.
			if shape == ShapeBackfill {
				repo := map[uint64]uint64{}
				for _, op := range ops {
					if op.Revoke || op.Link.SourceRev > s.BackfillStamps {
						continue
					}
					if st, ok := repo[op.Link.Source.DID]; ok && st != op.Link.SourceRev {
						t.Fatalf("repository %x written at stamps %d and %d", op.Link.Source.DID, st, op.Link.SourceRev)
					}
					repo[op.Link.Source.DID] = op.Link.SourceRev
				}
			}
			t.Logf("%s: %d links (%d live), %d revocations, %d updates, %d backfill deletes, %d accounts, %d repos, sample %d targets %d links, mega %d, kinds %v",
				shape, s.Written, s.LiveLinks(), s.Revocations, s.Updates, s.BackfillDeletes, s.Accounts(), s.Repos, len(s.Sample), s.SampleLinks(), mega, kinds)
		})
	}
}

// The query sample is near the ~150 links the bench's queries want.
func TestStreamQuerySample(t *testing.T) {
	s, err := NewStream(StreamConfig{Links: 2_000_000, Seed: 1, Shape: ShapeBackfill})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(func(*Op) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var n, sum, in int
	for _, st := range s.Sample {
		if st.Kind == "query" {
			n++
			sum += st.LiveCount()
			if c := st.LiveCount(); c >= 75 && c <= 300 {
				in++
			}
		}
	}
	t.Logf("%d query targets, mean %.0f live links, %d within 75-300; mega %d", n, float64(sum)/float64(n), in, s.Sample[Mega].LiveCount())
	if in < 40 {
		t.Fatalf("only %d of %d query targets have 75-300 links", in, n)
	}
}

func TestPerm(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 1000, 4097} {
		p := newPerm(n, 9)
		seen := make([]bool, n)
		for i := range n {
			x := p.at(i)
			if x >= n || seen[x] {
				t.Fatalf("n %d: %d -> %d", n, i, x)
			}
			seen[x] = true
		}
	}
}

// zipfRankQ with q = 1 is zipfRank, and a larger q flattens the head.
func TestZipfRankQ(t *testing.T) {
	const n = 100000
	var top1, top50 int
	for i := range 100000 {
		u := (float64(i) + 0.5) / 100000
		if zipfRank(u, n, 1.1) != zipfRankQ(u, n, 1.1, 1) {
			t.Fatalf("u %v: %d vs %d", u, zipfRank(u, n, 1.1), zipfRankQ(u, n, 1.1, 1))
		}
		if zipfRankQ(u, n, 1.1, 1) == 0 {
			top1++
		}
		if zipfRankQ(u, n, 1.1, 50) == 0 {
			top50++
		}
	}
	if top1 < 5000 || top50 > 1000 || top50 == 0 {
		t.Fatalf("rank 0 drawn %d times (q 1), %d (q 50) of 100000", top1, top50)
	}
}

// Record keys carry clock ids as real TIDs do (clockAt): below 32, shared
// by the accounts of a host at a time, several over an account's years;
// with AccountClocks one an account, as before.
func TestStreamClockIDs(t *testing.T) {
	for _, accountClocks := range []bool{false, true} {
		s, err := NewStream(StreamConfig{Links: 200_000, Seed: 3, Shape: ShapeBackfill, AccountClocks: accountClocks})
		if err != nil {
			t.Fatal(err)
		}
		clocks := map[uint64]map[uint64]bool{} // account DID -> clock ids of its records
		high := 0
		err = s.Run(func(op *Op) error {
			if op.Revoke {
				return nil
			}
			src := op.Link.Source
			c := src.RKey & 1023
			if c >= 32 {
				high++
			}
			if clocks[src.DID] == nil {
				clocks[src.DID] = map[uint64]bool{}
			}
			clocks[src.DID][c] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		many, most := 0, 0
		for _, cs := range clocks {
			most = max(most, len(cs))
			if len(cs) >= 5 {
				many++
			}
		}
		t.Logf("account clocks %v: %d accounts, %d with 5 or more clock ids, at most %d; %d keys with a clock id of 32 or more", accountClocks, len(clocks), many, most, high)
		switch {
		case accountClocks && most != 1:
			t.Fatalf("an account has %d clock ids, want 1", most)
		case !accountClocks && (high != 0 || many < len(clocks)/10):
			t.Fatalf("%d keys with clock ids of 32 or more, %d of %d accounts with 5 or more", high, many, len(clocks))
		}
	}
}
