package lsm

import (
	"context"
	"testing"
)

// Tables the engine writes get their tree's filter width: 8-bit
// fingerprints for the links tree, 16 for the revocation tree (round two
// asks it about every source, nearly all absent).
func TestTreeFilterBits(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	cat := NewCatalogMapped(t.TempDir(), store)
	for _, tc := range []struct {
		tree Tree
		recs []byte
		want int
	}{
		{TreeLinks, synthSortedBacklinks(41, 4000), FilterBits8},
		{TreeRevocations, synthRevocations(42, 4000), FilterBits16},
	} {
		for _, kind := range []RunKind{RunDelta, RunCompacted} {
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
				if m.filterBits != tc.want {
					t.Fatalf("%s %v table: %d-bit filter, want %d", tc.tree, kind, m.filterBits, tc.want)
				}
				// Every key written is found through the 8-bit filter too.
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
