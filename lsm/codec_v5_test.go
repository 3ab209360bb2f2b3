package lsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// realKeyBacklinks returns backlinks whose sources are the real records
// of testdata's repositories (their DIDs numbered in order of first
// appearance, their collections numbered, their TID record keys as they
// are), spread over a few targets and stamped as a backfill stamps them
// (one rev per account); and the number of accounts with two or more.
func realKeyBacklinks(t *testing.T) ([]byte, int) {
	t.Helper()
	f, err := os.Open("../testdata/derived/records_from_cars.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dids, cols := map[string]uint64{}, map[string]uint64{}
	perDID := map[uint64]int{}
	w := link.BacklinkSize
	var recs []byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var r struct{ DID, Collection, RKey string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		tid, ok := link.TIDValue(r.RKey)
		if !ok {
			continue
		}
		if _, ok := dids[r.DID]; !ok {
			dids[r.DID] = uint64(len(dids) + 1)
		}
		if _, ok := cols[r.Collection]; !ok {
			cols[r.Collection] = link.CollectionFirst + uint64(len(cols))
		}
		did := dids[r.DID]
		perDID[did]++
		l := link.Backlink{
			Target:    link.RecordID{RKey: 1 + tid%5, Collection: link.CollectionFirst, DID: 7},
			Source:    link.RecordID{RKey: tid, Collection: cols[r.Collection], DID: did},
			Location:  1,
			SourceRev: 1000 + did,
		}
		recs = append(recs, make([]byte, w)...)
		l.Put(recs[len(recs)-w:])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	SortRecords(recs, w)
	recs = synthDedup(recs, w)
	accounts := 0
	for _, n := range perDID {
		if n >= 2 {
			accounts++
		}
	}
	return recs, accounts
}

// Real TIDs' clock ids belong to the PDS process that wrote them, not to
// the account: the repositories in testdata carry 11 to 28 of them in an
// account. Version 5 keeps an account to its DID and the clock id in a
// column, so its dictionary has an entry per account (version 4: one per
// pair) and the same records take fewer bytes; both versions still round
// trip, and the current binary reads version 4.
func TestClockColumnOnRealKeys(t *testing.T) {
	recs, accounts := realKeyBacklinks(t)
	w := BacklinkFormat.Width
	if len(recs)/w < 400 || accounts < 5 {
		t.Fatalf("%d records of %d accounts: testdata changed?", len(recs)/w, accounts)
	}
	size := map[int]int{}
	entries := map[int]int{}
	for _, v := range []int{4, 5} {
		data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{version: v, frameMax: 100})
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		if m.layout.clockCol != (v >= 5) {
			t.Fatalf("version %d: clock column %v", v, m.layout.clockCol)
		}
		var got, buf []byte
		for i := range m.NumFrames() {
			off, n := m.ByteRange(i, i)
			if buf, err = m.DecodeFrame(i, data[off:off+n], buf); err != nil {
				t.Fatal(err)
			}
			got = append(got, buf...)
		}
		if !bytes.Equal(got, recs) {
			t.Fatalf("version %d does not round trip", v)
		}
		size[v], entries[v] = len(data)+len(meta), m.dict.len()
	}
	t.Logf("%d records of %d accounts: version 4 %d bytes, %d dictionary entries; version 5 %d bytes, %d entries",
		len(recs)/w, accounts, size[4], entries[4], size[5], entries[5])
	if entries[5] != accounts {
		t.Fatalf("version 5 dictionary: %d entries for %d accounts", entries[5], accounts)
	}
	if entries[4] < 3*accounts {
		t.Fatalf("version 4 dictionary: %d entries for %d accounts (pairs with clock ids)", entries[4], accounts)
	}
	if size[5] >= size[4] {
		t.Fatalf("version 5 takes %d bytes, version 4 %d", size[5], size[4])
	}
}

// Where an account's records share one clock id (a live tail: a host
// keeps its clock id for weeks), version 5 predicts each record's from
// its account's dictionary entry, and takes about what version 4 took.
func TestClockColumnOneClockAnAccount(t *testing.T) {
	recs := synthBackfillBacklinks(41, 60000) // a clock id per author
	size := map[int]int{}
	for _, v := range []int{4, 5} {
		data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{version: v})
		if err != nil {
			t.Fatal(err)
		}
		size[v] = len(data) + len(meta)
	}
	t.Logf("%d records: version 4 %d bytes, version 5 %d", len(recs)/BacklinkFormat.Width, size[4], size[5])
	if float64(size[5]) > 1.01*float64(size[4]) {
		t.Fatalf("version 5 takes %d bytes, version 4 %d", size[5], size[4])
	}
}

// A version 5 frame whose clock planes are wrong is corruption, never a
// panic or wrong records: a width over 2 bytes, a plane shorter than the
// frame, a clock id of 1024 or more, a nonzero plane for a literal (which
// carries its own clock id).
func TestClockPlaneCorruption(t *testing.T) {
	recs := withHostClocks(synthSortedBacklinks(61, 2000), BacklinkFormat.Width, 24)
	m, frames := colTable(t, BacklinkFormat, recs, 300)
	if !m.layout.clockCol {
		t.Fatal("the current version has no clock column")
	}
	fr := frames[0][1:] // past the frame's transform byte
	n := int(m.Frames[0].Records)
	parse := func() (*colFrame, *colDecoder, [][2]uint64) {
		t.Helper()
		return parseColFrame(t, m, fr, n)
	}
	f, c, pairs := parse()
	dts, ranks, pidxs, clocks, tzs, tranks := c.dt, c.rank, c.pidx, c.clock, c.tz, c.trank
	if f.kc != 1 {
		t.Fatalf("clock planes: %d, want 1 (clock ids below 32)", f.kc)
	}
	dst := make([]byte, n*BacklinkFormat.Width)
	if err := f.rebuild(dst, m.layout, m.dict, pairs, dts, ranks, pidxs, clocks, tzs, tranks, &entryCols{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, recs[:len(dst)]) {
		t.Fatal("the frame does not rebuild its records")
	}
	literal, dictAt := -1, -1
	for i, r := range ranks {
		if r == 0 && literal < 0 {
			literal = i
		}
		if r != 0 && dictAt < 0 {
			dictAt = i
		}
	}
	if literal < 0 || dictAt < 0 {
		t.Fatalf("no literal (%d) or no dictionary account (%d) in the frame", literal, dictAt)
	}
	mustCorrupt := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errColumns) {
			t.Fatalf("%s: %v, want a columnar frame error", what, err)
		}
	}
	for _, tc := range []struct {
		what string
		i    int
		v    uint64
	}{{"a clock plane of 1024", dictAt, 1024}, {"a nonzero plane for a literal", literal, 1}} {
		bad := append([]uint64(nil), clocks...)
		bad[tc.i] = tc.v
		mustCorrupt(tc.what, f.rebuild(dst, m.layout, m.dict, pairs, dts, ranks, pidxs, bad, tzs, tranks, &entryCols{}))
	}
	f.streams[stFixed+f.st+f.sd+f.kp] = f.streams[stFixed+f.st+f.sd+f.kp][1:]
	mustCorrupt("a short clock plane", f.checkPlanes())

	// The header's clock width, the fourth width byte after the group count.
	var gb [binary.MaxVarintLen64]byte
	at := binary.PutUvarint(gb[:], f.groups) + 3
	bad := bytes.Clone(fr)
	bad[at] = 3
	mustCorrupt("a clock width of 3", decodeColumns(dst, bad, n, m.layout, m.dict))
}

// Clock ids of all ten bits (no real TID generator draws above 31, but
// the format allows them) take two clock planes and round trip, in a
// table with its own dictionary and in a compaction's run that shares
// one.
func TestClockPlanesTwoBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	w := BacklinkFormat.Width
	var recs []byte
	for range 30000 {
		acct := uint64(1 + rng.IntN(500))
		l := link.Backlink{
			Target:    link.RecordID{RKey: uint64(rng.IntN(3000)), Collection: 3, DID: 9},
			Source:    link.RecordID{RKey: uint64(1+rng.IntN(1<<40))<<clockBits | uint64(rng.IntN(1<<clockBits)), Collection: 5, DID: acct},
			Location:  1,
			SourceRev: 1000 + acct,
		}
		recs = append(recs, make([]byte, w)...)
		l.Put(recs[len(recs)-w:])
	}
	SortRecords(recs, w)
	recs = synthDedup(recs, w)
	m, frames := colTable(t, BacklinkFormat, recs, 500)
	roundTripFrames(t, m, frames, recs, func(i int, f *colFrame) {
		if f.kc != 2 {
			t.Fatalf("frame %d: %d clock planes, want 2", i, f.kc)
		}
	})

	// A compaction's run shares one dictionary, counted with its
	// accounts' clock ids by a vote.
	store := newLocalStore(t)
	cat := NewCatalog(t.TempDir(), store)
	out := writeAndCompact(t, store, cat, recs, 128<<10)
	if len(out.Tables) < 2 {
		t.Fatalf("%d output tables, want several", len(out.Tables))
	}
	if got := readRunSorted(t, store, cat, out); !bytes.Equal(got, recs) {
		t.Fatalf("the compacted run decodes to %d records, want %d", len(got)/w, len(recs)/w)
	}
}

// Clock planes that are mostly 0 (here revocations of whole repositories,
// clock id 0, among an account's records) take their sparse form, which
// round trips; a wrong sparse stream is corruption.
func TestSparseClocks(t *testing.T) {
	recs := synthRevocations(23, 30000)
	m, frames := colTable(t, RevocationFormat, recs, 0)
	sparse := 0
	roundTripFrames(t, m, frames, recs, func(_ int, f *colFrame) {
		if f.sparse {
			sparse++
		}
	})
	if sparse == 0 {
		t.Fatalf("none of %d frames has sparse clock ids", len(frames))
	}

	enc, ok := sparseClocks(nil, []uint16{0, 5, 0, 0, 1023, 0}, 100)
	if !ok {
		t.Fatal("sparseClocks refused 2 of 6")
	}
	w, err := readSparseClocks(nil, 6, enc)
	if err != nil || !slices.Equal(w, []uint64{0, 5, 0, 0, 1023, 0}) {
		t.Fatalf("read back %v (%v)", w, err)
	}
	if _, ok := sparseClocks(nil, []uint16{1, 2, 3, 4}, 8); ok {
		t.Fatal("sparseClocks took every value nonzero under a limit of 2 bytes each")
	}
	for _, bad := range [][]byte{
		{0},             // no entry
		{7, 0, 1},       // more entries than records
		{1, 6, 1},       // index 6 of 6
		{2, 5, 1, 0, 1}, // the second entry past the end
		{1, 0, 0},       // a value of 0
		{1, 0, 0x80, 8}, // a value of 1024
		{1, 0, 1, 9},    // a trailing byte
		{1, 0x80},       // a truncated varint
	} {
		if _, err := readSparseClocks(nil, 6, bad); !errors.Is(err, errColumns) {
			t.Fatalf("sparse stream %v: %v, want a columnar frame error", bad, err)
		}
	}
}

// roundTripFrames reads each frame's header (check looks at it), decodes
// every frame and fails unless they give recs.
func roundTripFrames(t *testing.T, m *TableMeta, frames [][]byte, recs []byte, check func(i int, f *colFrame)) {
	t.Helper()
	var got, buf []byte
	for i, fr := range frames {
		f := colFrame{n: int(m.Frames[i].Records)}
		if _, err := f.readHeader(fr[1:], m.layout); err != nil {
			t.Fatal(err)
		}
		check(i, &f)
		var err error
		if buf, err = m.DecodeFrame(i, fr, buf); err != nil {
			t.Fatal(err)
		}
		got = append(got, buf...)
	}
	if !bytes.Equal(got, recs) {
		t.Fatal("the table does not round trip")
	}
}

// A rank beyond the dictionary (an account's or a target's) is an error,
// not a panic, and not a record with DID 0: rebuild looks the ranks up in
// a pass of their own (gather), which leaves such a rank's entry 0, and
// its main loop must still refuse it.
func TestRankBeyondDictionary(t *testing.T) {
	for _, v := range []int{4, 8, 9, TableFormatVersion} {
		for _, tc := range []struct {
			f    Format
			recs []byte
		}{{BacklinkFormat, withHostClocks(synthSortedBacklinks(61, 2000), BacklinkFormat.Width, 24)},
			{BacklinkFormat, synthBackfillBacklinks(3, 3000)},
			{RevocationFormat, synthRevocations(6, 2000)}} {
			m, frames := colTableVersion(t, tc.f, tc.recs, 300, v)
			n := int(m.Frames[0].Records)
			f, c, pairs := parseColFrame(t, m, frames[0][1:], n)
			if f.revsSparse {
				var err error
				if c.rcodes, err = readSparseRevs(c.rcodes, f.n, f.streams[stRevs]); err != nil {
					t.Fatal(err)
				}
				f.revCodes = c.rcodes
			}
			var clocks []uint64
			if m.layout.clockCol {
				clocks = c.clock
			}
			dst := make([]byte, n*tc.f.Width)
			nd := uint64(m.dict.len())
			if err := f.rebuild(dst, m.layout, m.dict, pairs, c.dt, c.rank, c.pidx, clocks, c.tz, c.trank, &entryCols{}); err != nil {
				t.Fatalf("v%d: %v", v, err)
			}
			for _, at := range []int{0, n / 2, n - 1} {
				for _, bad := range []uint64{nd + 1, nd + 1000, 1 << 40} {
					ranks := append([]uint64(nil), c.rank...)
					ranks[at] = bad
					err := f.rebuild(dst, m.layout, m.dict, pairs, c.dt, ranks, c.pidx, clocks, c.tz, c.trank, &entryCols{})
					if !errors.Is(err, errColumns) || !strings.Contains(err.Error(), "account rank") {
						t.Errorf("v%d %v: rank %d at %d: %v", v, tc.f, bad, at, err)
					}
				}
			}
			if m.layout.targetPlanes {
				for _, g := range []int{0, len(c.trank) - 1} {
					tr := append([]uint64(nil), c.trank...)
					tr[g] = nd + 1
					err := f.rebuild(dst, m.layout, m.dict, pairs, c.dt, c.rank, c.pidx, clocks, c.tz, tr, &entryCols{})
					if !errors.Is(err, errColumns) || !strings.Contains(err.Error(), "target account rank") {
						t.Errorf("v%d: target rank %d at group %d: %v", v, nd+1, g, err)
					}
				}
			}
		}
	}
}

// parseColFrame reads a columnar frame's header, streams, pairs and
// numeric columns (fr: past its transform byte; n records), as
// decodeColumns does before rebuild.
func parseColFrame(t *testing.T, m *TableMeta, fr []byte, n int) (*colFrame, *colDecoder, [][2]uint64) {
	t.Helper()
	c := new(colDecoder)
	f := &colFrame{n: n}
	rest, err := f.readHeader(fr, m.layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.readStreams(f, rest); err != nil {
		t.Fatal(err)
	}
	if err := f.checkPlanes(); err != nil {
		t.Fatal(err)
	}
	pairs, err := f.readPairs(nil, m.layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.columns(f, m.layout); err != nil {
		t.Fatal(err)
	}
	f.firsts = c.firsts
	return f, c, pairs
}
