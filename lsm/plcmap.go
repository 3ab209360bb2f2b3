package lsm

// The PLC map: two trees of this engine that map every did:plc the PLC
// directory has sequenced to the sequence number of its genesis operation
// (the inline value of its did field, package link) and back. Same tables,
// same runs, same compaction as the index itself.
//
//	plc_did (24 B, prefix 16): id[15] | 0x00 | seq (u64 BE)
//	plc_seq (24 B, prefix 8):  seq (u64 BE) | id[15] | 0x00
//
// id is the 15 bytes the did:plc's 24 base32 characters decode to (a
// did:plc is "did:plc:" and the first 24 characters of the base32 of the
// SHA-256 of its genesis operation: 120 bits, no padding). A DID has one
// genesis operation, so a key appears at most once in the whole map; a
// record read twice (a follower replaying from its committed cursor) is
// identical and folds away. Should two runs ever disagree, the largest
// record wins, as Fold keeps it when a compaction merges them, so a
// lookup gives the same answer on every node, before and after.

import (
	"bytes"
	"container/list"
	"context"
	"encoding/base32"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/link"
)

// The PLC map trees' formats.
var (
	PLCDIDFormat = Format{Width: 24, PrefixLen: 16}
	PLCSeqFormat = Format{Width: 24, PrefixLen: 8}
)

// PLCIDSize is the size of a decoded did:plc identifier.
const PLCIDSize = 15

// PLCID is a decoded did:plc identifier.
type PLCID [PLCIDSize]byte

const plcPrefix = "did:plc:"

var plcBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ParsePLC decodes a did:plc into its identifier; false if did is not
// exactly "did:plc:" and 24 lower-case base32 characters (such a DID can
// never be in the map).
func ParsePLC(did string) (PLCID, bool) {
	var id PLCID
	if !link.IsPLCID(did) {
		return id, false
	}
	n, err := plcBase32.Decode(id[:], []byte(did[len(plcPrefix):]))
	if err != nil || n != PLCIDSize {
		return PLCID{}, false
	}
	return id, true
}

// String renders the identifier as its did:plc.
func (id PLCID) String() string { return plcPrefix + plcBase32.EncodeToString(id[:]) }

// PLCDIDRecord is the plc_did record of (id, seq).
func PLCDIDRecord(id PLCID, seq uint64) [24]byte {
	var r [24]byte
	copy(r[:PLCIDSize], id[:])
	binary.BigEndian.PutUint64(r[16:], seq)
	return r
}

// PLCSeqRecord is the plc_seq record of (id, seq).
func PLCSeqRecord(id PLCID, seq uint64) [24]byte {
	var r [24]byte
	binary.BigEndian.PutUint64(r[:8], seq)
	copy(r[8:8+PLCIDSize], id[:])
	return r
}

// lookupMax returns the largest record of tree whose key starts with
// prefix (a PrefixLen-byte prefix) in view v, or nil (lookupAll): the one
// a compaction keeps of records that differ only in their last 8 bytes.
func (r *Reader) lookupMax(ctx context.Context, v *View, tree Tree, prefix []byte) ([]byte, error) {
	recs, err := r.lookupAll(ctx, v, tree, prefix)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return recs[len(recs)-1], nil
}

// lookupAll returns every record of tree whose key starts with prefix (a
// PrefixLen-byte prefix) in view v, sorted, each once: filters skip
// tables, fences pick frames, one ranged GET per run, all runs
// concurrently.
func (r *Reader) lookupAll(ctx context.Context, v *View, tree Tree, prefix []byte) ([][]byte, error) {
	f, err := FormatOf(tree)
	if err != nil {
		return nil, err
	}
	var groups []fetchGroup
	for _, vr := range v.trees[tree] {
		t := vr.tableFor(prefix)
		if t == nil {
			continue
		}
		m, err := t.load(ctx)
		if err != nil {
			return nil, err
		}
		if !m.MayContain(prefix) {
			continue
		}
		first, last, ok := m.FramesFor(prefix)
		if !ok {
			continue
		}
		groups = addGroup(groups, t, m, first, last)
	}
	if len(groups) == 0 {
		return nil, nil
	}
	if err := r.fetchAll(ctx, groups); err != nil {
		return nil, err
	}
	var out [][]byte
	for i := range groups {
		for _, recs := range groups[i].frames {
			lo, hi := prefixRange(recs, f.Width, prefix)
			for o := lo; o < hi; o += f.Width {
				out = append(out, slices.Clone(recs[o:o+f.Width]))
			}
		}
	}
	slices.SortFunc(out, bytes.Compare)
	return slices.CompactFunc(out, bytes.Equal), nil
}

// PLCBatch is a set of PLC map entries not yet visible in the view a map
// reads: the leader's follower adds them, its next flush writes them as
// tables in the same Raft entry as the links that use them.
type PLCBatch struct {
	byID  map[PLCID]uint64
	bySeq map[uint64]PLCID
}

func newPLCBatch() *PLCBatch {
	return &PLCBatch{byID: map[PLCID]uint64{}, bySeq: map[uint64]PLCID{}}
}

// Len is the number of entries.
func (b *PLCBatch) Len() int { return len(b.byID) }

// Records returns the batch as sorted records of plc_did and plc_seq.
func (b *PLCBatch) Records() (did, seq []byte) {
	did = make([]byte, 0, 24*len(b.byID))
	seq = make([]byte, 0, 24*len(b.byID))
	for id, s := range b.byID {
		r := PLCDIDRecord(id, s)
		did = append(did, r[:]...)
		q := PLCSeqRecord(id, s)
		seq = append(seq, q[:]...)
	}
	SortRecords(did, 24)
	SortRecords(seq, 24)
	return did, seq
}

// plcBatchEntryBytes approximates an entry's memory in a batch (two map
// entries).
const plcBatchEntryBytes = 96

// DefaultPLCCacheEntries bounds a PLCMap's cache of resolved entries
// (about 100 bytes each).
const DefaultPLCCacheEntries = 1 << 18

// PLCLookupTimeout bounds one lookup made through the context-free
// link.PLC methods.
const PLCLookupTimeout = 30 * time.Second

// PLCMap reads the PLC map of a view (the node's newest, through view)
// with a bounded LRU cache of resolved entries, plus, on the
// leader, the batches its follower added that the view does not show yet.
// It implements link.PLC and link's error-reporting lookups. Safe for
// concurrent use.
type PLCMap struct {
	reader *Reader
	view   func(context.Context) (*View, error)
	max    int

	mu struct {
		sync.Mutex
		open   *PLCBatch        // the follower adds here
		sealed sealed[PLCBatch] // taken by a flush, until the view shows them
		lru    *list.List       // of plcEntry, most recent first
		byID   map[PLCID]*list.Element
		bySeq  map[uint64]*list.Element
	}
}

type plcEntry struct {
	id  PLCID
	seq uint64
}

// NewPLCMap returns a map over the views view returns (each call the
// newest; an error fails the lookup), reading tables through r, caching up
// to cacheEntries resolved entries (DefaultPLCCacheEntries when <= 0).
func NewPLCMap(r *Reader, view func(context.Context) (*View, error), cacheEntries int) *PLCMap {
	if cacheEntries <= 0 {
		cacheEntries = DefaultPLCCacheEntries
	}
	m := &PLCMap{reader: r, view: view, max: cacheEntries}
	m.mu.open = newPLCBatch()
	m.mu.lru = list.New()
	m.mu.byID = map[PLCID]*list.Element{}
	m.mu.bySeq = map[uint64]*list.Element{}
	return m
}

// Add records an entry the view does not have yet (the leader's follower).
// An identifier or a sequence number already pending keeps its first
// entry.
func (m *PLCMap) Add(id PLCID, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pendingSeqLocked(id); ok {
		return
	}
	if _, ok := m.pendingIDLocked(seq); ok {
		return
	}
	m.mu.open.byID[id] = seq
	m.mu.open.bySeq[seq] = id
}

// PendingBytes approximates the memory of the entries not yet taken by a
// flush.
func (m *PLCMap) PendingBytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.open.Len() * plcBatchEntryBytes
}

// Seal takes the pending entries for a flush (nil if there are none); they
// stay visible to lookups until Published's generation is in the view.
func (m *PLCMap) Seal() *PLCBatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.open.Len() == 0 {
		return nil
	}
	b := m.mu.open
	m.mu.open = newPLCBatch()
	m.mu.sealed.add(b)
	return b
}

// Published says that generation gen holds b's tables: once the view is at
// gen or later, lookups read them from there.
func (m *PLCMap) Published(b *PLCBatch, gen uint64) {
	m.mu.Lock()
	m.mu.sealed.publish(b, gen)
	m.mu.Unlock()
}

// pruneLocked drops the sealed batches the view at generation gen holds.
func (m *PLCMap) pruneLocked(gen uint64) {
	m.mu.sealed.prune(gen)
}

func (m *PLCMap) pendingSeqLocked(id PLCID) (uint64, bool) {
	if s, ok := m.mu.open.byID[id]; ok {
		return s, true
	}
	return find(&m.mu.sealed, func(b *PLCBatch) (uint64, bool) { s, ok := b.byID[id]; return s, ok })
}

func (m *PLCMap) pendingIDLocked(seq uint64) (PLCID, bool) {
	if id, ok := m.mu.open.bySeq[seq]; ok {
		return id, true
	}
	return find(&m.mu.sealed, func(b *PLCBatch) (PLCID, bool) { id, ok := b.bySeq[seq]; return id, ok })
}

func (m *PLCMap) cachePutLocked(id PLCID, seq uint64) {
	if el, ok := m.mu.byID[id]; ok {
		m.mu.lru.MoveToFront(el)
		return
	}
	if _, ok := m.mu.bySeq[seq]; ok {
		return
	}
	el := m.mu.lru.PushFront(plcEntry{id: id, seq: seq})
	m.mu.byID[id] = el
	m.mu.bySeq[seq] = el
	for m.mu.lru.Len() > m.max {
		last := m.mu.lru.Back()
		e := last.Value.(plcEntry)
		m.mu.lru.Remove(last)
		delete(m.mu.byID, e.id)
		delete(m.mu.bySeq, e.seq)
	}
}

// Views adapts a function returning the current view (a node's query
// views) to NewPLCMap.
func Views(current func() *View) func(context.Context) (*View, error) {
	return func(context.Context) (*View, error) { return current(), nil }
}

// SeqOf returns the genesis sequence number of a did:plc, false if the map
// does not know it; an error if the tables could not be read.
func (m *PLCMap) SeqOf(ctx context.Context, did string) (uint64, bool, error) {
	id, ok := ParsePLC(did)
	if !ok {
		return 0, false, nil
	}
	for attempt := 0; ; attempt++ {
		s, ok, stale, err := m.seqOf(ctx, id)
		if !stale || attempt == 8 {
			return s, ok, err
		}
	}
}

// seqOf is one try of SeqOf; stale: nothing was found in a view older
// than one a published batch was dropped at meanwhile, so ask again.
func (m *PLCMap) seqOf(ctx context.Context, id PLCID) (uint64, bool, bool, error) {
	v, err := m.view(ctx)
	if err != nil {
		return 0, false, false, err
	}
	m.mu.Lock()
	m.pruneLocked(v.Generation())
	if el, ok := m.mu.byID[id]; ok {
		m.mu.lru.MoveToFront(el)
		s := el.Value.(plcEntry).seq
		m.mu.Unlock()
		return s, true, false, nil
	}
	if s, ok := m.pendingSeqLocked(id); ok {
		m.mu.Unlock()
		return s, true, false, nil
	}
	m.mu.Unlock()
	var prefix [16]byte
	copy(prefix[:], id[:])
	rec, err := m.reader.lookupMax(ctx, v, TreePLCDID, prefix[:])
	if err != nil {
		return 0, false, false, err
	}
	if rec == nil {
		return 0, false, m.staleView(v), nil
	}
	s := binary.BigEndian.Uint64(rec[16:])
	m.mu.Lock()
	m.cachePutLocked(id, s)
	m.mu.Unlock()
	return s, true, false, nil
}

// DIDOf returns the did:plc whose genesis operation has sequence number
// seq, false if the map does not know it.
func (m *PLCMap) DIDOf(ctx context.Context, seq uint64) (string, bool, error) {
	for attempt := 0; ; attempt++ {
		d, ok, stale, err := m.didOf(ctx, seq)
		if !stale || attempt == 8 {
			return d, ok, err
		}
	}
}

// didOf is one try of DIDOf (seqOf).
func (m *PLCMap) didOf(ctx context.Context, seq uint64) (string, bool, bool, error) {
	v, err := m.view(ctx)
	if err != nil {
		return "", false, false, err
	}
	m.mu.Lock()
	m.pruneLocked(v.Generation())
	if el, ok := m.mu.bySeq[seq]; ok {
		m.mu.lru.MoveToFront(el)
		id := el.Value.(plcEntry).id
		m.mu.Unlock()
		return id.String(), true, false, nil
	}
	if id, ok := m.pendingIDLocked(seq); ok {
		m.mu.Unlock()
		return id.String(), true, false, nil
	}
	m.mu.Unlock()
	var prefix [8]byte
	binary.BigEndian.PutUint64(prefix[:], seq)
	rec, err := m.reader.lookupMax(ctx, v, TreePLCSeq, prefix[:])
	if err != nil {
		return "", false, false, err
	}
	if rec == nil {
		return "", false, m.staleView(v), nil
	}
	var id PLCID
	copy(id[:], rec[8:8+PLCIDSize])
	m.mu.Lock()
	m.cachePutLocked(id, seq)
	m.mu.Unlock()
	return id.String(), true, false, nil
}

// staleView says whether a sealed batch was dropped at a generation newer
// than v's: a lookup that found nothing in v may have missed it.
func (m *PLCMap) staleView(v *View) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.sealed.stale(v.Generation())
}

// LookupSeq is SeqOf bounded by PLCLookupTimeout (link's error-reporting
// PLC lookup).
func (m *PLCMap) LookupSeq(did string) (uint64, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), PLCLookupTimeout)
	defer cancel()
	return m.SeqOf(ctx, did)
}

// LookupDID is DIDOf bounded by PLCLookupTimeout.
func (m *PLCMap) LookupDID(seq uint64) (string, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), PLCLookupTimeout)
	defer cancel()
	return m.DIDOf(ctx, seq)
}

// Seq implements link.PLC; a read error is "unknown" here; link.Codec uses
// LookupSeq, which reports it.
func (m *PLCMap) Seq(did string) (uint64, bool) {
	s, ok, err := m.LookupSeq(did)
	return s, ok && err == nil
}

// DID implements link.PLC.
func (m *PLCMap) DID(seq uint64) (string, bool) {
	s, ok, err := m.LookupDID(seq)
	return s, ok && err == nil
}
