package lsm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/zeebo/xxh3"
)

func tblXXH3(b []byte) uint64 { return xxh3.Hash(b) }

// tblState is the state of a datadriven file: the last table built.
type tblState struct {
	f    Format
	recs []byte
	data []byte
	meta []byte
	m    *TableMeta
}

func TestTableDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/table/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no datadriven files: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var st tblState
			runDD(t, path, func(t *testing.T, c *ddCase) string { return tblRunDD(t, &st, c) })
		})
	}
}

// tblParseHex reads a record or prefix written as hex, ignoring spaces, '.',
// '|' and '_' (for readability).
func tblParseHex(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '.', '|', '_', '\t':
			return -1
		}
		return r
	}, s)
	return hex.DecodeString(s)
}

// tblFmtRec prints a record as 8-byte groups.
func tblFmtRec(b []byte) string {
	var parts []string
	for o := 0; o < len(b); o += 8 {
		parts = append(parts, hex.EncodeToString(b[o:min(o+8, len(b))]))
	}
	return strings.Join(parts, ".")
}

// tblRunDD runs one command of a table datadriven file and returns its
// output.
func tblRunDD(t *testing.T, st *tblState, c *ddCase) string {
	t.Helper()
	switch c.cmd {
	case "build":
		return tblBuild(t, st, c)
	case "meta":
		return tblMetaDump(st)
	case "frames-for", "scan":
		return tblFramesFor(t, st, c)
	case "may-contain":
		var b strings.Builder
		for _, a := range c.args {
			p, err := tblParseHex(a)
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			fmt.Fprintf(&b, "%s: %v\n", a, st.m.MayContain(p))
		}
		return b.String()
	case "decode-frame":
		i := c.atoi(t, "i", 0)
		o, n := st.m.ByteRange(i, i)
		recs, err := st.m.DecodeFrame(i, st.data[o:o+n], nil)
		if err != nil {
			return fmt.Sprintf("error: %v\n", err)
		}
		var b strings.Builder
		for r := 0; r < len(recs); r += st.f.Width {
			fmt.Fprintf(&b, "%s\n", tblFmtRec(recs[r:r+st.f.Width]))
		}
		return b.String()
	case "flip-data", "flip-meta", "set-meta-version":
		return tblTamper(t, st, c)
	}
	t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
	return ""
}

// tblBuild: "build" builds a table of the input records (hex) and makes it
// the file's current table.
func tblBuild(t *testing.T, st *tblState, c *ddCase) string {
	f := Format{Width: c.atoi(t, "width", 64), PrefixLen: c.atoi(t, "prefix", 24)}
	opt := TableOptions{
		ShardBits:        uint8(c.atoi(t, "shard-bits", 0)),
		Shard:            uint32(c.atoi(t, "shard", 0)),
		FilterSeed:       uint64(c.atoi(t, "seed", 0)),
		CompressionLevel: c.atoi(t, "level", 0),
		FilterBits:       c.atoi(t, "filter", 0),
		frameMax:         c.atoi(t, "frame", 0),
	}
	if tr, ok := c.kv["transform"]; ok {
		opt.transSet = true
		switch tr {
		case "none":
			opt.transform = transformNone
		case "shuffle":
			opt.transform = transformShuffle
		case "xor":
			opt.transform = transformXORShuffle
		case "delta":
			opt.transform = transformDeltaShuffle
		case "columns":
			opt.transform = transformColumns
		default:
			t.Fatalf("%s: transform %q", c.pos, tr)
		}
	}
	var recs []byte
	for _, l := range c.input {
		r, err := tblParseHex(l)
		if err != nil {
			t.Fatalf("%s: %q: %v", c.pos, l, err)
		}
		recs = append(recs, r...)
	}
	data, meta, err := BuildTable(f, recs, opt)
	if err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	m, err := DecodeMeta(meta)
	if err != nil {
		t.Fatalf("%s: %v", c.pos, err)
	}
	*st = tblState{f: f, recs: recs, data: data, meta: meta, m: m}
	return fmt.Sprintf("records=%d frames=%d data=%dB meta=%dB\n", m.Records, m.NumFrames(), len(data), len(meta))
}

// tblMetaDump: "meta" prints the current table's meta.
func tblMetaDump(st *tblState) string {
	var b strings.Builder
	m := st.m
	fmt.Fprintf(&b, "format: width=%d prefix=%d version=%d\n", m.Format.Width, m.Format.PrefixLen, binary.LittleEndian.Uint16(st.meta[8:]))
	fmt.Fprintf(&b, "records=%d prefixes=%d data=%dB meta=%dB\n", m.Records, m.Prefixes, m.DataBytes, m.MetaBytes)
	fmt.Fprintf(&b, "shard=%d bits=%d transform=%s filter=%s filter-bytes=%d\n", m.Shard, m.ShardBits, m.transform, filterName(m.filterBits), m.FilterBytes())
	if m.transform == transformColumns {
		fmt.Fprintf(&b, "dictionary: %d accounts\n", m.dict.len())
	}
	fmt.Fprintf(&b, "min=%s\nmax=%s\n", tblFmtRec(m.MinKey), tblFmtRec(m.MaxKey))
	for i, fr := range m.Frames {
		cont := ""
		if fr.Continues {
			cont = " continues"
		}
		fmt.Fprintf(&b, "frame %d: off=%d len=%d records=%d sum=%016x%s\n  first=%s\n", i, fr.Offset, fr.Length, fr.Records, fr.Checksum, cont, tblFmtRec(fr.First))
	}
	return b.String()
}

// tblFramesFor: "frames-for PREFIX" prints the frames FramesFor picks;
// "scan PREFIX" also the records with the prefix in them.
func tblFramesFor(t *testing.T, st *tblState, c *ddCase) string {
	p, err := tblParseHex(strings.Join(c.args, ""))
	if err != nil {
		t.Fatalf("%s: %v", c.pos, err)
	}
	first, last, ok := st.m.FramesFor(p)
	if !ok {
		return "none\n"
	}
	var b strings.Builder
	off, n := st.m.ByteRange(first, last)
	fmt.Fprintf(&b, "frames %d..%d bytes [%d, %d)\n", first, last, off, off+n)
	if c.cmd == "scan" {
		for i := first; i <= last; i++ {
			o, n := st.m.ByteRange(i, i)
			recs, err := st.m.DecodeFrame(i, st.data[o:o+n], nil)
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
				continue
			}
			for r := 0; r < len(recs); r += st.f.Width {
				if bytes.HasPrefix(recs[r:r+st.f.Width], p) {
					fmt.Fprintf(&b, "%s\n", tblFmtRec(recs[r:r+st.f.Width]))
				}
			}
		}
	}
	return b.String()
}

// tblTamper: "flip-data byte= xor=" flips bits of one data byte and
// decodes the frame holding it; "flip-meta byte= xor=" flips bits of a
// meta byte and decodes the meta; "set-meta-version v=" rewrites the
// version (and the checksum) and decodes the meta.
func tblTamper(t *testing.T, st *tblState, c *ddCase) string {
	var b strings.Builder
	switch c.cmd {
	case "flip-data":
		at := c.atoi(t, "byte", 0)
		data := slices.Clone(st.data)
		data[at] ^= byte(c.atoi(t, "xor", 1))
		for i, fr := range st.m.Frames {
			if uint64(at) >= fr.Offset && uint64(at) < fr.Offset+uint64(fr.Length) {
				_, err := st.m.DecodeFrame(i, data[fr.Offset:fr.Offset+uint64(fr.Length)], nil)
				fmt.Fprintf(&b, "frame %d: %v (corrupt: %v)\n", i, err, errors.Is(err, ErrCorrupt))
			}
		}
	case "flip-meta":
		at := c.atoi(t, "byte", 0)
		meta := slices.Clone(st.meta)
		meta[at] ^= byte(c.atoi(t, "xor", 1))
		_, err := DecodeMeta(meta)
		fmt.Fprintf(&b, "%v (corrupt: %v, version: %v)\n", err, errors.Is(err, ErrCorrupt), errors.Is(err, ErrVersion))
	case "set-meta-version":
		// Rewrite the version and the checksum: a valid meta from another version.
		meta := slices.Clone(st.meta)
		binary.LittleEndian.PutUint16(meta[8:], uint16(c.atoi(t, "v", 2)))
		binary.LittleEndian.PutUint64(meta[len(meta)-8:], tblXXH3(meta[:len(meta)-8]))
		_, err := DecodeMeta(meta)
		fmt.Fprintf(&b, "%v (corrupt: %v, version: %v)\n", err, errors.Is(err, ErrCorrupt), errors.Is(err, ErrVersion))
	}
	return b.String()
}

// --- Randomized round trip -------------------------------------------------

// tblRandomRecords returns sorted distinct records of format f with many shared
// prefixes (a small alphabet of prefixes, some long runs).
func tblRandomRecords(rng *rand.Rand, f Format, n int) []byte {
	nPrefixes := 1 + rng.IntN(max(n/3, 1))
	prefixes := make([][]byte, nPrefixes)
	for i := range prefixes {
		p := make([]byte, f.PrefixLen)
		for j := range p {
			// Mostly small bytes so that prefixes share leading bytes.
			if rng.IntN(4) == 0 {
				p[j] = byte(rng.Uint32())
			} else {
				p[j] = byte(rng.IntN(3))
			}
		}
		prefixes[i] = p
	}
	recs := make([]byte, 0, n*f.Width)
	for range n {
		var p []byte
		if rng.IntN(3) == 0 {
			p = prefixes[0] // one popular prefix spanning frames
		} else {
			p = prefixes[rng.IntN(nPrefixes)]
		}
		recs = append(recs, p...)
		for range f.Width - f.PrefixLen {
			recs = append(recs, byte(rng.Uint32()))
		}
	}
	SortRecords(recs, f.Width)
	return synthDedup(recs, f.Width)
}

// tblScanPrefix returns the records of recs with the given prefix, brute force.
func tblScanPrefix(recs []byte, w int, prefix []byte) []byte {
	var out []byte
	for o := 0; o < len(recs); o += w {
		if bytes.HasPrefix(recs[o:o+w], prefix) {
			out = append(out, recs[o:o+w]...)
		}
	}
	return out
}

// tblLookup reads the records with a prefix the way a query does: FramesFor,
// one ranged read, DecodeFrame per frame.
func tblLookup(t *testing.T, m *TableMeta, data, prefix []byte) []byte {
	t.Helper()
	first, last, ok := m.FramesFor(prefix)
	if !ok {
		return nil
	}
	off, n := m.ByteRange(first, last)
	span := data[off : off+n]
	var out, buf []byte
	for i := first; i <= last; i++ {
		fr := m.Frames[i]
		rel := fr.Offset - uint64(off)
		var err error
		buf, err = m.DecodeFrame(i, span[rel:rel+uint64(fr.Length)], buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		out = append(out, tblScanPrefix(buf, m.Format.Width, prefix)...)
	}
	return out
}

func TestTableRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 43))
	formats := []Format{BacklinkFormat, RevocationFormat, {Width: 16, PrefixLen: 8}, {Width: 13, PrefixLen: 5}, {Width: 8, PrefixLen: 8}}
	iters := 60
	if testing.Short() {
		iters = 15
	}
	for it := range iters {
		f := formats[it%len(formats)]
		n := 1 + rng.IntN(3000)
		recs := tblRandomRecords(rng, f, n)
		tr := frameTransform(rng.IntN(transformCount))
		if _, ok := columnsLayout(f, 0); !ok && tr == transformColumns {
			tr = transformDeltaShuffle
		}
		opt := TableOptions{
			FilterSeed: rng.Uint64(),
			FilterBits: []int{0, 8, 16, FilterBlocked}[rng.IntN(4)],
			frameMax:   []int{0, 1, 2, 7, 16, 100}[rng.IntN(6)],
			transform:  tr,
			transSet:   true,
		}
		data, meta, err := BuildTable(f, recs, opt)
		if err != nil {
			t.Fatalf("iter %d: %v", it, err)
		}
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatalf("iter %d: %v", it, err)
		}
		w, p := f.Width, f.PrefixLen
		// Every present prefix: exact records, filter says yes.
		for o := 0; o < len(recs); o += w {
			pre := recs[o : o+p]
			if o > 0 && bytes.Equal(recs[o-w:o-w+p], pre) {
				continue
			}
			if !m.MayContain(pre) {
				t.Fatalf("iter %d: MayContain(%x) false for a present prefix", it, pre)
			}
			if got, want := tblLookup(t, m, data, pre), tblScanPrefix(recs, w, pre); !bytes.Equal(got, want) {
				t.Fatalf("iter %d: prefix %x: got %d bytes, want %d", it, pre, len(got), len(want))
			}
		}
		// Random prefixes, mostly absent, some near present ones, and shorter
		// and longer prefixes.
		for range 300 {
			var pre []byte
			l := p
			if rng.IntN(5) == 0 {
				l = 1 + rng.IntN(w)
			}
			if rng.IntN(2) == 0 {
				pre = slices.Clone(recs[rng.IntN(len(recs)/w)*w:][:l])
				pre[rng.IntN(l)] += byte(rng.IntN(3)) - 1
			} else {
				pre = make([]byte, l)
				for j := range pre {
					pre[j] = byte(rng.IntN(3))
				}
			}
			if got, want := tblLookup(t, m, data, pre), tblScanPrefix(recs, w, pre); !bytes.Equal(got, want) {
				t.Fatalf("iter %d: prefix %x: got %d bytes, want %d", it, pre, len(got), len(want))
			}
			if len(pre) == p && len(tblScanPrefix(recs, w, pre)) > 0 && !m.MayContain(pre) {
				t.Fatalf("iter %d: MayContain(%x) false for a present prefix", it, pre)
			}
		}
		// Ranges.
		for range 50 {
			a, z := recs[rng.IntN(len(recs)/w)*w:][:p], recs[rng.IntN(len(recs)/w)*w:][:p]
			if bytes.Compare(a, z) > 0 {
				a, z = z, a
			}
			var want []byte
			for o := 0; o < len(recs); o += w {
				if bytes.Compare(recs[o:o+p], a) >= 0 && bytes.Compare(recs[o:o+p], z) <= 0 {
					want = append(want, recs[o:o+w]...)
				}
			}
			first, last, ok := m.FramesForRange(a, z)
			if !ok {
				t.Fatalf("iter %d: FramesForRange(%x, %x) found nothing", it, a, z)
			}
			var got []byte
			for i := first; i <= last; i++ {
				off, n := m.ByteRange(i, i)
				buf, err := m.DecodeFrame(i, data[off:off+n], nil)
				if err != nil {
					t.Fatal(err)
				}
				for o := 0; o < len(buf); o += w {
					if bytes.Compare(buf[o:o+p], a) >= 0 && bytes.Compare(buf[o:o+p], z) <= 0 {
						got = append(got, buf[o:o+w]...)
					}
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("iter %d: range [%x, %x]: got %d bytes, want %d", it, a, z, len(got), len(want))
			}
		}
	}
}

// TestTableFramesForMinimal checks that FramesFor picks no frame that could
// not hold the prefix: with the continues flags, a prefix starting exactly
// at a fence reads from that frame on.
func TestTableFramesForMinimal(t *testing.T) {
	recs := synthSortedBacklinks(5, 50_000)
	data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	w, p := 64, 24
	extra := 0
	prefixes := 0
	for o := 0; o < len(recs); o += w {
		pre := recs[o : o+p]
		if o > 0 && bytes.Equal(recs[o-w:o-w+p], pre) {
			continue
		}
		prefixes++
		first, last, ok := m.FramesFor(pre)
		if !ok {
			t.Fatalf("prefix %x: no frames", pre)
		}
		// Count frames read that hold none of the prefix's records.
		for i := first; i <= last; i++ {
			off, n := m.ByteRange(i, i)
			buf, err := m.DecodeFrame(i, data[off:off+n], nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(tblScanPrefix(buf, w, pre)) == 0 {
				extra++
			}
		}
	}
	if extra != 0 {
		t.Errorf("%d frames read for nothing over %d prefixes", extra, prefixes)
	}
	// Frames end at prefix boundaries when one is near: few prefixes straddle.
	straddle := 0
	for _, fr := range m.Frames {
		if fr.Continues {
			straddle++
		}
	}
	t.Logf("%d links, %d prefixes, %d frames, %d continue a prefix", len(recs)/w, prefixes, m.NumFrames(), straddle)
}

// --- Corruption --------------------------------------------------------------

func TestTableCorruptionEveryByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		f     Format
		n     int
		frame int
		tr    frameTransform
		synth func() []byte // records shaped like the network's (else random)
	}{
		{RevocationFormat, 40, 8, transformDeltaShuffle, nil},
		{BacklinkFormat, 30, 4, transformNone, nil},
		{BacklinkFormat, 30, 0, transformXORShuffle, nil},
		{Format{Width: 16, PrefixLen: 8}, 50, 16, transformShuffle, nil},
		// Columnar frames (and, for random records, the delta+zstd
		// fallback frames of a columnar table).
		{BacklinkFormat, 0, 40, transformColumns, func() []byte { return synthSortedBacklinks(21, 160) }},
		{RevocationFormat, 0, 50, transformColumns, func() []byte { return synthRevocations(22, 150) }},
		{BacklinkFormat, 20, 8, transformColumns, nil},
	} {
		var recs []byte
		if tc.synth != nil {
			recs = tc.synth()
		} else {
			recs = tblRandomRecords(rng, tc.f, tc.n)
		}
		data, meta, err := BuildTable(tc.f, recs, TableOptions{frameMax: tc.frame, transform: tc.tr, transSet: true, FilterBits: 8})
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		// Every byte of the data object, every single-bit flip and a full
		// inversion: the frame holding it must fail with ErrCorrupt.
		for at := range data {
			i := tblFrameAt(m, at)
			fr := m.Frames[i]
			for _, x := range []byte{1, 2, 4, 8, 16, 32, 64, 128, 0xff} {
				c := slices.Clone(data[fr.Offset : fr.Offset+uint64(fr.Length)])
				c[uint64(at)-fr.Offset] ^= x
				if _, err := m.DecodeFrame(i, c, nil); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("data byte %d ^%#x (frame %d): %v, want ErrCorrupt", at, x, i, err)
				}
			}
		}
		// Truncated and extended frames.
		for i, fr := range m.Frames {
			c := data[fr.Offset : fr.Offset+uint64(fr.Length)]
			if _, err := m.DecodeFrame(i, c[:len(c)-1], nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("truncated frame %d: %v", i, err)
			}
			if _, err := m.DecodeFrame(i, append(slices.Clone(c), 0), nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("extended frame %d: %v", i, err)
			}
		}
		// Every byte of the meta: DecodeMeta must fail, with ErrCorrupt or
		// (for the version field) ErrVersion.
		for at := range meta {
			for _, x := range []byte{1, 0x80, 0xff} {
				c := slices.Clone(meta)
				c[at] ^= x
				_, err := DecodeMeta(c)
				if err == nil {
					t.Fatalf("meta byte %d ^%#x: decoded", at, x)
				}
				if !errors.Is(err, ErrCorrupt) && !(errors.Is(err, ErrVersion) && at >= 8 && at < 10) {
					t.Fatalf("meta byte %d ^%#x: %v", at, x, err)
				}
			}
		}
		// Truncations of the meta.
		for l := range len(meta) {
			if _, err := DecodeMeta(meta[:l]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("meta truncated to %d: %v", l, err)
			}
		}
	}
}

func tblFrameAt(m *TableMeta, at int) int {
	for i, fr := range m.Frames {
		if uint64(at) < fr.Offset+uint64(fr.Length) {
			return i
		}
	}
	return -1
}

// TestTableMetaStructure re-checksums tampered metas: structural checks
// alone (not the checksum) must catch inconsistent fields, without panics
// or huge allocations.
func TestTableMetaStructure(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	reseal := func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[len(b)-8:], tblXXH3(b[:len(b)-8]))
		return b
	}
	// Random records (a columnar table whose dictionary is empty) and
	// network-shaped ones (a dictionary of accounts).
	for _, recs := range [][]byte{tblRandomRecords(rng, RevocationFormat, 200), synthRevocations(9, 300)} {
		_, meta, err := BuildTable(RevocationFormat, recs, TableOptions{frameMax: 16})
		if err != nil {
			t.Fatal(err)
		}
		tblTamperMeta(t, meta, reseal)
	}
	// Random garbage with a valid magic, version and checksum.
	for range 20000 {
		n := metaHeader2Size + rng.IntN(400)
		c := make([]byte, n)
		for i := range c {
			c[i] = byte(rng.Uint32())
		}
		copy(c, metaMagic)
		binary.LittleEndian.PutUint16(c[8:], uint16(1+rng.IntN(2)))
		if rng.IntN(2) == 0 {
			// Plausible header fields.
			binary.LittleEndian.PutUint16(c[10:], uint16(1+rng.IntN(64)))
			binary.LittleEndian.PutUint16(c[12:], uint16(1+rng.IntN(8)))
			c[14], c[15], c[16] = byte(rng.IntN(5)), 8, 0
			c[17], c[18], c[19] = 0, 0, 0
			binary.LittleEndian.PutUint32(c[20:], 0)
			binary.LittleEndian.PutUint32(c[56:], uint32(rng.IntN(4)))
			if rng.IntN(2) == 0 {
				binary.LittleEndian.PutUint32(c[64:], uint32(rng.IntN(64)))
				binary.LittleEndian.PutUint32(c[68:], 0)
			}
		}
		if _, err := DecodeMeta(reseal(c)); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("garbage: %v", err)
		}
	}
}

// tblTamperMeta flips bytes of meta and re-checksums it: DecodeMeta must
// either fail with ErrCorrupt (or ErrVersion) or decode a consistent meta.
func tblTamperMeta(t *testing.T, meta []byte, reseal func([]byte) []byte) {
	for at := range len(meta) - 8 {
		for _, x := range []byte{1, 0x80, 0xff} {
			c := slices.Clone(meta)
			c[at] ^= x
			m, err := DecodeMeta(reseal(c))
			if err == nil {
				// Some bytes are free to change with the checksum fixed up
				// (a frame checksum, the filter's fingerprints and seed):
				// the meta stays self-consistent.
				_ = m
				continue
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("byte %d: %v", at, err)
			}
		}
	}
}

func TestBuildTableRejects(t *testing.T) {
	rec := func(b ...byte) []byte {
		r := make([]byte, 32)
		copy(r, b)
		return r
	}
	cat := func(rs ...[]byte) []byte { return bytes.Join(rs, nil) }
	for _, tc := range []struct {
		name string
		f    Format
		recs []byte
		opt  TableOptions
	}{
		{"empty", RevocationFormat, nil, TableOptions{}},
		{"partial", RevocationFormat, make([]byte, 33), TableOptions{}},
		{"unsorted", RevocationFormat, cat(rec(2), rec(1)), TableOptions{}},
		{"duplicate", RevocationFormat, cat(rec(1), rec(1)), TableOptions{}},
		{"bad width", Format{Width: 0, PrefixLen: 0}, rec(1), TableOptions{}},
		{"prefix > width", Format{Width: 8, PrefixLen: 9}, make([]byte, 8), TableOptions{}},
		{"shard too big", RevocationFormat, rec(1), TableOptions{ShardBits: 2, Shard: 4}},
		{"wrong shard", RevocationFormat, rec(1), TableOptions{ShardBits: 8, Shard: (ShardOf(rec(1)[:24], 8) + 1) % 256}},
		{"filter bits", RevocationFormat, rec(1), TableOptions{FilterBits: 12}},
		{"level", RevocationFormat, rec(1), TableOptions{CompressionLevel: 99}},
	} {
		if _, _, err := BuildTable(tc.f, tc.recs, tc.opt); err == nil {
			t.Errorf("%s: built", tc.name)
		}
	}
	// The right shard builds.
	r := rec(1)
	if _, _, err := BuildTable(RevocationFormat, r, TableOptions{ShardBits: 8, Shard: ShardOf(r[:24], 8)}); err != nil {
		t.Errorf("right shard: %v", err)
	}
}

func TestShardOfAndFilterIndependent(t *testing.T) {
	var b [24]byte
	same := 0
	for i := range 4096 {
		binary.BigEndian.PutUint64(b[:], uint64(i))
		if ShardOf(b[:], 0) != 0 {
			t.Fatal("0 bits must be shard 0")
		}
		s := ShardOf(b[:], 8)
		if s >= 256 {
			t.Fatalf("shard %d of 8 bits", s)
		}
		// Keys of one shard spread over the filter's hash space: the top
		// bits of the filter key are not the shard.
		if uint32(filterKey(b[:], tableFilterSeed(0))>>56) == s {
			same++
		}
	}
	if same > 64 { // expected 16
		t.Fatalf("filter hash and shard hash agree on %d of 4096 keys", same)
	}
	if ShardOf(b[:], 40) != uint32(xxh3.HashSeed(b[:], shardHashSeed)>>32) {
		t.Fatal("bits above 32 must count as 32")
	}
}

var _ = link.BacklinkSize

// TestDecodeFrameConcurrent decodes the frames of one table from many
// goroutines at once (the shared zstd decoder and scratch pool).
func TestDecodeFrameConcurrent(t *testing.T) {
	recs := synthSortedBacklinks(8, 20_000)
	data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var buf []byte
			for r := range 20 {
				i := (g + r) % m.NumFrames()
				off, n := m.ByteRange(i, i)
				var err error
				if buf, err = m.DecodeFrame(i, data[off:off+n], buf); err != nil {
					errs <- err
					return
				}
				start := 0
				for k := range i {
					start += int(m.Frames[k].Records) * 64
				}
				if !bytes.Equal(buf, recs[start:start+len(buf)]) {
					errs <- fmt.Errorf("frame %d differs", i)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzDecodeMeta: DecodeMeta never panics; it fails with ErrCorrupt or
// ErrVersion, or returns a meta whose methods do not panic either. (Random
// bytes rarely pass the checksum, so the fuzzer re-seals its input half of
// the time to reach the structural checks.)
func FuzzDecodeMeta(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, fm := range []Format{RevocationFormat, BacklinkFormat, {Width: 13, PrefixLen: 5}} {
		recs := tblRandomRecords(rng, fm, 50)
		_, meta, err := BuildTable(fm, recs, TableOptions{frameMax: 8})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(meta, true)
	}
	for _, recs := range [][]byte{synthSortedBacklinks(3, 200), synthRevocations(4, 200)} {
		fm := RevocationFormat
		if len(recs)%64 == 0 && link.GetBacklink(recs).Target.Collection != 0 {
			fm = BacklinkFormat
		}
		if _, meta, err := BuildTable(fm, recs, TableOptions{frameMax: 32}); err == nil {
			f.Add(meta, true)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, reseal bool) {
		if reseal && len(b) >= metaHeaderSize {
			b = slices.Clone(b)
			binary.LittleEndian.PutUint64(b[len(b)-8:], xxh3.Hash(b[:len(b)-8]))
		}
		m, err := DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error of another class: %v", err)
			}
			return
		}
		p := make([]byte, m.Format.PrefixLen)
		copy(p, m.MaxKey)
		m.MayContain(p)
		if first, last, ok := m.FramesFor(p); ok {
			off, n := m.ByteRange(first, last)
			if off < 0 || n <= 0 || uint64(off+n) > m.DataBytes {
				t.Fatalf("byte range [%d, +%d) outside %d data bytes", off, n, m.DataBytes)
			}
			if _, err := m.DecodeFrame(first, make([]byte, m.Frames[first].Length), nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("zero frame: %v", err)
			}
		}
		_ = m.String()
	})
}
