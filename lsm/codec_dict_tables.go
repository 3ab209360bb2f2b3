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
// account and its rank in one 16-byte slot: a lookup costs one cache
// line, where an index of ids into an array of accounts cost two
// dependent misses (a billion links' 1.43M accounts take ~32 MB here).
type rankIndex struct {
	slots []rankSlot
	shift uint
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
	t.slots = make([]rankSlot, size)
	mask := uint64(size - 1)
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
	mask := uint64(len(t.slots) - 1)
	for h := acctHash(a, t.shift); ; h = (h + 1) & mask {
		s := &t.slots[h]
		if s.rank == 0 || s.did == a.did && s.clock == a.clock {
			return s.rank
		}
	}
}
