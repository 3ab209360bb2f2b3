package lsm

import (
	"math/rand/v2"
	"testing"
)

// A rank index finds each dictionary account's rank (the first entry's
// for an account in two) and 0 for any other, in both its forms: packed
// slots (a clock column, every DID within 32 bits, some of them with
// the outline bit 63) and rankSlots (a DID past 32 bits, or accounts
// keyed with their clock ids).
func TestRankIndexForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	small := func() uint64 { return uint64(rng.IntN(1<<31)) | uint64(rng.IntN(2))<<63 }
	for _, c := range []struct {
		name     string
		clockCol bool
		big      bool // one DID past 32 bits
		packed   bool
	}{{"packed", true, false, true}, {"big DID", true, true, false}, {"clock ids", false, false, false}} {
		d := &accountDict{}
		want := map[account]uint32{}
		for i := range 5000 {
			did := small()
			if i == 1 {
				did = 1<<63 | 1<<31 - 1 // what many DIDs past 32 bits would pack to, unchecked
			}
			if i%97 == 0 && i > 0 {
				did = d.dids[i/2] // an account in two entries
			}
			if c.big && i == 4000 {
				did = 1<<40 | 5
			}
			clock := uint16(rng.IntN(1 << clockBits))
			d.dids, d.clocks = append(d.dids, did), append(d.clocks, clock)
			a := account{did: did}
			if !c.clockCol {
				a.clock = clock
			}
			if _, ok := want[a]; !ok {
				want[a] = uint32(i + 1)
			}
		}
		x := newRankIndex(d, c.clockCol)
		if (x.packed != nil) != c.packed {
			t.Fatalf("%s: packed %v, want %v", c.name, x.packed != nil, c.packed)
		}
		for a, r := range want {
			if got := x.find(a); got != r {
				t.Fatalf("%s: find(%x/%d) = %d, want %d", c.name, a.did, a.clock, got, r)
			}
		}
		probes := []account{{did: 1<<31 | 5}, {did: 1<<40 | 5 | 1<<63}, {did: 1 << 63 >> 1}}
		for range 20000 {
			probes = append(probes, account{did: small()})
		}
		for _, a := range probes {
			if !c.clockCol {
				a.clock = uint16(rng.IntN(1 << clockBits))
			}
			if got := x.find(a); got != want[a] {
				t.Fatalf("%s: find(%x/%d) = %d, want %d", c.name, a.did, a.clock, got, want[a])
			}
		}
		if c.packed {
			// A DID past 32 bits whose packed bits are an entry's, and
			// whose probe starts at that entry's slot: found only if
			// the index packed it anyway.
			e := d.dids[1]
			p := uint64(packDID32(e))
			found := false
			for y := p; !found; y = (y - 1) & p { // every subset of p's bits, p first, 0 last
				alias := p | y<<32
				if !fitsDID32(alias) && (alias|alias>>32)<<32 == p<<32 &&
					acctHash(account{did: alias}, x.shift) == acctHash(account{did: e}, x.shift) {
					found = true
					if got := x.find(account{did: alias}); got != 0 {
						t.Fatalf("%s: find(%x), a DID past 32 bits, = %d", c.name, alias, got)
					}
				}
				if y == 0 {
					break
				}
			}
			if !found {
				t.Fatalf("%s: no aliasing DID found to probe", c.name)
			}
		}
		if c.clockCol {
			// A clock id is never part of a key with a clock column.
			for a := range want {
				if a.clock = 1; x.find(a) != 0 {
					t.Fatalf("%s: find(%x/1) found a rank", c.name, a.did)
				}
				break
			}
		}
	}
}

// findPacked turns away every DID past 32 bits, whatever the slot its
// probe starts at holds: here the packed key the DID would alias, in a
// table whose one empty slot comes right after it (a check of the DID's
// width that let one through would return that slot's rank).
func TestRankIndexPackedWidth(t *testing.T) {
	const bits = 10
	for _, c := range []struct{ did, alias uint64 }{
		{1<<31 | 5, 1<<63 | 5},     // bit 31 set
		{1 << 31, 1 << 63},         // bit 31 alone
		{1<<62 | 5, 1<<30 | 5},     // bit 62
		{1<<40 | 5, 1<<8 | 5},      // a high bit that folds onto bit 8
		{1<<63 | 1<<32, 1<<63 | 1}, // bit 32, with the outline bit
	} {
		x := &rankIndex{packed: make([]uint64, 1<<bits), shift: 64 - bits}
		start := acctHash(account{did: c.did}, x.shift)
		for i := range x.packed {
			x.packed[i] = uint64(packDID32(uint64(i)+1<<20))<<32 | uint64(i+1)
		}
		x.packed[start] = uint64(packDID32(c.alias))<<32 | 7
		x.packed[(start+1)&(1<<bits-1)] = 0
		if fitsDID32(c.did) || !fitsDID32(c.alias) {
			t.Fatalf("case %x: the DID must not fit 32 bits, its alias must", c.did)
		}
		if got := x.findPacked(account{did: c.did}); got != 0 {
			t.Fatalf("findPacked(%x) = %d, the rank of %x", c.did, got, c.alias)
		}
	}
}
