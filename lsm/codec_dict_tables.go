package lsm

import (
	"math"
	"math/bits"
)

// The open-addressing tables of the account dictionary's code:
// countTable counts accounts (everything counted of one in its slot), a
// flushed table's or a compaction's, and rankIndex finds a record's rank
// in a dictionary. Both probe linearly from acctHash.

// acctHash is a's first slot in a table of 2^(64-shift) slots.
func acctHash(a account, shift uint) uint64 {
	return ((a.did ^ uint64(a.clock)<<48) * 0x9e3779b97f4a7c15) >> shift
}

// tableShift is the shift of acctHash for a power-of-two table of at
// least n slots (and at least 1024): the size and the shift.
func tableShift(n int) (int, uint) {
	size := 1 << bits.Len(uint(max(n, 1024)-1))
	return size, uint(64 - bits.Len(uint(size-1)))
}

// countTable counts accounts (buildAccountDict, dictCounter): each slot
// holds an account and everything counted of it, so that counting a
// record costs one cache line. A billion links have 1.43M accounts, tens
// of MB of table, far past the caches: with the counts and votes in
// arrays by id beside an index of slots, a record cost three dependent
// misses and each vote another.
type countTable struct {
	slots []countSlot
	shift uint
	n     int // accounts held
}

type countSlot struct {
	did        uint64
	vote       uint64 // the rev vote's candidate
	count      uint32 // records counted; 0: an empty slot
	votes      uint32
	clockVotes uint32
	clock      uint16 // the account's clock id (its key's, in layouts without a clock column)
	clockVote  uint16 // the clock id vote's candidate (layouts with a clock column)
}

func (t *countTable) init(capacity int) {
	var size int
	size, t.shift = tableShift(capacity)
	t.slots = make([]countSlot, size)
}

// count counts a record of account a and returns a's slot; an account
// not held yet is added only when add is true (else nil). The table
// doubles rather than hold more than three quarters of its slots. A
// count stops at the largest uint32 (0 marks an empty slot).
func (t *countTable) count(a account, add bool) *countSlot {
	mask := uint64(len(t.slots) - 1)
	for h := acctHash(a, t.shift); ; h = (h + 1) & mask {
		s := &t.slots[h]
		if s.count == 0 {
			if !add {
				return nil
			}
			if 4*(t.n+1) > 3*len(t.slots) {
				t.grow()
				return t.count(a, true)
			}
			s.did, s.clock, s.count = a.did, a.clock, 1
			t.n++
			return s
		}
		if s.did == a.did && s.clock == a.clock {
			if s.count < math.MaxUint32 {
				s.count++
			}
			return s
		}
	}
}

// find returns the slot of a, which t must hold (a counted account).
func (t *countTable) find(a account) int {
	mask := uint64(len(t.slots) - 1)
	for h := acctHash(a, t.shift); ; h = (h + 1) & mask {
		switch s := &t.slots[h]; {
		case s.count == 0:
			panic("lsm: countTable.find of an account never counted")
		case s.did == a.did && s.clock == a.clock:
			return int(h)
		}
	}
}

func (t *countTable) grow() {
	old := t.slots
	t.init(2 * len(old))
	mask := uint64(len(t.slots) - 1)
	for i := range old {
		if old[i].count == 0 {
			continue
		}
		h := acctHash(account{did: old[i].did, clock: old[i].clock}, t.shift)
		for t.slots[h].count != 0 {
			h = (h + 1) & mask
		}
		t.slots[h] = old[i]
	}
}

// rankIndex finds an account's rank in a dictionary (ranksIn), the
// account and its rank in one slot: a lookup costs one cache line, where
// an index of ids into an array of accounts cost two dependent misses.
// Slots are 16 bytes (rankSlot), or 8 (packed) for most dictionaries: a
// billion links' 1.43M accounts take ~34 MB or ~17 MB here.
type rankIndex struct {
	slots []rankSlot
	// packed replaces slots when the index is keyed by DID alone (a
	// clock column) and every DID fits in 32 bits (fitsDID32): a slot is
	// the packed DID above the rank, 8 bytes where rankSlot takes 16, so
	// that a run's dictionary at 1B links (~200k accounts: 4 MB of slots
	// instead of 8, a table of 2^19) misses the caches and the TLB less in
	// the lookups of every record's account and every target's DID.
	packed []uint64
	shift  uint
}

type rankSlot struct {
	did   uint64
	rank  uint32 // 1-based; 0: an empty slot
	clock uint16
}

// newRankIndex indexes d's entries (by DID alone with a clock column,
// whose entries' clock ids predict and do not key); an account in two
// entries keeps the first's rank.
func newRankIndex(d *accountDict, clockCol bool) *rankIndex {
	t := &rankIndex{}
	var size int
	size, t.shift = tableShift(4 * d.len() / 3)
	mask := uint64(size - 1)
	if clockCol && allDIDs32(d) {
		t.packed = make([]uint64, size)
		for i := range d.len() {
			did, _ := d.account(i)
			k := uint64(packDID32(did)) << 32
			for h := acctHash(account{did: did}, t.shift); ; h = (h + 1) & mask {
				if s := t.packed[h]; s == 0 {
					t.packed[h] = k | uint64(i+1)
					break
				} else if s&^(1<<32-1) == k {
					break // an account in two entries keeps the first's rank
				}
			}
		}
		return t
	}
	t.slots = make([]rankSlot, size)
	for i := range d.len() {
		did, clock := d.account(i)
		if clockCol {
			clock = 0
		}
		a := account{did: did, clock: uint16(clock)}
		for h := acctHash(a, t.shift); ; h = (h + 1) & mask {
			s := &t.slots[h]
			if s.rank == 0 {
				*s = rankSlot{did: a.did, rank: uint32(i + 1), clock: a.clock}
				break
			}
			if s.did == a.did && s.clock == a.clock {
				break
			}
		}
	}
	return t
}

// find returns a's rank, 0 when the dictionary does not hold it.
func (t *rankIndex) find(a account) uint32 {
	if t.packed != nil {
		if a.clock != 0 {
			return 0
		}
		return t.findPacked(a)
	}
	return t.findSlot(a)
}

// findSlot is find in an index of rankSlots (t.packed nil).
func (t *rankIndex) findSlot(a account) uint32 {
	mask := uint64(len(t.slots) - 1)
	for h := acctHash(a, t.shift); ; h = (h + 1) & mask {
		s := &t.slots[h]
		if s.rank == 0 || s.did == a.did && s.clock == a.clock {
			return s.rank
		}
	}
}

// findPacked is find in an index of packed slots (t.packed non-nil),
// for an account of a DID alone (a.clock 0, as accountAt gives with a
// clock column); small enough to inline in the loops that call it for
// every record. A DID past 32 bits, which the dictionary does not hold,
// has rank 0.
func (t *rankIndex) findPacked(a account) uint32 {
	if a.did&^(1<<63) >= 1<<31 {
		return 0
	}
	mask := uint64(len(t.packed) - 1)
	// packDID32 in the slot's high half (the DID's low 31 bits, its bit
	// 63 above them), and acctHash of a clock id 0, spelt out so that
	// the function stays within the inliner's budget.
	k := (a.did | a.did>>32) << 32
	for h := (a.did * 0x9e3779b97f4a7c15) >> t.shift; ; h = (h + 1) & mask {
		if s := t.packed[h]; s == 0 || s&^(1<<32-1) == k {
			return uint32(s)
		}
	}
}

// allDIDs32 reports whether every DID of d fits in 32 bits (fitsDID32).
func allDIDs32(d *accountDict) bool {
	for i := range d.len() {
		if did, _ := d.account(i); !fitsDID32(did) {
			return false
		}
	}
	return true
}
