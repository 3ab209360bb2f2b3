package lsm

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore"
)

func TestParsePLC(t *testing.T) {
	var id PLCID
	for i := range id {
		id[i] = byte(i*17 + 3)
	}
	did := id.String()
	if len(did) != len("did:plc:")+24 {
		t.Fatalf("%s: length %d", did, len(did))
	}
	back, ok := ParsePLC(did)
	if !ok || back != id {
		t.Fatalf("ParsePLC(%s) = %x, %v", did, back, ok)
	}
	// Real did:plc identifiers round-trip.
	for _, d := range []string{"did:plc:r2zybk6op3ymzpz6jhqpkoy5", "did:plc:mlbpil2fwz43vfn6uuysxtqa", "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"} {
		id, ok := ParsePLC(d)
		if !ok || id.String() != d {
			t.Fatalf("%s: %v %s", d, ok, id.String())
		}
	}
	for _, bad := range []string{"", "did:plc:", "did:plc:abc", "did:web:example.com", "did:plc:R2ZYBK6OP3YMZPZ6JHQPKOY5",
		"did:plc:r2zybk6op3ymzpz6jhqpkoy1", "did:plc:r2zybk6op3ymzpz6jhqpkoy5a", "did:plc:r2zybk6op3ymzpz6jhqpkoy=",
		"did:plc:r2zybk6op3ymzpz6jhq\npkoy", "DID:plc:r2zybk6op3ymzpz6jhqpkoy5"} {
		if _, ok := ParsePLC(bad); ok {
			t.Errorf("ParsePLC(%q) accepted", bad)
		}
	}
}

type plcFixture struct {
	t     testing.TB
	ctx   context.Context
	store objstore.Store
	cat   *Catalog
	view  *View
}

func (f *plcFixture) current() *View { return f.view }

// publish writes a batch as two delta runs and applies them.
func (f *plcFixture) publish(b *PLCBatch) uint64 {
	f.t.Helper()
	did, seq := b.Records()
	var add []Run
	for _, x := range []struct {
		tree Tree
		recs []byte
	}{{TreePLCDID, did}, {TreePLCSeq, seq}} {
		run, err := WriteRun(f.ctx, f.store, f.cat, x.tree, RunDelta, 0, x.recs)
		if err != nil {
			f.t.Fatal(err)
		}
		add = append(add, run)
	}
	f.apply(Edit{Base: f.view.Generation(), Add: add})
	return f.view.Generation()
}

func (f *plcFixture) apply(e Edit) {
	f.t.Helper()
	next, _, err := f.view.Manifest.Apply(e)
	if err != nil {
		f.t.Fatal(err)
	}
	v, err := OpenView(f.ctx, f.cat, next)
	if err != nil {
		f.t.Fatal(err)
	}
	f.view = v
}

func randomPLC(t *testing.T) PLCID {
	var id PLCID
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	return id
}

// checkAll looks every entry up both ways, and absent ones.
func checkAll(t *testing.T, m *PLCMap, want map[PLCID]uint64, absent []PLCID) {
	t.Helper()
	ctx := context.Background()
	for id, seq := range want {
		s, ok, err := m.SeqOf(ctx, id.String())
		if err != nil || !ok || s != seq {
			t.Fatalf("SeqOf(%s) = %d, %v, %v; want %d", id, s, ok, err, seq)
		}
		d, ok, err := m.DIDOf(ctx, seq)
		if err != nil || !ok || d != id.String() {
			t.Fatalf("DIDOf(%d) = %s, %v, %v; want %s", seq, d, ok, err, id)
		}
	}
	for i, id := range absent {
		if s, ok, err := m.SeqOf(ctx, id.String()); ok || err != nil {
			t.Fatalf("absent %s: %d, %v, %v", id, s, ok, err)
		}
		if d, ok, err := m.DIDOf(ctx, uint64(1_000_000+i)); ok || err != nil {
			t.Fatalf("absent seq: %s, %v, %v", d, ok, err)
		}
	}
}

// checkPLCCodec checks m through link.Codec: a known did:plc is inline as
// its seq and renders back; an outlined one stays outlined even though
// the map knows it. It returns the known DID it used.
func checkPLCCodec(t *testing.T, m *PLCMap, want map[PLCID]uint64, absent []PLCID) (known PLCID) {
	t.Helper()
	outl := link.NewMemOutlines()
	c := &link.Codec{Outlines: outl, PLC: m}
	for id := range want {
		known = id
		break
	}
	v, err := c.DID(known.String(), true)
	if err != nil || v != want[known] {
		t.Fatalf("codec DID = %d, %v; want inline %d", v, err, want[known])
	}
	if s, err := c.RenderDID(v); err != nil || s != known.String() {
		t.Fatalf("RenderDID = %s, %v", s, err)
	}
	var other PLCID
	for id := range want {
		if id != known {
			other = id
			break
		}
	}
	if _, err := outl.Assign(link.OutlineDID, other.String()); err != nil {
		t.Fatal(err)
	}
	if v, err := c.DID(other.String(), true); err != nil || v&link.OutlinedBit == 0 {
		t.Fatalf("outlined did:plc encoded %x, %v; want it to stay outlined", v, err)
	}
	if _, err := c.DID(absent[0].String(), false); !errors.Is(err, link.ErrUnknown) {
		t.Fatalf("unknown did:plc: %v", err)
	}
	return known
}

// The map round-trips did -> seq -> did through pending batches, flushed
// tables, a compaction of them and a fresh node's view (its own catalog
// fetching every meta from the store), with a cache smaller than the map.
func TestPLCMapRoundTrip(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	f := &plcFixture{t: t, ctx: ctx, store: store, cat: NewCatalog(t.TempDir(), store)}
	var err error
	if f.view, err = OpenView(ctx, f.cat, &Manifest{}); err != nil {
		t.Fatal(err)
	}
	m := NewPLCMap(NewReader(store, nil), Views(f.current), 64)
	want := map[PLCID]uint64{}
	var absent []PLCID
	for i := 0; i < 20; i++ {
		absent = append(absent, randomPLC(t))
	}
	seq := uint64(0)
	for batch := 0; batch < 4; batch++ {
		for i := 0; i < 1500; i++ {
			seq += 1 + uint64(i%3) // gaps: not every operation is a genesis
			id := randomPLC(t)
			want[id] = seq
			m.Add(id, seq)
		}
		checkAll(t, m, want, absent) // pending: from memory
		b := m.Seal()
		if b == nil || b.Len() != 1500 {
			t.Fatalf("sealed batch: %v", b)
		}
		checkAll(t, m, want, absent) // sealed, not yet published
		gen := f.publish(b)
		m.Published(b, gen)
		checkAll(t, m, want, absent) // from the tables
		m.mu.Lock()
		sealed := m.mu.sealed.len()
		m.mu.Unlock()
		if sealed != 0 {
			t.Fatalf("%d sealed batches left after the view showed them", sealed)
		}
	}
	// A replayed entry (a follower resuming from its committed cursor)
	// folds away.
	for id, s := range want {
		m.Add(id, s)
		break
	}
	gen := f.publish(m.Seal())
	if gen == 0 {
		t.Fatal("no generation")
	}
	// Compact each tree's runs.
	for _, tree := range []Tree{TreePLCDID, TreePLCSeq} {
		runs := f.view.Manifest.RunsOf(tree)
		out, err := CompactRuns(ctx, store, f.cat, f.view, runs, CompactOptions{ShardTargetBytes: 1 << 10, SpillDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if out.Records() != uint64(len(want)) {
			t.Fatalf("%s compacted to %d records, want %d", tree, out.Records(), len(want))
		}
		if len(out.Tables) < 2 {
			t.Fatalf("%s: %d shards; the test wants several", tree, len(out.Tables))
		}
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		f.apply(Edit{Base: f.view.Generation(), Add: []Run{out}, Remove: ids})
	}
	m2 := NewPLCMap(NewReader(store, nil), Views(f.current), 16)
	checkAll(t, m2, want, absent)

	// A fresh node: its own catalog and reader, the manifest alone.
	fresh := &plcFixture{t: t, ctx: ctx, store: store, cat: NewCatalog(t.TempDir(), store)}
	if fresh.view, err = OpenView(ctx, fresh.cat, f.view.Manifest); err != nil {
		t.Fatal(err)
	}
	m3 := NewPLCMap(NewReader(store, nil), Views(fresh.current), 16)
	checkAll(t, m3, want, absent)

	// Through link.Codec.
	known := checkPLCCodec(t, m3, want, absent)

	// A store that lost the tables: an error, never "unknown" (which would
	// outline a known DID, or answer "no links").
	for _, tree := range []Tree{TreePLCDID, TreePLCSeq} {
		for _, ref := range f.view.Manifest.Tables(tree) {
			data, _ := TableKeys(tree, ref.ID)
			if err := store.Delete(ctx, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	m4 := NewPLCMap(NewReader(store, nil), Views(fresh.current), 16)
	c4 := &link.Codec{Outlines: link.NewMemOutlines(), PLC: m4}
	if _, err := c4.DID(known.String(), true); err == nil || errors.Is(err, link.ErrUnknown) {
		t.Fatalf("lost tables: DID gave %v, want a read error", err)
	}
	if _, err := c4.RenderDID(want[known]); err == nil || !strings.Contains(err.Error(), "plc seq") {
		t.Fatalf("lost tables: RenderDID gave %v, want a read error", err)
	}
}

// TestPLCMapLookupOfOldView: as TestNameMapLookupOfOldView, for both
// directions of the PLC map.
func TestPLCMapLookupOfOldView(t *testing.T) {
	f := newNamesFixture(t)
	old := f.view
	m := NewPLCMap(NewReader(f.store, nil), Views(f.current), 0)
	id1, id2 := randomPLC(t), randomPLC(t)
	m.Add(id1, 5)
	m.Add(id2, 6)
	b := m.Seal()
	m.Published(b, f.publish(b))
	if _, ok, err := m.SeqOf(f.ctx, randomPLC(t).String()); ok || err != nil {
		t.Fatalf("an unknown did:plc: %v %v", ok, err)
	}
	calls := 0
	m.view = func(context.Context) (*View, error) {
		calls++
		if calls%2 == 1 {
			return old, nil // each lookup's first view predates the batch
		}
		return f.view, nil
	}
	if s, ok, err := m.SeqOf(f.ctx, id1.String()); err != nil || !ok || s != 5 {
		t.Fatalf("SeqOf, first read from the old view: %d %v %v (%d views)", s, ok, err, calls)
	}
	if d, ok, err := m.DIDOf(f.ctx, 6); err != nil || !ok || d != id2.String() {
		t.Fatalf("DIDOf, first read from the old view: %s %v %v (%d views)", d, ok, err, calls)
	}
	if calls != 4 {
		t.Fatalf("%d views asked, want 4", calls)
	}
}

// Should two runs ever disagree about a did:plc (never, from one PLC
// directory), a lookup answers what a compaction of them keeps (Fold: the
// largest record), before and after it: the answer never flips.
func TestPLCMapDisagreeingRunsAnswerAsCompacted(t *testing.T) {
	f := newNamesFixture(t)
	id := randomPLC(t)
	for _, seq := range []uint64{7, 5} {
		m := NewPLCMap(NewReader(f.store, nil), Views(f.current), 0)
		m.Add(id, seq)
		b := m.Seal()
		m.Published(b, f.publish(b))
	}
	seqOf := func(stage string) uint64 {
		t.Helper()
		m := NewPLCMap(NewReader(f.store, nil), Views(f.current), 0) // no cache
		s, ok, err := m.SeqOf(f.ctx, id.String())
		if err != nil || !ok {
			t.Fatalf("%s: SeqOf: %v %v", stage, ok, err)
		}
		return s
	}
	before := seqOf("two runs")
	var remove []string
	runs := f.view.Manifest.RunsOf(TreePLCDID)
	for _, r := range runs {
		remove = append(remove, r.ID)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs", len(runs))
	}
	out, err := CompactRuns(f.ctx, f.store, f.cat, f.view, runs, CompactOptions{SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f.apply(Edit{Base: f.view.Generation(), Add: []Run{out}, Remove: remove})
	if after := seqOf("compacted"); before != 7 || after != 7 {
		t.Fatalf("seq %d before the compaction, %d after; want 7 both", before, after)
	}
}
