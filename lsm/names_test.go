package lsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// publishNames writes a batch of names as a delta run and applies it.
func (f *plcFixture) publishNames(b *NameBatch) uint64 {
	f.t.Helper()
	run, err := WriteRun(f.ctx, f.store, f.cat, TreeNames, RunDelta, 0, b.Records())
	if err != nil {
		f.t.Fatal(err)
	}
	f.apply(Edit{Base: f.view.Generation(), Add: []Run{run}})
	return f.view.Generation()
}

func newNamesFixture(t testing.TB) *plcFixture {
	ctx := context.Background()
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &plcFixture{t: t, ctx: ctx, store: store, cat: NewCatalog(t.TempDir(), store)}
	if f.view, err = OpenView(ctx, f.cat, &Manifest{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkNamed renders every value back to its key and encodes every key,
// read-only, to its value; the same for the DIDs.
func checkNamed(t *testing.T, c *link.Codec, want, dids map[string]uint64, stage string) {
	t.Helper()
	for k, v := range want {
		got, err := c.RenderRKey(v)
		if err != nil || got != k {
			t.Fatalf("%s: RenderRKey(%#x) = %.40q, %v; want %.40q", stage, v, got, err, k)
		}
		back, err := c.RKey(k, false)
		if err != nil || back != v {
			t.Fatalf("%s: RKey(%.40q) = %#x, %v; want %#x", stage, k, back, err, v)
		}
	}
	for d, v := range dids {
		got, err := c.RenderDID(v)
		if err != nil || got != d {
			t.Fatalf("%s: RenderDID(%#x) = %q, %v; want %q", stage, v, got, err, d)
		}
		back, err := c.DID(d, false)
		if err != nil || back != v {
			t.Fatalf("%s: DID(%q) = %#x, %v; want %#x", stage, d, back, err, v)
		}
	}
	if _, err := c.RKey("never-written", false); !errors.Is(err, link.ErrUnknown) {
		t.Fatalf("%s: an unknown key encodes: %v", stage, err)
	}
	if _, err := c.DID("did:web:never.example", false); !errors.Is(err, link.ErrUnknown) {
		t.Fatalf("%s: an unknown did:web encodes: %v", stage, err)
	}
}

// TestNamedRKeys: record keys that are not TIDs and DIDs of methods other
// than did:plc, named through link.Codec in a NameMap: read back while pending, sealed, published, after a
// compaction into several shards and by a fresh node (its own catalog and
// reader, a cache smaller than the names); names of every chunk count; a
// value another key holds is probed past; an outline made before names
// keeps its value; two strings under one value are corrupt.
func TestNamedRKeys(t *testing.T) {
	f := newNamesFixture(t)
	outl := link.NewMemOutlines()
	legacy, err := outl.Assign(link.OutlineRKey, "legacy-outline")
	if err != nil {
		t.Fatal(err)
	}
	m := NewNameMap(NewReader(f.store, nil), Views(f.current), 4<<10)
	c := &link.Codec{Outlines: outl, Names: m}

	// A key whose first value another key holds already: "taken" is
	// given "squatter"'s first value first (as after a 62-bit collision).
	probe := NewNameMap(NewReader(f.store, nil), Views(f.current), 0)
	first, err := (&link.Codec{Outlines: link.NewMemOutlines(), Names: probe}).RKey("squatter", true)
	if err != nil {
		t.Fatal(err)
	}
	if held := m.Add(link.NameRKey, first, "taken"); held != "taken" {
		t.Fatalf("Add on a free value: %q", held)
	}

	want, dids := map[string]uint64{}, map[string]uint64{}
	keys := []string{"self", "squatter"}
	for _, n := range []int{1, 37, 38, 39, 76, 77, 512, NameBytesMax} {
		keys = append(keys, strings.Repeat(string(rune('a'+n%26)), n))
	}
	for batch := 0; batch < 3; batch++ {
		for i := 0; i < 700; i++ {
			keys = append(keys, fmt.Sprintf("feed-%d-%d", batch, i))
		}
		for _, k := range keys {
			v, err := c.RKey(k, true)
			if err != nil {
				t.Fatal(err)
			}
			if v&(link.OutlinedBit|link.NamedBit) != link.OutlinedBit|link.NamedBit {
				t.Fatalf("RKey(%.20q) = %#x: not tagged as named", k, v)
			}
			if old, ok := want[k]; ok && old != v {
				t.Fatalf("RKey(%.20q) = %#x, then %#x", k, old, v)
			}
			want[k] = v
		}
		for i := 0; i < 300; i++ {
			d := fmt.Sprintf("did:web:user%d-%d.example.com", batch, i)
			v, err := c.DID(d, true)
			if err != nil {
				t.Fatal(err)
			}
			if v&(link.OutlinedBit|link.NamedBit) != link.OutlinedBit|link.NamedBit {
				t.Fatalf("DID(%s) = %#x: not tagged as named", d, v)
			}
			dids[d] = v
		}
		// The same string as a record key and as a DID: two names.
		if k, d := "did:web:both.example", "did:web:both.example"; batch == 0 {
			kv, err := c.RKey(k, true)
			if err != nil {
				t.Fatal(err)
			}
			dv, err := c.DID(d, true)
			if err != nil {
				t.Fatal(err)
			}
			want[k], dids[d] = kv, dv
		}
		if want["squatter"] != first+1 {
			t.Fatalf("squatter got %#x; its first value %#x is taken, want the next", want["squatter"], first)
		}
		checkNamed(t, c, want, dids, "pending")
		if got, err := c.RenderRKey(first); err != nil || got != "taken" {
			t.Fatalf("the taken value renders %q, %v", got, err)
		}
		b := m.Seal()
		checkNamed(t, c, want, dids, "sealed")
		m.Published(b, f.publishNames(b))
		m.mu.Lock()
		held := m.mu.sealed.len()
		m.mu.Unlock()
		if held != 0 {
			t.Fatalf("%d sealed batches kept after their publication", held)
		}
		checkNamed(t, c, want, dids, "published")
		keys = keys[:0]
	}
	if v, err := c.RKey("legacy-outline", true); err != nil || v != link.OutlinedBit|legacy {
		t.Fatalf("an outlined key got %#x, %v; want its outline %#x", v, err, link.OutlinedBit|legacy)
	}
	if m.Seal() != nil {
		t.Fatal("names pending after every key was published")
	}
	// With no PLC map, a did:plc stays an outline (the map may know it
	// later, and an outline is looked up first).
	plc := "did:plc:r2zybk6op3ymzpz6jhqpkoy5"
	if v, err := c.DID(plc, true); err != nil || v&(link.OutlinedBit|link.NamedBit) != link.OutlinedBit {
		t.Fatalf("DID(%s) = %#x, %v; want an outline", plc, v, err)
	}

	runs := f.view.Manifest.RunsOf(TreeNames)
	out, err := CompactRuns(f.ctx, f.store, f.cat, f.view, runs, CompactOptions{ShardTargetBytes: 1 << 10, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tables) < 2 {
		t.Fatalf("names compacted into %d shards; the test wants several", len(out.Tables))
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	f.apply(Edit{Base: f.view.Generation(), Add: []Run{out}, Remove: ids})
	fresh := &plcFixture{t: t, ctx: f.ctx, store: f.store, cat: NewCatalog(t.TempDir(), f.store)}
	if fresh.view, err = OpenView(f.ctx, fresh.cat, f.view.Manifest); err != nil {
		t.Fatal(err)
	}
	c2 := &link.Codec{Outlines: outl, Names: NewNameMap(NewReader(f.store, nil), Views(fresh.current), 1<<10)}
	checkNamed(t, c2, want, dids, "compacted, a fresh node")

	// Two strings under one value: every read of it fails as corrupt.
	v := want["self"]
	bad := NameRecords(nil, link.NameRKey, v, "selfish")
	SortRecords(bad, 64)
	run, err := WriteRun(f.ctx, f.store, f.cat, TreeNames, RunDelta, 0, bad)
	if err != nil {
		t.Fatal(err)
	}
	f.apply(Edit{Base: f.view.Generation(), Add: []Run{run}})
	c3 := &link.Codec{Outlines: outl, Names: NewNameMap(NewReader(f.store, nil), Views(f.current), 0)}
	if s, err := c3.RenderRKey(v); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a value holding two keys renders %q, %v; want a corrupt error", s, err)
	}
}

// TestNameMapLookupOfOldView: a lookup that read a view older than the one
// another lookup dropped a published batch at asks again with the newest
// view, so a name given is never answered "none" in between.
func TestNameMapLookupOfOldView(t *testing.T) {
	f := newNamesFixture(t)
	old := f.view
	m := NewNameMap(NewReader(f.store, nil), Views(f.current), 0)
	m.Add(link.NameRKey, 7, "x")
	b := m.Seal()
	m.Published(b, f.publishNames(b))
	// Published dropped the batch from the pending names; a lookup of a
	// value no name holds reads the new view.
	if s, ok, err := m.Lookup(f.ctx, link.NameRKey, 9); err != nil || ok {
		t.Fatalf("a free value: %q %v %v", s, ok, err)
	}
	// A lookup of x whose first view is the old one (taken before the
	// publication, as by a reader that was descheduled).
	calls := 0
	m.view = func(context.Context) (*View, error) {
		calls++
		if calls == 1 {
			return old, nil
		}
		return f.view, nil
	}
	if s, ok, err := m.Lookup(f.ctx, link.NameRKey, 7); err != nil || !ok || s != "x" {
		t.Fatalf("x after its batch was dropped, first read from the old view: %q %v %v (%d views)", s, ok, err, calls)
	}
	if calls != 2 {
		t.Fatalf("%d views asked, want 2", calls)
	}
}

// BenchmarkNamedRKey: the write path's cost of a non-TID record key: an
// outline (a map in memory, before names), a named key in the NameMap's
// cache ("self"), and a key no name holds yet (read-only: the filter
// probes of the names tree's runs, then ErrUnknown), with 8 runs of names.
func BenchmarkNamedRKey(b *testing.B) {
	f := newNamesFixture(b)
	m := NewNameMap(NewReader(f.store, nil), Views(f.current), 0)
	c := &link.Codec{Outlines: link.NewMemOutlines(), Names: m}
	for run := 0; run < 8; run++ {
		for i := 0; i < 1000; i++ {
			if _, err := c.RKey(fmt.Sprintf("feed-%d-%d", run, i), true); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := c.RKey("self", true); err != nil {
			b.Fatal(err)
		}
		nb := m.Seal()
		m.Published(nb, f.publishNames(nb))
	}
	outl := &link.Codec{Outlines: link.NewMemOutlines()}
	if _, err := outl.RKey("self", true); err != nil {
		b.Fatal(err)
	}
	b.Run("outline", func(b *testing.B) {
		for b.Loop() {
			if _, err := outl.RKey("self", false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("named-cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.RKey("self", false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("named-absent", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.RKey("never-named", false); !errors.Is(err, link.ErrUnknown) {
				b.Fatal(err)
			}
		}
	})
}

// TestNamedTargets: the text of a hashed target (a URL; an at-uri whose
// collection nothing made known), stored through link.Codec.NameTarget,
// renders from its key while pending and once published, also on a
// fresh node; a value another string holds (as after a 64-bit collision
// of the hashes' high halves) is probed past, and rendering skips it; a
// key that is not a hash, or a hash never named, renders nothing.
func TestNamedTargets(t *testing.T) {
	f := newNamesFixture(t)
	outl := link.NewMemOutlines()
	m := NewNameMap(NewReader(f.store, nil), Views(f.current), 4<<10)
	c := &link.Codec{Outlines: outl, Names: m}
	parse := func(s string) link.Target {
		tg, err := link.ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	url := parse("https://example.com/a/" + strings.Repeat("b", 100)) // several chunks
	rec := parse("at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/com.example.unknown/3mptbyplj5d2a")
	known := parse("did:plc:r2zybk6op3ymzpz6jhqpkoy5")
	want := map[link.RecordID]string{}
	for _, tg := range []link.Target{url, rec} {
		key := c.TargetKey(&tg)
		if !key.IsHashed() {
			t.Fatalf("%s: key %v, want its hash", tg.Norm, key)
		}
		want[key] = tg.Norm
	}
	urlKey := c.TargetKey(&url)
	if held := m.Add(link.NameTarget, urlKey.RKey, "https://example.com/squatter"); held != "https://example.com/squatter" {
		t.Fatalf("Add on a free value: %q", held)
	}
	for _, tg := range []link.Target{url, rec, known} {
		if err := c.NameTarget(&tg, c.TargetKey(&tg)); err != nil {
			t.Fatalf("NameTarget(%s): %v", tg.Norm, err)
		}
	}
	if err := c.NameTarget(&url, c.TargetKey(&rec)); err == nil {
		t.Fatal("NameTarget of a key that is not the target's hash: no error")
	}
	check := func(c *link.Codec, stage string) {
		t.Helper()
		for key, s := range want {
			got, ok, err := c.RenderHashedTarget(key)
			if err != nil || !ok || got != s {
				t.Fatalf("%s: RenderHashedTarget(%v) = %q, %v, %v; want %q", stage, key, got, ok, err, s)
			}
		}
		for _, key := range []link.RecordID{link.HashTarget("https://example.com/never"), c.TargetKey(&known)} {
			if got, ok, err := c.RenderHashedTarget(key); ok || err != nil {
				t.Fatalf("%s: RenderHashedTarget(%v) = %q, %v, want none", stage, key, got, err)
			}
		}
	}
	check(c, "pending")
	b := m.Seal()
	m.Published(b, f.publishNames(b))
	check(c, "published")
	fresh := &plcFixture{t: t, ctx: f.ctx, store: f.store, cat: NewCatalog(t.TempDir(), f.store)}
	var err error
	if fresh.view, err = OpenView(f.ctx, fresh.cat, f.view.Manifest); err != nil {
		t.Fatal(err)
	}
	check(&link.Codec{Outlines: outl, Names: NewNameMap(NewReader(f.store, nil), Views(fresh.current), 1<<10)}, "a fresh node")
}
