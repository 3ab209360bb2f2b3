package lsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"

	"github.com/klauspost/compress/zstd"
)

// colTable builds a columnar table of recs and returns its meta and frames.
func colTable(t testing.TB, f Format, recs []byte, frameMax int) (*TableMeta, [][]byte) {
	t.Helper()
	return colTableVersion(t, f, recs, frameMax, TableFormatVersion)
}

// colTableVersion is colTable for a table of format version.
func colTableVersion(t testing.TB, f Format, recs []byte, frameMax, version int) (*TableMeta, [][]byte) {
	t.Helper()
	data, meta, err := BuildTable(f, recs, TableOptions{frameMax: frameMax, version: version})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	if m.transform != transformColumns {
		t.Fatalf("transform %v, want columns", m.transform)
	}
	var frames [][]byte
	for i := range m.NumFrames() {
		off, n := m.ByteRange(i, i)
		frames = append(frames, data[off:off+n])
	}
	return m, frames
}

// TestColumnsModelMisfits: records the columnar model does not expect
// (non-TID rkeys, revs going down, huge time gaps, many pairs, accounts
// outside the dictionary) still round-trip, in columnar frames.
func TestColumnsModelMisfits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	recs := synthSortedBacklinks(31, 3000)
	w := 64
	for o := 0; o < len(recs); o += w {
		switch rng.IntN(6) {
		case 0:
			recs[o+24] |= 0x80 // an outlined rkey
		case 1:
			recs[o+56], recs[o+57] = byte(rng.Uint32()), byte(rng.Uint32()) // a rev far off
		case 2:
			recs[o+48] = byte(rng.Uint32()) // another location
		}
	}
	SortRecords(recs, w)
	recs = synthDedup(recs, w)
	m, frames := colTable(t, BacklinkFormat, recs, 0)
	var got, buf []byte
	columnar := 0
	for i, fr := range frames {
		var err error
		if buf, err = m.DecodeFrame(i, fr, buf); err != nil {
			t.Fatal(err)
		}
		got = append(got, buf...)
		if fr[0] == frameColumns {
			columnar++
		}
	}
	if !bytes.Equal(got, recs) {
		t.Fatal("records differ")
	}
	if columnar == 0 {
		t.Fatal("no columnar frame")
	}
	t.Logf("%d records, %d frames, %d columnar, %d dictionary accounts", len(recs)/w, len(frames), columnar, m.dict.len())
}

// TestDecodeColumnsTampered feeds the columnar decoder frames tampered
// past their checksum (every byte flipped, truncations, random bytes): it
// must return an error or records, never panic; DecodeFrame's checks then
// reject what is not the frame.
func TestDecodeColumnsTampered(t *testing.T) {
	for _, tc := range []struct {
		f    Format
		recs []byte
	}{
		{BacklinkFormat, synthSortedBacklinks(41, 600)},
		{RevocationFormat, synthRevocations(42, 600)},
	} {
		m, frames := colTable(t, tc.f, tc.recs, 100)
		rng := rand.New(rand.NewPCG(1, 2))
		for i, fr := range frames {
			want, err := m.DecodeFrame(i, fr, nil)
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, len(want))
			try := func(b []byte) {
				err := m.decodeColumnsFrame(dst, b, mustDecoder(t))
				if err == nil {
					if cerr := m.checkFrame(i, dst, true); cerr == nil && !bytes.Equal(dst, want) {
						// Possible in principle (the checksum is what
						// excludes it); count it as a finding.
						t.Logf("frame %d: a tampered frame decodes to other sorted records", i)
					}
				}
			}
			for at := range fr {
				for _, x := range []byte{1, 0x80, 0xff} {
					c := bytes.Clone(fr)
					c[at] ^= x
					try(c)
				}
			}
			for l := range len(fr) {
				try(fr[:l])
			}
			for range 200 {
				c := bytes.Clone(fr)
				for range 1 + rng.IntN(8) {
					c[rng.IntN(len(c))] = byte(rng.Uint32())
				}
				try(c)
			}
		}
	}
}

func mustDecoder(t testing.TB) *zstd.Decoder {
	d, err := frameDecoder()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// FuzzDecodeColumns: the columnar decoder never panics and fails only with
// its own error class, in the layout of version 4 (an account with its
// clock id), of version 8 (revs along a chain) and of the current version
// (clock ids in planes, or in their sparse form; targets in planes; revs
// in their sparse form). The seeds' records carry several clock ids an
// account, as real ones do.
func FuzzDecodeColumns(f *testing.F) {
	var tables []*TableMeta // a fuzzed frame decodes with the dictionary of one of these
	for _, version := range []int{4, 8, 9, TableFormatVersion} {
		for _, tc := range []struct {
			f    Format
			recs []byte
		}{
			{BacklinkFormat, withHostClocks(synthSortedBacklinks(51, 300), link.BacklinkSize, 24)},
			{RevocationFormat, withHostClocks(synthRevocations(52, 300), 32, 0)},
			{RevocationFormat, synthRevocations(53, 3000)},  // the current version: sparse clock ids
			{BacklinkFormat, synthMostlyBackfill(54, 3000)}, // the current version: sparse revs
			{BacklinkFormat, synthUniformMicros(55, 3000)},  // the current version: time columns in their magnitude form
		} {
			m, frames := colTableVersion(f, tc.f, tc.recs, 100, version)
			for i, fr := range frames {
				f.Add(len(tables), int(m.Frames[i].Records), fr[1:])
			}
			tables = append(tables, m)
		}
	}
	f.Fuzz(func(t *testing.T, table, n int, b []byte) {
		if table < 0 || table >= len(tables) {
			return
		}
		m := tables[table]
		width := m.Format.Width
		if n < 1 || n > FrameBytesMax/width {
			return
		}
		dst := make([]byte, n*width)
		if err := decodeColumns(dst, b, n, m.layout, m.dict); err != nil && !errors.Is(err, errColumns) {
			t.Fatalf("error of another class: %v", err)
		}
	})
}

// withHostClocks gives the TID rkeys (at offset at of each record of
// width w, the DID 16 bytes after) a clock id of 32 drawn from the time
// (a new one every 2^18 µs: the synthetic records span seconds, so an
// account's records get several, as real ones do over years of a host's
// restarts) and the host (one of three, by DID), instead of their
// account's one; then sorts them again.
func withHostClocks(recs []byte, w, at int) []byte {
	for o := 0; o+w <= len(recs); o += w {
		rk := binary.BigEndian.Uint64(recs[o+at:])
		if rk == 0 { // not a record key (a repository's revocation)
			continue
		}
		us := rk >> clockBits
		host := binary.BigEndian.Uint64(recs[o+at+16:]) % 3
		clock := ((us>>18 + host*7919) * 0x9e3779b97f4a7c15) >> 59
		binary.BigEndian.PutUint64(recs[o+at:], us<<clockBits|clock)
	}
	SortRecords(recs, w)
	return synthDedup(recs, w)
}

// TestHuffMayPay: a stream of uniform random bytes is stored raw without
// a Huffman table being built; a skewed one is still entropy-coded.
func TestHuffMayPay(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	uniform := make([]byte, 1000)
	for i := range uniform {
		uniform[i] = byte(rng.Uint32())
	}
	if huffMayPay(uniform) {
		t.Error("huffMayPay(1000 uniform random bytes) = true")
	}
	skewed := make([]byte, 1000)
	for i := range skewed {
		skewed[i] = byte(rng.Uint32() % 16)
	}
	if !huffMayPay(skewed) {
		t.Error("huffMayPay(1000 bytes of 16 values) = false")
	}
	var e colEncoder
	for _, b := range [][]byte{uniform, skewed} {
		out := e.appendStream(nil, b)
		if mode := out[0]; (mode == modeRaw) != (&b[0] == &uniform[0]) {
			t.Errorf("stream of %d bytes written in mode %d", len(b), mode)
		}
	}
}

// pairIndexes gives each record the index of its (collection, location)
// pair among the frame's distinct pairs in sorted order, whatever their
// number (the hash table grows past its first 64 slots) and across the
// table's generations (including the wrap of its counter).
func TestPairIndexes(t *testing.T) {
	check := func(name string, e *colEncoder, pairs [][2]uint64) {
		t.Helper()
		n := len(pairs)
		e.pairs = pairs
		e.pidx = make([]uint16, n)
		e.streams[stPairs] = e.streams[stPairs][:0]
		np := e.pairIndexes(n)
		want := slices.Clone(pairs)
		slices.SortFunc(want, comparePairs)
		want = slices.Compact(want)
		if np != len(want) {
			t.Fatalf("%s: %d pairs, want %d", name, np, len(want))
		}
		// The stream: the count, then the pairs in order.
		s := colReader{b: e.streams[stPairs]}
		if c := s.uvarint(); c != uint64(len(want)) {
			t.Fatalf("%s: stream counts %d pairs, want %d", name, c, len(want))
		}
		for j, p := range want {
			if a, b := s.uvarint(), s.uvarint(); a != p[0] || b != p[1] {
				t.Fatalf("%s: pair %d in the stream is (%d, %d), want %v", name, j, a, b, p)
			}
		}
		for i, p := range pairs {
			if k, _ := slices.BinarySearchFunc(want, p, comparePairs); e.pidx[i] != uint16(k) {
				t.Fatalf("%s: record %d has index %d, want %d", name, i, e.pidx[i], k)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	e := new(colEncoder)
	for round := range 200 {
		n := 1 + rng.IntN(2048)
		distinct := 1 + rng.IntN([]int{1, 4, 40, 600}[round%4])
		pool := make([][2]uint64, distinct)
		for i := range pool {
			pool[i] = [2]uint64{uint64(rng.IntN(50)), uint64(rng.IntN(8))}
		}
		var pairs [][2]uint64
		for range n {
			p := pool[rng.IntN(distinct)]
			if len(pairs) > 0 && rng.IntN(3) == 0 {
				p = pairs[len(pairs)-1] // runs of one pair
			}
			pairs = append(pairs, p)
		}
		check(fmt.Sprintf("round %d", round), e, pairs)
	}
	// The wrap of the generation counter comes back to a fresh table's
	// first generation: the slots that generation filled must not pass
	// for the new one's (the table did not grow in between to drop them).
	e = new(colEncoder)
	check("first generation", e, [][2]uint64{{1, 1}, {2, 2}, {3, 3}})
	e.pt.gen = ^uint32(0)
	check("after the wrap", e, [][2]uint64{{3, 3}, {4, 4}, {1, 1}})
}
