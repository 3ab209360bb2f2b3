package link

import (
	"bytes"
	"slices"
	"testing"
)

// A forward key is its record with ForwardBit set in the collection field:
// it round-trips, is never a real target (record, repository, hashed),
// and a record's forward entries are one contiguous range of the links
// tree, apart from every real target's links.
func TestForwardKey(t *testing.T) {
	c := Codec{Outlines: NewMemOutlines()}
	src, err := c.Record("did:plc:ewvi7nxzyoun6zhxrhs64oiz", "app.bsky.graph.listitem", "3l4ofqa5gmx2y", true)
	if err != nil {
		t.Fatal(err)
	}
	odd, err := c.Record("did:web:example.com", "com.example.thing", "self", true) // outlined DID and rkey
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []RecordID{src, odd} {
		f := ForwardKey(s)
		if !f.IsForward() || s.IsForward() {
			t.Fatalf("%v: IsForward %v, forward key %v IsForward %v", s, s.IsForward(), f, f.IsForward())
		}
		if f.ForwardSource() != s || f == s {
			t.Fatalf("%v: forward key %v, back %v", s, f, f.ForwardSource())
		}
		if f.IsRepo() || f.IsHashed() || f.Repo() != s.Repo() {
			t.Fatalf("forward key %v: repo %v hashed %v", f, f.IsRepo(), f.IsHashed())
		}
		b := f.Bytes()
		sb := s.Bytes()
		sb[8] |= 0x40 // bit 62 of the big-endian collection field
		if b != sb || GetRecordID(b[:]) != f {
			t.Fatalf("forward key %v encodes as %x, want %x", f, b, sb)
		}
	}
	// Never a real target: the reserved and interned collections are far
	// below bit 62.
	tg, err := ParseTarget("https://example.com/a")
	if err != nil {
		t.Fatal(err)
	}
	hashed := HashTarget(tg.Norm)
	for _, real := range []RecordID{src, odd, RepoID(src.DID), hashed, {Collection: CollectionFirst}} {
		if real.IsForward() {
			t.Fatalf("real target %v is a forward key", real)
		}
		if ForwardKey(real).ForwardSource() != real {
			t.Fatalf("%v does not round-trip", real)
		}
	}
	if ForwardKey(hashed) == hashed || ForwardKey(RepoID(7)) == RepoID(7) {
		t.Fatal("a forward key equals its record")
	}

	// The forward entries of src (S -> T at L is {ForwardKey(S), T, L,
	// rev}) are contiguous in byte order and sorted by (T, L).
	targets := []RecordID{hashed, RepoID(odd.DID), odd}
	var recs [][BacklinkSize]byte
	for i, tg := range targets {
		fl := Backlink{Target: ForwardKey(src), Source: tg, Location: MakeLocation(uint64(3-i), i == 1), SourceRev: 100}
		var b [BacklinkSize]byte
		fl.Put(b[:])
		recs = append(recs, b)
		bl := Backlink{Target: tg, Source: src, Location: fl.Location, SourceRev: 100}
		bl.Put(b[:])
		recs = append(recs, b)
	}
	slices.SortFunc(recs, func(a, b [BacklinkSize]byte) int { return bytes.Compare(a[:], b[:]) })
	first, last := -1, -1
	for i, r := range recs {
		l := GetBacklink(r[:])
		if l.Target.IsForward() {
			if first < 0 {
				first = i
			}
			last = i
			if l.Target.ForwardSource() != src {
				t.Fatalf("forward entry %v of another record", l)
			}
		}
	}
	if first < 0 || last-first+1 != len(targets) {
		t.Fatalf("forward entries at %d..%d of %d records, want %d contiguous", first, last, len(recs), len(targets))
	}
	for i := first + 1; i <= last; i++ {
		a, b := GetBacklink(recs[i-1][:]), GetBacklink(recs[i][:])
		if c := a.Source.Compare(b.Source); c > 0 || (c == 0 && a.Location >= b.Location) {
			t.Fatalf("forward entries out of (target, location) order: %v then %v", a, b)
		}
	}
}
