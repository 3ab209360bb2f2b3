package lsm

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A columnar table's account dictionary (codec.go describes the codec):
// the accounts, how a table or a compaction's run counts and orders them,
// the open-addressing table that finds their ranks, and the dictionary
// section of a meta.

// account is a dictionary key: a (did, clock id) pair up to format
// version 4, from version 5 the DID with clock id 0.
type account struct {
	did   uint64
	clock uint16
}

// accountDict is a table's account dictionary: entry r-1 has rank r.
type accountDict struct {
	dids   []uint64
	clocks []uint16
	// revs (format version 3; nil in older tables): 1 + the rev more than
	// half of the account's records in the table have (a backfill writes a
	// whole repository at one stamp), from which those records' revs are
	// predicted; 0 when no rev has a majority (live events each have
	// their own stamp) or the rev is the largest uint64.
	revs []uint64

	// A mapped local meta of layout 2 (meta_local.go) packs the
	// dictionary: dids32 (when set, instead of dids) holds each DID in 4
	// bytes (bit 31 the outline bit, bit 63 of the DID; the low 31 bits its
	// value), and revsPacked (when set, instead of revs) each rev in rw
	// bytes, little-endian: 0 for none, else the rev minus revBase.
	dids32     []uint32
	revsPacked []byte // from the first entry's rev to past the last's by at least 8 bytes
	rw         int
	revBase    uint64

	// index finds an account's rank (ranksIn, and from format version 9
	// a target's DID's): built on first use by the compaction that shares
	// this dictionary among its tables, which builds them one at a time,
	// or by the build of a table with its own dictionary (pickTransform).
	index *rankIndex
}

func (d *accountDict) len() int {
	if d == nil {
		return 0
	}
	if d.dids32 != nil {
		return len(d.dids32)
	}
	return len(d.dids)
}

// account is entry i's DID and clock id.
func (d *accountDict) account(i int) (did, clock uint64) {
	if d.dids32 != nil {
		v := d.dids32[i]
		did = uint64(v &^ (1 << 31))
		if v>>31 != 0 {
			did |= 1 << 63
		}
		return did, uint64(d.clocks[i])
	}
	return d.dids[i], uint64(d.clocks[i])
}

// hasRevs reports whether the dictionary holds revs (format version 3).
func (d *accountDict) hasRevs() bool { return d != nil && (d.revs != nil || d.revsPacked != nil) }

// rev is entry i's rev as revs holds it (1 + the rev; 0 for none).
func (d *accountDict) rev(i int) uint64 {
	if d.revsPacked == nil {
		return d.revs[i]
	}
	if d.rw == 0 {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.revsPacked[i*d.rw:]) & (1<<(8*d.rw) - 1) // (a shift by 64 is 0: all ones)
	if v == 0 {
		return 0
	}
	return v + d.revBase
}

// gather looks up the dictionary entries of ranks (1-based; 0 or beyond
// the dictionary: left 0) into e: each one's DID, clock id and (with
// revs) rev as revs holds it (1 + the rev, 0 for none). The lookups
// depend on nothing but the ranks, so the processor overlaps their cache
// misses, where a lookup inside the loop that rebuilds the records waited
// for each: a shared dictionary at 1B links (~200k accounts a run) is
// several MB, past the L2 cache.
func (d *accountDict) gather(ranks []uint64, e *entryCols) {
	n := len(ranks)
	e.did = slices.Grow(e.did[:0], n)[:n]
	e.clock = slices.Grow(e.clock[:0], n)[:n]
	withRevs := d.hasRevs()
	if withRevs {
		e.rev = slices.Grow(e.rev[:0], n)[:n]
	}
	nd := uint64(d.len())
	for i, r := range ranks {
		if r == 0 || r > nd {
			e.did[i], e.clock[i] = 0, 0
			if withRevs {
				e.rev[i] = 0
			}
			continue
		}
		did, clock := d.account(int(r - 1))
		e.did[i], e.clock[i] = did, uint16(clock)
		if withRevs {
			e.rev[i] = d.rev(int(r - 1))
		}
	}
}

// gatherDIDs is gather of the DIDs alone, into dids (grown and returned).
func (d *accountDict) gatherDIDs(ranks, dids []uint64) []uint64 {
	n := len(ranks)
	dids = slices.Grow(dids[:0], n)[:n]
	nd := uint64(d.len())
	for i, r := range ranks {
		dids[i] = 0
		if r != 0 && r <= nd {
			dids[i], _ = d.account(int(r - 1))
		}
	}
	return dids
}

// fitsDID32 reports whether a DID fits dids32: a counter below 2^31, with
// or without the outline bit.
func fitsDID32(did uint64) bool { return did&^(1<<63) < 1<<31 }

// packDID32 is a DID as dids32 holds it (fitsDID32 must hold).
func packDID32(did uint64) uint32 { return uint32(did&(1<<31-1)) | uint32(did>>63)<<31 }

// castVote counts v in a Boyer-Moore majority vote whose candidate and
// count are *cand and *n: the candidate at the end is the only value that
// can be a majority of those counted.
func castVote[T comparable](cand *T, n *uint32, v T) {
	switch {
	case *n == 0:
		*cand, *n = v, 1
	case *cand == v:
		*n++
	default:
		*n--
	}
}

// clockAt is the clock id of the TID rkey at offset at of recs.
func clockAt(recs []byte, at int) uint16 {
	return uint16(binary.BigEndian.Uint64(recs[at:]) & (1<<clockBits - 1))
}

// accountAt is the account of the source at offset at of recs (its rkey,
// whose low bits are the clock id, then 16 bytes on its DID): the DID
// alone when the layout has a clock column.
func (l colLayout) accountAt(recs []byte, at int) account {
	a := account{did: binary.BigEndian.Uint64(recs[at+16:])}
	if !l.clockCol {
		a.clock = clockAt(recs, at)
	}
	return a
}

// buildAccountDict counts the accounts of recs and returns the dictionary
// (the accounts seen at least twice, most frequent first, ties by value,
// each with the rev most of its records have) and each record's rank (0
// for accounts outside it).
func buildAccountDict(recs []byte, l colLayout) (*accountDict, []uint32) {
	n := len(recs) / l.w
	s := l.src()
	revAt := func(i int) uint64 { return binary.BigEndian.Uint64(recs[i*l.w+l.w-8:]) }
	// Each account's count, and the candidates of Boyer-Moore votes in
	// record order for its rev and (with a clock column) its clock id:
	// all in its slot, one cache line a record.
	var t countTable
	t.init(max(n/8, 1024))
	for i := range n {
		o := i*l.w + s
		e := t.count(l.accountAt(recs, o), true)
		castVote(&e.vote, &e.votes, revAt(i))
		if l.clockCol {
			castVote(&e.clockVote, &e.clockVotes, clockAt(recs, o))
		}
	}
	// The rev's candidate is the account's rev when more than half its
	// records have it: a second pass counts them (in votes), and notes
	// each record's slot.
	for i := range t.slots {
		t.slots[i].votes = 0
	}
	ranks := make([]uint32, n)
	for i := range n {
		h := t.find(l.accountAt(recs, i*l.w+s))
		if revAt(i) == t.slots[h].vote {
			t.slots[h].votes++
		}
		ranks[i] = uint32(h)
	}
	d := orderKeys(dictKeys(&t, l.clockCol), l.dictMax)
	rankOf := make([]uint32, len(t.slots))
	for r, did := range d.dids {
		a := account{did: did}
		if !l.clockCol { // the entry's clock id is part of its account
			a.clock = d.clocks[r]
		}
		rankOf[t.find(a)] = uint32(r + 1)
	}
	for i, h := range ranks {
		ranks[i] = rankOf[h]
	}
	return d, ranks
}

// dictKey is a dictionary candidate: a counted account, its count, its
// rev (1 + the vote's candidate when it is a majority, 0 for none) and its
// clock id (the vote's candidate with a clock column, else its key's).
type dictKey struct {
	did   uint64
	rev   uint64
	count uint32
	clock uint16
}

// dictKeys copies out the candidates of t: the accounts counted at least
// twice whose DID fits 32 bits (a named one, a did:web's hash, would make
// the mapped metadata hold every entry's DID in 8 bytes (packWidths); its
// records carry it). An account's rev is the vote's candidate when the
// votes counted say it is a majority (2 x votes > count).
func dictKeys(t *countTable, clockCol bool) []dictKey {
	candidate := func(s *countSlot) bool { return s.count >= 2 && fitsDID32(s.did) }
	n := 0
	for i := range t.slots {
		if candidate(&t.slots[i]) {
			n++
		}
	}
	keys := make([]dictKey, 0, n) // exactly: no growth beside the table
	for i := range t.slots {
		s := &t.slots[i]
		if !candidate(s) {
			continue
		}
		k := dictKey{did: s.did, count: s.count, clock: s.clock}
		if 2*s.votes > s.count {
			k.rev = s.vote + 1 // 0 for the largest uint64: none
		}
		if clockCol {
			k.clock = s.clockVote
		}
		keys = append(keys, k)
	}
	return keys
}

// orderKeys returns the dictionary of keys: the most frequent first, ties
// by value, at most max. (The candidates are sorted as copies: sorting
// slot numbers by what their slots hold read a random slot a comparison,
// a cache miss each in a table of a billion links' accounts.)
func orderKeys(keys []dictKey, max int) *accountDict {
	slices.SortFunc(keys, func(x, y dictKey) int {
		if x.count != y.count {
			return cmp.Compare(y.count, x.count)
		}
		if x.did != y.did {
			return cmp.Compare(x.did, y.did)
		}
		return cmp.Compare(x.clock, y.clock) // (DID, clock id) accounts: no clock column
	})
	if len(keys) > max {
		keys = keys[:max]
	}
	d := &accountDict{dids: make([]uint64, len(keys)), clocks: make([]uint16, len(keys)), revs: make([]uint64, len(keys))}
	for r, k := range keys {
		d.dids[r], d.clocks[r], d.revs[r] = k.did, k.clock, k.rev
	}
	return d
}

// dictCounter counts the accounts of the records it is given, in one
// pass, and each account's rev by a vote: what a compaction's shared
// dictionary (one for all the tables of its output run) is built from.
type dictCounter struct {
	l colLayout
	t countTable
	d *accountDict // once dict has been called
}

func newDictCounter(l colLayout) *dictCounter {
	c := &dictCounter{l: l}
	c.t.init(1 << 16)
	return c
}

// dictCountMax bounds the distinct accounts a dictCounter tracks (a
// 32-byte slot each, in a table at most three quarters full: up to 256
// MiB of a compaction's memory, 64 MiB for the 1.43M accounts of a
// billion links): once it holds that many, accounts not seen yet are not
// counted (their records store literals). The dictionary keeps at most
// the layout's bound of them (MaxDictEntries from format version 6: all
// of them), the most frequent. Building the dictionary copies the
// candidates out (24 bytes each) and lets the table go, then builds it
// (18 bytes an entry): at the bound ~350 MiB for a moment (and ~380 while
// the table last doubles, at 3/4 of 2^22 accounts), ~100 MiB for 1.43M
// accounts. The dictionary and ranksIn's index of it take 40-50
// bytes an entry while the output's tables are built (~200 MiB at the
// bound, ~60 MiB for 1.43M accounts; ~30-34 bytes and ~42 MiB with the
// index's packed slots, which a dictionary of DIDs within 32 bits
// takes); decoding a full one from a bucket
// meta takes up to dictRawMax (92 MB) more for a moment.
const dictCountMax = MaxDictEntries

// add counts the accounts of recs (whole records of c's layout).
func (c *dictCounter) add(recs []byte) {
	if c.d != nil {
		panic("lsm: dictCounter.add after dict")
	}
	w, s := c.l.w, c.l.src()
	for o := 0; o+w <= len(recs); o += w {
		e := c.t.count(c.l.accountAt(recs, o+s), c.t.n < dictCountMax)
		if e == nil {
			continue
		}
		castVote(&e.vote, &e.votes, binary.BigEndian.Uint64(recs[o+w-8:]))
		if c.l.clockCol {
			castVote(&e.clockVote, &e.clockVotes, clockAt(recs, o+s))
		}
	}
}

// dict returns the dictionary of the accounts counted: as
// buildAccountDict's, but an account's rev is kept only when the vote
// proves it a majority without a second pass (the candidate's final votes,
// all its own records, are more than half of the account's), else none
// (its records' revs are then predicted from their time, as live events'
// are). A backfilled account (every record at one rev) always keeps it.
// The counter's table is let go once its candidates are copied out, before
// the dictionary is built; dict may be called again and counts no more.
func (c *dictCounter) dict() *accountDict {
	if c.d == nil {
		keys := dictKeys(&c.t, c.l.clockCol)
		c.t = countTable{}
		c.d = orderKeys(keys, c.l.dictMax)
	}
	return c.d
}

// ranksIn returns each record's rank in d (1-based; 0 for an account
// outside it).
func ranksIn(recs []byte, l colLayout, d *accountDict) []uint32 {
	return ranksInto(make([]uint32, 0, len(recs)/l.w), recs, l, d)
}

// ranksInto is ranksIn into dst (emptied, grown as needed), returned.
func ranksInto(dst []uint32, recs []byte, l colLayout, d *accountDict) []uint32 {
	if d.index == nil { // built once for all the tables that share d
		d.index = newRankIndex(d, l.clockCol)
	}
	t := d.index
	n := len(recs) / l.w
	s := l.src()
	ranks := slices.Grow(dst[:0], n)[:n]
	switch {
	case t.packed != nil && l.clockCol: // accounts of a DID alone
		for i := range n {
			ranks[i] = t.findPacked(l.accountAt(recs, i*l.w+s))
		}
	case t.packed == nil:
		for i := range n {
			ranks[i] = t.findSlot(l.accountAt(recs, i*l.w+s))
		}
	default: // not reached: a packed index is built for a clock column
		for i := range n {
			ranks[i] = t.find(l.accountAt(recs, i*l.w+s))
		}
	}
	return ranks
}

// appendDict appends the dictionary section of a version 2 or later meta:
//
//	0  4  entries E (0..maxDictEntries(version): 2^20 up to version 5,
//	      2^22 from version 6)
//	4  4  raw length R
//	8  4  compressed length C
//	12 C  a zstd frame of R bytes: E varint dids, then E bytes (clock ids'
//	      low bytes), then E bytes (their high bytes, < 4), then (version
//	      3) E varints: 1 + the account's rev, or 0 (accountDict.revs);
//	      3E <= R <= 12E (version 3: 4E <= R <= 22E) and R <= 64C + 64
//
// A version 3 dictionary has revs (d.revs non-nil), a version 2 one none.
// Up to version 4 an entry's clock id is part of its account; from
// version 5 it is the clock id a vote over the account's records picks
// (their majority's, when there is one), from which their clock planes
// are predicted.
func appendDict(dst []byte, d *accountDict, enc *zstd.Encoder) []byte {
	e := d.len()
	raw := make([]byte, 0, e*10)
	for i := range e {
		raw = binary.AppendUvarint(raw, d.dids[i])
	}
	for i := range e {
		raw = append(raw, byte(d.clocks[i]))
	}
	for i := range e {
		raw = append(raw, byte(d.clocks[i]>>8))
	}
	if d != nil && d.revs != nil {
		for i := range e {
			raw = binary.AppendUvarint(raw, d.revs[i])
		}
	}
	var z []byte
	if e > 0 {
		z = enc.EncodeAll(raw, nil)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(e))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(raw)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(z)))
	return append(dst, z...)
}

const dictHeaderSize = 12

// dictHasRevs reports whether the dictionaries of tables of format
// version hold their accounts' revs (version 3 on).
func dictHasRevs(version int) bool { return version >= 3 }

// dictRawMax bounds a dictionary's decompressed bytes (22 per entry).
const dictRawMax = 22 * MaxDictEntries

// dictDecoder decompresses dictionaries: at most the raw length the
// section declares (WithDecodeAllCapLimit), which is at most dictRawMax.
var dictDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(dictRawMax),
		zstd.WithDecoderMaxWindow(dictRawMax),
		zstd.WithDecodeAllCapLimit(true),
	)
})

// decodeDict decodes a dictionary section (exactly b) of a table of
// format version: with revs from version 3, of at most
// maxDictEntries(version) entries.
func decodeDict(b []byte, version int) (*accountDict, error) {
	withRevs := dictHasRevs(version)
	if len(b) < dictHeaderSize {
		return nil, corruptf("dictionary section of %d bytes", len(b))
	}
	e := uint64(binary.LittleEndian.Uint32(b))
	r := uint64(binary.LittleEndian.Uint32(b[4:]))
	c := uint64(binary.LittleEndian.Uint32(b[8:]))
	switch {
	case e > uint64(maxDictEntries(version)):
		return nil, corruptf("dictionary of %d entries (version %d)", e, version)
	case c != uint64(len(b)-dictHeaderSize):
		return nil, corruptf("dictionary section %d bytes, its header says %d", len(b)-dictHeaderSize, c)
	case !withRevs && (r < 3*e || r > 12*e), withRevs && (r < 4*e || r > 22*e):
		return nil, corruptf("dictionary of %d entries in %d bytes", e, r)
	case e == 0 && c != 0:
		return nil, corruptf("empty dictionary of %d bytes", c)
	}
	// No bound on the compression ratio: a backfill's dictionary (entries
	// of consecutive DIDs, one rev, clock id 0) compressed more than 64x
	// and a bound there refused a real table at its own self-check, which
	// failed the flush for ever. What DecodeMeta allocates is bounded by
	// the checks above: at most maxDictEntries entries of at most 22
	// bytes.
	d := &accountDict{}
	if withRevs {
		d.revs = make([]uint64, e)
	}
	if e == 0 {
		return d, nil
	}
	dec, err := dictDecoder()
	if err != nil {
		return nil, err
	}
	raw, err := dec.DecodeAll(b[dictHeaderSize:], make([]byte, 0, r))
	if err != nil || uint64(len(raw)) != r {
		return nil, corruptf("dictionary does not decompress to %d bytes (%v)", r, err)
	}
	d.dids = make([]uint64, e)
	d.clocks = make([]uint16, e)
	at, err := readUvarints(raw, 0, d.dids, "entry")
	if err != nil {
		return nil, err
	}
	if uint64(len(raw)-at) < 2*e || !withRevs && uint64(len(raw)-at) != 2*e {
		return nil, corruptf("dictionary clock ids: %d bytes for %d entries", len(raw)-at, e)
	}
	lo, hi := raw[at:at+int(e)], raw[at+int(e):at+2*int(e)]
	if at, err = readUvarints(raw, at+2*int(e), d.revs, "rev"); err != nil {
		return nil, err
	}
	if at != len(raw) {
		return nil, corruptf("dictionary: %d bytes left over", len(raw)-at)
	}
	for i := range d.clocks {
		c := uint16(lo[i]) | uint16(hi[i])<<8
		if c >= 1<<clockBits {
			return nil, corruptf("dictionary entry %d clock id %d", i, c)
		}
		d.clocks[i] = c
	}
	return d, nil
}

// readUvarints fills dst with the varints of raw from at on and returns
// where they end.
func readUvarints(raw []byte, at int, dst []uint64, what string) (int, error) {
	for i := range dst {
		v, k := binary.Uvarint(raw[at:])
		if k <= 0 {
			return 0, corruptf("dictionary %s %d", what, i)
		}
		dst[i] = v
		at += k
	}
	return at, nil
}
