package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/zeebo/xxh3"
)

// mappedLinks returns n sorted backlinks shaped like the network's: a few
// thousand targets, sources from a few hundred accounts (so the table has
// an account dictionary), TIDs.
func mappedLinks(rng *rand.Rand, n int) []byte {
	recs := make([]byte, 0, n*link.BacklinkSize)
	for range n {
		l := link.Backlink{
			Target:    link.RecordID{RKey: uint64(rng.IntN(3000)) << 10, Collection: 3, DID: uint64(1 + rng.IntN(50))},
			Source:    link.RecordID{RKey: uint64(1700000000000000+rng.IntN(1e12))<<10 | uint64(rng.IntN(4)), Collection: 5, DID: uint64(100 + rng.IntN(400))},
			Location:  1,
			SourceRev: uint64(rng.IntN(1 << 40)),
		}
		var b [link.BacklinkSize]byte
		l.Put(b[:])
		recs = append(recs, b[:]...)
	}
	SortRecords(recs, link.BacklinkSize)
	return synthDedup(recs, link.BacklinkSize)
}

// A mapped meta answers every question as the decoded one does: frame
// entries, filter, fences, ranges, dictionary and decoded frames, for
// backlinks and revocations, 8- and 16-bit and blocked filters, frame counts on both
// sides of the stored-offset interval.
func TestMappedMetaMatchesDecoded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	cases := []struct {
		name string
		f    Format
		recs []byte
		opt  TableOptions
	}{
		{"links-16", BacklinkFormat, mappedLinks(rng, 20000), TableOptions{frameMax: 97}},
		{"links-8", BacklinkFormat, mappedLinks(rng, 9000), TableOptions{frameMax: 50, FilterBits: FilterBits8}},
		{"links-blocked", BacklinkFormat, mappedLinks(rng, 9000), TableOptions{Fast: true, frameMax: 50, FilterBits: FilterBlocked}},
		{"links-one-frame", BacklinkFormat, mappedLinks(rng, 300), TableOptions{}},
		{"links-64-frames", BacklinkFormat, mappedLinks(rng, 64*40), TableOptions{frameMax: 40}},
		{"revocations", RevocationFormat, tblRandomRecords(rng, RevocationFormat, 5000), TableOptions{frameMax: 33}},
		{"random-links", BacklinkFormat, tblRandomRecords(rng, BacklinkFormat, 3000), TableOptions{frameMax: 31}},
		{"links-backfill", BacklinkFormat, synthBackfillBacklinks(31, 20000), TableOptions{frameMax: 211}},
		{"links-version-2", BacklinkFormat, synthBackfillBacklinks(32, 9000), TableOptions{frameMax: 97, version: 2}},
		{"revocations-version-2", RevocationFormat, tblRandomRecords(rng, RevocationFormat, 5000), TableOptions{frameMax: 33, version: 2}},
		{"links-version-4", BacklinkFormat, synthBackfillBacklinks(33, 9000), TableOptions{frameMax: 97, version: 4}},
		{"revocations-version-4", RevocationFormat, tblRandomRecords(rng, RevocationFormat, 5000), TableOptions{frameMax: 33, version: 4}},
	}
	store := newLocalStore(t)
	cat := NewCatalogMapped(t.TempDir(), store)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, meta, err := BuildTable(tc.f, tc.recs, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			d, err := DecodeMeta(meta)
			if err != nil {
				t.Fatal(err)
			}
			id := NewID()
			if _, err := cat.Add(TreeLinks, id, meta); err != nil {
				t.Fatal(err)
			}
			m, err := cat.Load(ctx, TreeLinks, TableRef{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			if m.mapped == nil || m.Frames != nil {
				t.Fatal("the catalog's meta is not mapped")
			}
			compareMapped(t, rng, tc.f, tc.recs, data, d, m, tc.f == BacklinkFormat && !tc.opt.Fast && !strings.HasPrefix(tc.name, "random"))
		})
	}
	if st := cat.Stats(); !st.Mapped || st.Metas != len(cases) || st.Bytes > int64(len(cases))*1024 {
		t.Fatalf("catalog %+v: want %d mapped metas of at most 1 KiB of heap each", st, len(cases))
	}
}

func compareMapped(t *testing.T, rng *rand.Rand, f Format, recs, data []byte, d, m *TableMeta, wantDict bool) {
	t.Helper()
	w, p := f.Width, f.PrefixLen
	if m.Records != d.Records || m.DataBytes != d.DataBytes || m.MetaBytes != d.MetaBytes || m.Prefixes != d.Prefixes ||
		m.ShardBits != d.ShardBits || m.Shard != d.Shard || m.transform != d.transform || m.filterBits != d.filterBits ||
		!bytes.Equal(m.MinKey, d.MinKey) || !bytes.Equal(m.MaxKey, d.MaxKey) || m.NumFrames() != d.NumFrames() || m.layout != d.layout {
		t.Fatalf("mapped %v, decoded %v", m, d)
	}
	if d.NumFrames() < 2 && len(recs)/w > 1000 {
		t.Fatalf("%d frames: the case does not test the fences", d.NumFrames())
	}
	for i := range d.NumFrames() {
		a, b := d.Frame(i), m.Frame(i)
		if a.Offset != b.Offset || a.Length != b.Length || a.Records != b.Records || a.Checksum != b.Checksum ||
			a.Continues != b.Continues || !bytes.Equal(a.First, b.First) {
			t.Fatalf("frame %d: mapped %+v, decoded %+v", i, b, a)
		}
		off, n := m.ByteRange(i, i)
		x, err := d.DecodeFrame(i, data[off:off+n], nil)
		if err != nil {
			t.Fatal(err)
		}
		y, err := m.DecodeFrame(i, data[off:off+n], nil)
		if err != nil || !bytes.Equal(x, y) {
			t.Fatalf("frame %d decodes differently mapped (%v)", i, err)
		}
	}
	if d.dict.len() != m.dict.len() {
		t.Fatalf("dictionary of %d entries mapped, %d decoded", m.dict.len(), d.dict.len())
	}
	if d.dict.len() > 0 && (d.dict.hasRevs() != m.dict.hasRevs() || d.dict.hasRevs() != (d.version >= 3)) {
		t.Fatalf("dictionary revs: mapped %v, decoded %v, version %d", m.dict.hasRevs(), d.dict.hasRevs(), d.version)
	}
	withRevs := 0
	for i := range d.dict.len() {
		ad, ac := d.dict.account(i)
		bd, bc := m.dict.account(i)
		if ad != bd || ac != bc {
			t.Fatalf("dictionary entry %d differs: mapped %d/%d, decoded %d/%d", i, bd, bc, ad, ac)
		}
		if d.dict.hasRevs() {
			if d.dict.rev(i) != m.dict.rev(i) {
				t.Fatalf("dictionary entry %d's rev differs: mapped %d, decoded %d", i, m.dict.rev(i), d.dict.rev(i))
			}
			if d.dict.rev(i) != 0 {
				withRevs++
			}
		}
	}
	if wantDict && d.version >= 3 && withRevs == 0 && bytes.Contains([]byte(t.Name()), []byte("backfill")) {
		t.Fatal("no dictionary entry with a rev: the case does not test them")
	}
	if wantDict && d.dict.len() == 0 {
		t.Fatal("no dictionary: the case does not test it")
	}
	// Every present prefix, and random ones (absent, or near present ones).
	prefixes := [][]byte{}
	for o := 0; o < len(recs); o += w {
		prefixes = append(prefixes, recs[o:o+p])
	}
	for range 20000 {
		q := make([]byte, p)
		if rng.IntN(2) == 0 {
			copy(q, recs[rng.IntN(len(recs)/w)*w:])
			q[p-1-rng.IntN(4)] ^= byte(1 + rng.IntN(255))
		} else {
			for j := range q {
				q[j] = byte(rng.Uint32())
			}
		}
		prefixes = append(prefixes, q)
	}
	fp := 0
	for _, q := range prefixes {
		if a, b := d.MayContain(q), m.MayContain(q); a != b {
			t.Fatalf("filter on %x: mapped %v, decoded %v", q, b, a)
		} else if a {
			fp++
		}
		a1, a2, aok := d.FramesFor(q)
		b1, b2, bok := m.FramesFor(q)
		if a1 != b1 || a2 != b2 || aok != bok {
			t.Fatalf("FramesFor %x: mapped %d..%d %v, decoded %d..%d %v", q, b1, b2, bok, a1, a2, aok)
		}
		short := q[:1+rng.IntN(p)]
		hi := bytes.Clone(short)
		hi[len(hi)-1] |= 0x0f
		a1, a2, aok = d.FramesForRange(short, hi)
		b1, b2, bok = m.FramesForRange(short, hi)
		if a1 != b1 || a2 != b2 || aok != bok {
			t.Fatalf("FramesForRange %x..%x differs", short, hi)
		}
	}
	if fp < len(recs)/w/2 {
		t.Fatalf("the filter let %d of %d prefixes through: the present ones are missing", fp, len(prefixes))
	}
}

// A damaged local file is never served: the catalog fetches the meta again
// and rewrites the file; a file an earlier binary wrote (the bucket's
// bytes) is converted to the mapped layout.
func TestMappedMetaCorruptAndOld(t *testing.T) {
	store := newLocalStore(t)
	ctx := context.Background()
	ref, meta := catalogTable(t, store, 3000)
	dir := t.TempDir()
	cat := NewCatalogMapped(dir, store)
	path := cat.localPath(TreeLinks, ref.ID)
	// Old layout: the bucket's bytes.
	if err := writeFileAtomic(path, meta); err != nil {
		t.Fatal(err)
	}
	m, err := cat.Load(ctx, TreeLinks, ref)
	if err != nil || m.mapped == nil || m.Records != 3000 {
		t.Fatalf("old file: %v, %v", m, err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !isLocalMeta(b) {
		t.Fatalf("old file not converted (%v)", err)
	}
	// Every byte flipped in turn: the file fails its checks.
	for i := 0; i < len(b); i += 1 + len(b)/500 {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := openMapped(&mapRegion{b: c}); err == nil {
			t.Fatalf("byte %d flipped: the local meta opens", i)
		}
	}
	// Resealed after a change, the structure checks still hold: no panic;
	// what opens answers without panicking.
	for i := 0; i < len(b)-8; i++ {
		c := bytes.Clone(b)
		c[i] ^= byte(1 + i%255)
		binary.LittleEndian.PutUint64(c[len(c)-8:], xxh3.Hash(c[:len(c)-8]))
		if m, err := openMapped(&mapRegion{b: c}); err == nil {
			_ = m.MayContain(m.MinKey[:m.Format.PrefixLen])
			f, l, _ := m.FramesFor(m.MaxKey[:m.Format.PrefixLen])
			_, _ = m.ByteRange(f, l)
		}
	}
	// Trailer offsets past the file (resealed): refused, never an index
	// out of range.
	for _, at := range []int{24, 32} { // D, O
		for _, v := range []uint64{1<<64 - 8, 1 << 40, uint64(len(b))} {
			c := bytes.Clone(b)
			binary.LittleEndian.PutUint64(c[len(c)-localTrailerSize+at:], v)
			binary.LittleEndian.PutUint64(c[len(c)-8:], xxh3.Hash(c[:len(c)-8]))
			if _, err := openMapped(&mapRegion{b: c}); err == nil {
				t.Fatalf("trailer field at %d set to %#x: the local meta opens", at, v)
			}
		}
	}
	// A corrupt file on disk: a new catalog fetches the meta again.
	c := bytes.Clone(b)
	c[len(c)/2] ^= 1
	if err := os.WriteFile(path, c, 0o644); err != nil {
		t.Fatal(err)
	}
	cat2 := NewCatalogMapped(dir, store)
	m, err = cat2.Load(ctx, TreeLinks, ref)
	if err != nil || m.Records != 3000 {
		t.Fatalf("corrupt file: %v, %v", m, err)
	}
	if b2, err := os.ReadFile(path); err != nil || !bytes.Equal(b2, b) {
		t.Fatalf("the corrupt local file was not rewritten (%v)", err)
	}
	// A decoding catalog on the same directory reads the mapped layout as
	// another binary's: it fetches again and keeps the bucket's bytes.
	cat3 := NewCatalog(dir, store)
	if m, err := cat3.Load(ctx, TreeLinks, ref); err != nil || m.mapped != nil || m.Records != 3000 {
		t.Fatalf("decoding catalog: %v, %v", m, err)
	}
}

// A dropped table's mapping is released once nothing holds its meta: a
// node that compacts for months must not accumulate mappings (the kernel
// bounds them per process, vm.max_map_count).
func TestMappedMetaUnmappedAfterDrop(t *testing.T) {
	store := newLocalStore(t)
	ctx := context.Background()
	cat := NewCatalogMapped(t.TempDir(), store)
	ref, meta := catalogTable(t, store, 2000)
	if _, err := cat.Add(TreeLinks, ref.ID, meta); err != nil {
		t.Fatal(err)
	}
	path := cat.localPath(TreeLinks, ref.ID)
	mapped := func() int {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), path)
	}
	if n := mapped(); n != 1 {
		t.Fatalf("%d mappings of the table's meta after Add, want 1", n)
	}
	m, err := cat.Load(ctx, TreeLinks, ref)
	if err != nil || m.mapped == nil {
		t.Fatalf("load: %v, %v", m, err)
	}
	cat.Drop(TreeLinks, ref.ID)
	// Still held: still mapped (and readable).
	runtime.GC()
	if !m.MayContain(m.MinKey[:m.Format.PrefixLen]) || mapped() != 1 {
		t.Fatal("a held meta lost its mapping")
	}
	runtime.KeepAlive(m)
	m = nil
	for i := 0; i < 50 && mapped() > 0; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := mapped(); n != 0 {
		t.Fatalf("%d mappings of a dropped table's meta after its last reference went", n)
	}
}

// A mapped catalog keeps a small meta of another tree than the links
// decoded (it is asked per source) and maps a large one (the heap stays
// bounded); a restart finds each in the layout it was written in.
func TestMappedCatalogOtherTrees(t *testing.T) {
	store := newLocalStore(t)
	ctx := context.Background()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 5))
	recs := tblRandomRecords(rng, RevocationFormat, 4000)
	_, meta, err := BuildTable(RevocationFormat, recs, TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	small, large := NewID(), NewID()
	for _, id := range []string{small, large} {
		if err := store.Put(ctx, metaKey(TreeRevocations, id), meta); err != nil {
			t.Fatal(err)
		}
	}
	cat := NewCatalogMapped(dir, store)
	m, err := cat.Add(TreeRevocations, small, meta)
	if err != nil || m.mapped != nil {
		t.Fatalf("a small revocation meta: %v, mapped %v", err, m != nil && m.mapped != nil)
	}
	was := mapMinBytes
	mapMinBytes = len(meta)
	m, err = cat.Add(TreeRevocations, large, meta)
	mapMinBytes = was
	if err != nil || m.mapped == nil {
		t.Fatalf("a large revocation meta: %v, not mapped", err)
	}
	cat2 := NewCatalogMapped(dir, store)
	for _, c := range []struct {
		id     string
		mapped bool
	}{{small, false}, {large, true}} {
		m, err := cat2.Load(ctx, TreeRevocations, TableRef{ID: c.id})
		if err != nil || (m.mapped != nil) != c.mapped || m.Records != uint64(len(recs)/RevocationFormat.Width) {
			t.Fatalf("reloaded %s: %v, mapped %v, want %v", c.id, err, m != nil && m.mapped != nil, c.mapped)
		}
	}
}

// Layout 1 files (written before the dictionary was packed) still map and
// answer as their bucket meta does; layout 2 packs the same dictionary
// smaller.
func TestMappedLayout1StillReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, fx := range []struct {
		name string
		f    Format
	}{{"links-columns", BacklinkFormat}, {"revocations-columns", RevocationFormat}} {
		t.Run(fx.name, func(t *testing.T) {
			base := filepath.Join("testdata", "v3", fx.name)
			meta, err1 := os.ReadFile(base + ".meta")
			data, err2 := os.ReadFile(base + ".data")
			local1, err3 := os.ReadFile(base + ".local1")
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			if localLayout(local1) != 1 {
				t.Fatalf("fixture of layout %d", localLayout(local1))
			}
			d, err := DecodeMeta(meta)
			if err != nil {
				t.Fatal(err)
			}
			recs := decodeFrames(t, d, data)
			m1, err := openMapped(&mapRegion{b: local1})
			if err != nil {
				t.Fatal(err)
			}
			compareMapped(t, rng, fx.f, recs, data, d, m1, fx.f == BacklinkFormat)
			local2, err := encodeLocalMeta(d, meta)
			if err != nil {
				t.Fatal(err)
			}
			m2, err := openMapped(&mapRegion{b: local2})
			if err != nil {
				t.Fatal(err)
			}
			compareMapped(t, rng, fx.f, recs, data, d, m2, fx.f == BacklinkFormat)
			t.Logf("%d dictionary entries: layout 1 %d bytes, layout 2 %d", d.dict.len(), len(local1), len(local2))
			if d.dict.len() > 0 && len(local2) >= len(local1) {
				t.Fatalf("layout 2 %d bytes, layout 1 %d", len(local2), len(local1))
			}
		})
	}
}

// Layout 2 picks the narrowest widths that hold the dictionary: 4-byte DIDs
// (outlined DIDs keep their outline bit; the dictionary leaves out those
// that do not fit, whose 8-byte layout is checked with the widths below), revs in
// the fewest bytes above their base, none for a table without them; every
// entry reads back as decoded.
func TestMappedDictPacking(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	remap := func(recs []byte, f func(uint64) uint64) []byte {
		out := bytes.Clone(recs)
		w := link.BacklinkSize
		for o := 0; o < len(out); o += w {
			did := binary.BigEndian.Uint64(out[o+40:])
			binary.BigEndian.PutUint64(out[o+40:], f(did))
		}
		SortRecords(out, w)
		return synthDedup(out, w)
	}
	backfill := synthBackfillBacklinks(51, 12000)
	for _, tc := range []struct {
		name   string
		recs   []byte
		opt    TableOptions
		wd     uint64
		revs   int  // some entry has a rev: 1, none: 0, either: -1
		revsOK bool // the table's version has revs
	}{
		{"small DIDs", backfill, TableOptions{frameMax: 300}, 4, 1, true},
		{"outlined DIDs", remap(backfill, func(d uint64) uint64 {
			if d%3 == 0 {
				return 1<<63 | d
			}
			return d
		}), TableOptions{frameMax: 300}, 4, 1, true},
		// DIDs past 2^31 (a named did:web's hash) stay out of the
		// dictionary, which keeps the others in 4 bytes.
		{"a DID past 2^31", remap(backfill, func(d uint64) uint64 {
			if d%7 == 0 {
				return 1<<63 | 1<<62 | d<<20
			}
			return d
		}), TableOptions{frameMax: 300}, 4, 1, true},
		{"live", synthSortedBacklinks(52, 12000), TableOptions{frameMax: 300}, 0, -1, true},
		{"version 2", backfill, TableOptions{frameMax: 300, version: 2}, 4, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, meta, err := BuildTable(BacklinkFormat, tc.recs, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			d, err := DecodeMeta(meta)
			if err != nil {
				t.Fatal(err)
			}
			local, err := encodeLocalMeta(d, meta)
			if err != nil {
				t.Fatal(err)
			}
			tr := local[len(local)-localTrailerSize:]
			widths := binary.LittleEndian.Uint64(tr[48:])
			wd, wr := widths&0xff, widths>>8
			if tc.wd != 0 && wd != tc.wd {
				t.Fatalf("DIDs in %d bytes, want %d", wd, tc.wd)
			}
			for i := range d.dict.len() {
				if did, _ := d.dict.account(i); !fitsDID32(did) {
					t.Fatalf("dictionary entry %d: DID %#x past 2^31", i, did)
				}
			}
			if tc.revs >= 0 && (wr > 0) != (tc.revs == 1) || wr > 8 {
				t.Fatalf("revs in %d bytes (want some: %d)", wr, tc.revs)
			}
			m, err := openMapped(&mapRegion{b: local})
			if err != nil {
				t.Fatal(err)
			}
			if m.dict.hasRevs() != tc.revsOK {
				t.Fatalf("mapped dictionary has revs: %v, want %v", m.dict.hasRevs(), tc.revsOK)
			}
			compareMapped(t, rng, BacklinkFormat, tc.recs, data, d, m, true)
		})
	}
	// The widths themselves.
	for _, tc := range []struct {
		dids, revs []uint64
		wd, wr     int
		base       uint64
	}{
		{[]uint64{1, 1<<31 - 1, 1<<63 | (1<<31 - 1)}, []uint64{0, 0, 0}, 4, 0, 0},
		{[]uint64{1, 1 << 31}, []uint64{5, 0}, 8, 1, 4},
		{[]uint64{1 << 63, 2}, []uint64{1000, 1000 + 254}, 4, 1, 999},
		{[]uint64{3, 4}, []uint64{1000, 1000 + 256}, 4, 2, 999},
		{[]uint64{3, 4}, []uint64{1, 1<<64 - 1}, 4, 8, 0},
	} {
		d := &accountDict{dids: tc.dids, clocks: make([]uint16, len(tc.dids)), revs: tc.revs}
		wd, wr, base := packWidths(d)
		if wd != tc.wd || wr != tc.wr || base != tc.base {
			t.Fatalf("%v %v: widths %d %d base %d, want %d %d %d", tc.dids, tc.revs, wd, wr, base, tc.wd, tc.wr, tc.base)
		}
	}
}
