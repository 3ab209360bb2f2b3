package lsm

import (
	"context"
	"testing"
)

// Tables the engine writes get their tree's filter: 8-bit fingerprints for
// the links tree's compacted runs and the blocked filter for its flushes
// (the fast form, rewritten within minutes), 16 bits for the revocation
// tree's (round two asks it about every source, nearly all absent).
func TestTreeFilterBits(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalogMapped(t.TempDir(), store)
	for _, tc := range []struct {
		tree                  Tree
		recs                  []byte
		wantDelta, wantMerged int
	}{
		{TreeLinks, synthSortedBacklinks(41, 4000), FilterBlocked, FilterBits8},
		{TreeRevocations, synthRevocations(42, 4000), FilterBits16, FilterBits16},
	} {
		for _, kind := range []RunKind{RunDelta, RunCompacted} {
			want := tc.wantMerged
			if kind == RunDelta {
				want = tc.wantDelta
			}
			run, err := WriteRun(ctx, store, cat, tc.tree, kind, 1, tc.recs)
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range run.Tables {
				meta, err := store.Get(ctx, metaKey(tc.tree, ref.ID))
				if err != nil {
					t.Fatal(err)
				}
				m, err := DecodeMeta(meta)
				if err != nil {
					t.Fatal(err)
				}
				if m.filterBits != want {
					t.Fatalf("%s %v table: %s filter, want %s", tc.tree, kind, filterName(m.filterBits), filterName(want))
				}
				// Every key written is found through its filter.
				for i := 0; i < 4000; i += 97 {
					w := tc.recs[i*m.Format.Width:]
					if m.ShardBits == 0 || ShardOf(w[:m.Format.PrefixLen], m.ShardBits) == m.Shard {
						if !m.MayContain(w[:m.Format.PrefixLen]) {
							t.Fatalf("%s: record %d's key not in its table's filter", tc.tree, i)
						}
					}
				}
			}
		}
	}
}
