package lsm

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

func TestMagnitudesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 7, 8, 9, 63, 64, 65, 1000} {
		vals := make([]uint64, n)
		for i := range vals {
			switch rng.IntN(6) {
			case 0:
				vals[i] = uint64(rng.IntN(2)) // classes 0 and 1: no mantissa
			case 1:
				vals[i] = 1<<63 | rng.Uint64() // 63 mantissa bits
			case 2:
				vals[i] = rng.Uint64() >> rng.IntN(64)
			default:
				vals[i] = uint64(rng.Int64N(1 << 33))
			}
		}
		cls, mant := magnitudes(nil, nil, vals)
		total := 0
		for _, v := range vals {
			total += max(bits.Len64(v)-1, 0)
		}
		if len(cls) != n || len(mant) != (total+7)/8 {
			t.Fatalf("n=%d: %d classes, %d mantissa bytes for %d bits", n, len(cls), len(mant), total)
		}
		got, err := readMagnitudes(nil, n, cls, mant, 64, "test")
		if err != nil {
			t.Fatal(err)
		}
		for i := range vals {
			if got[i] != vals[i] {
				t.Fatalf("n=%d: value %d is %x, want %x", n, i, got[i], vals[i])
			}
		}
		// uint32 columns (ranks) write the same form as their uint64 values.
		small := make([]uint32, n)
		wide := make([]uint64, n)
		for i := range small {
			small[i] = rng.Uint32() >> rng.IntN(32)
			wide[i] = uint64(small[i])
		}
		c32, m32 := magnitudes(nil, nil, small)
		c64, m64 := magnitudes(nil, nil, wide)
		if string(c32) != string(c64) || string(m32) != string(m64) {
			t.Fatalf("n=%d: uint32 and uint64 forms differ", n)
		}
	}
}

func TestMagnitudesCorrupt(t *testing.T) {
	vals := []uint64{0, 1, 5, 1 << 40, 12345, 3}
	cls, mant := magnitudes(nil, nil, vals)
	bad := func(what string, n int, c, m []byte, maxClass int) {
		t.Helper()
		if _, err := readMagnitudes(nil, n, c, m, maxClass, "test"); !errors.Is(err, errColumns) {
			t.Fatalf("%s: %v, want a columnar frame error", what, err)
		}
	}
	bad("a class missing", len(vals), cls[1:], mant, 64)
	bad("a class above the width", len(vals), cls, mant, 40)
	bad("a mantissa byte missing", len(vals), cls, mant[1:], 64)
	bad("a mantissa byte too many", len(vals), cls, append(append([]byte(nil), mant...), 0), 64)
	// One value of class 2: one mantissa bit, seven unused.
	c2, m2 := magnitudes(nil, nil, []uint64{2})
	m2[0] |= 0x02
	bad("padding bits set", 1, c2, m2, 64)
	if _, err := readMagnitudes(nil, len(vals), cls, mant, 41, "test"); err != nil {
		t.Fatal(err)
	}
}

// synthUniformMicros is synthBackfillBacklinks with each TID's
// microseconds below its millisecond drawn uniform, as the scale
// workload draws them (the synthetic records' are not): the time columns
// then take fewer bytes in their magnitude form than in planes.
func synthUniformMicros(seed uint64, n int) []byte {
	recs := synthBackfillBacklinks(seed, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	w := link.BacklinkSize
	for i := 0; i < len(recs)/w; i++ {
		l := link.GetBacklink(recs[i*w:])
		if l.Source.RKey>>63 == 0 {
			us := l.Source.RKey >> clockBits
			l.Source.RKey = (us/1000*1000+uint64(rng.IntN(1000)))<<clockBits | l.Source.RKey&(1<<clockBits-1)
		}
		l.Put(recs[i*w:])
	}
	SortRecords(recs, w)
	return synthDedup(recs, w)
}

// TestMagnitudeForms: a frame keeps the time columns in planes where
// their low bytes have a structure (the synthetic records' TIDs) and
// takes their magnitude form where they are uniform (the scale
// workload's), and the ranks are in their magnitude form either way.
func TestMagnitudeForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []byte
		magT bool
	}{
		{"structured micros", synthBackfillBacklinks(41, 20000), false},
		{"uniform micros", synthUniformMicros(41, 20000), true},
	} {
		m, frames := colTableVersion(t, BacklinkFormat, tc.recs, 700, TableFormatVersion)
		var magT, magF, planesT, ranks int
		for i, fr := range frames {
			f := colFrame{n: int(m.Frames[i].Records)}
			if _, err := f.readHeader(fr[1:], m.layout); err != nil {
				t.Fatal(err)
			}
			if f.magT {
				magT++
			} else if f.kt > 0 {
				planesT++
			}
			if f.magF {
				magF++
			}
			if f.mag && f.sd == 2 {
				ranks++
			}
		}
		t.Logf("%s: %d frames: time differences in planes %d, magnitudes %d; first times in magnitudes %d; ranks in magnitudes %d", tc.name, len(frames), planesT, magT, magF, ranks)
		if tc.magT && (magT < len(frames)/2 || magF == 0) || !tc.magT && planesT < len(frames)/2 {
			t.Fatalf("%s: the time differences' forms (planes %d, magnitudes %d) are not the smaller ones expected", tc.name, planesT, magT)
		}
		if ranks != len(frames) {
			t.Fatalf("%s: ranks in their magnitude form in %d of %d frames", tc.name, ranks, len(frames))
		}
		// The table decodes to its records (BuildTable checked it too).
		var got, buf []byte
		for i, fr := range frames {
			var err error
			if buf, err = m.DecodeFrame(i, fr, buf); err != nil {
				t.Fatal(err)
			}
			got = append(got, buf...)
		}
		if string(got) != string(tc.recs) {
			t.Fatalf("%s: the frames do not decode to the records", tc.name)
		}
		// A frame decodes in the pooled decoder's memory: no allocation
		// a frame (the first times' buffer is reused too).
		fr, nr := frames[1], int(m.Frames[1].Records)
		dst := make([]byte, nr*BacklinkFormat.Width)
		if raceEnabled {
			continue
		}
		if a := testing.AllocsPerRun(20, func() {
			if err := decodeColumns(dst, fr[1:], nr, m.layout, m.dict); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Fatalf("%s: %.1f allocations a frame decoded", tc.name, a)
		}
	}
}

// TestMagnitudeHeaderFlags: a frame's header flags are read only from
// version 10 on, and must agree with its streams: a version 9 frame with
// a flag, a version 10 frame whose flag is cleared or set on an empty
// column, are corrupt.
func TestMagnitudeHeaderFlags(t *testing.T) {
	recs := synthUniformMicros(43, 3000)
	mustCorrupt := func(what string, m *TableMeta, fr []byte, n, at int, b byte) {
		t.Helper()
		bad := append([]byte(nil), fr[1:]...)
		bad[at] = b
		dst := make([]byte, n*BacklinkFormat.Width)
		if err := decodeColumns(dst, bad, n, m.layout, m.dict); !errors.Is(err, errColumns) {
			t.Fatalf("%s: %v, want a columnar frame error", what, err)
		}
	}
	// KT is the first byte after the group count, KR the fifth.
	header := func(m *TableMeta, fr []byte, n int) (colFrame, int) {
		f := colFrame{n: n}
		if _, err := f.readHeader(fr[1:], m.layout); err != nil {
			t.Fatal(err)
		}
		var gb [binary.MaxVarintLen64]byte
		return f, binary.PutUvarint(gb[:], f.groups)
	}
	m9, frames9 := colTableVersion(t, BacklinkFormat, recs, 700, 9)
	n := int(m9.Frames[0].Records)
	_, at := header(m9, frames9[0], n)
	kt := frames9[0][1+at]
	for _, flag := range []byte{magTimes, magFirsts} {
		mustCorrupt("version 9 with a flag", m9, frames9[0], n, at, kt|flag)
		// Refused by the header itself, as a width above 8, not by
		// whatever the streams then fail.
		bad := append([]byte(nil), frames9[0][1:]...)
		bad[at] = kt | flag
		f := colFrame{n: n}
		if _, err := f.readHeader(bad, m9.layout); !errors.Is(err, errColumns) {
			t.Fatalf("version 9 header with flag %#x: %v, want a columnar frame error", flag, err)
		}
	}

	m, frames := colTableVersion(t, BacklinkFormat, recs, 700, TableFormatVersion)
	tested := 0
	for i, fr := range frames {
		n := int(m.Frames[i].Records)
		f, at := header(m, fr, n)
		kt, kr := fr[1+at], fr[1+at+4]
		if f.magT {
			mustCorrupt("magTimes cleared", m, fr, n, at, kt&^magTimes)
			mustCorrupt("magTimes on an empty column", m, fr, n, at, magTimes|kt&magFirsts)
			tested++
		}
		if f.magF {
			mustCorrupt("magFirsts cleared", m, fr, n, at, kt&^magFirsts)
		}
		if f.magR {
			mustCorrupt("magTimes on target rkeys cleared", m, fr, n, at+4, kr&^magTimes)
		}
	}
	if tested == 0 {
		t.Fatal("no frame with its time differences in the magnitude form")
	}
}
