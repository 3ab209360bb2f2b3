package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/bits"
	"path/filepath"
	"testing"

	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/klauspost/compress/huff0"
)

var lsmMeasureTables = flag.Int("lsm.measure-tables", 2, "TestMeasureModels: how many tables of the kept index's first links run to read")

// TestMeasureModels estimates, on a kept bench run's index (-lsm.measure-dir
// DIR, its first -lsm.measure-tables tables of the first links run), what
// two models the codec does not have would take, next to what it stores:
//
//   - Time differences: a difference costs its magnitude class (entropy
//     coded) and the bits below its leading one (stored plainly). The
//     class's entropy of order 0, against the class conditioned on the
//     gaps left in the record's group (a target's k links spread over a
//     window: the i-th gap of k shrinks with k - i), on the group's
//     previous class, and on both; and the residual of the class from a
//     prediction, which one Huffman table could code.
//   - Targets: a group's target stored as one stream of varints (what
//     the codec does), as three (rkey differences, collections, DIDs),
//     as byte planes, and with the DID as its rank in the run's account
//     dictionary, each Huffman-coded per frame as the codec's streams
//     are (no table costs beyond huff0's own).
//   - Huffman tables: every entropy-coded stream of a frame carries its
//     own table. Against that, one table a stream kind (a column's plane)
//     for all the frames of a table, stored once (as in its meta), each
//     frame's stream coded with it or with its own, whichever is smaller.
//
// Reproduce: go test ./lsm -run TestMeasureModels -v -lsm.measure-dir DIR
func TestMeasureModels(t *testing.T) {
	if *lsmMeasureDir == "" {
		t.Skip("-lsm.measure-dir not set")
	}
	var tm timeModels
	var tg targetModels
	var sh sharedHuff
	records := 0
	keptFrames(t, *lsmMeasureDir, *lsmMeasureTables, func(m *TableMeta, stored, recs []byte) {
		if tg.rank == nil {
			tg.rank = map[uint64]uint64{}
			for j := range m.dict.len() {
				did, _ := m.dict.account(j)
				tg.rank[did] = uint64(j + 1)
			}
		}
		if stored == nil { // the table's end
			sh.table()
			return
		}
		records += len(recs) / 64
		tm.add(recs)
		tg.add(recs)
		if err := sh.add(stored, m); err != nil {
			t.Fatal(err)
		}
	})
	per := func(bits float64) float64 { return bits / 8 / float64(records) }
	t.Logf("%d records, %d groups in at most %d tables; bytes a record:", records, tg.groups, *lsmMeasureTables)
	t.Logf("time differences: bits below the leading one %.3f; class of order 0 %.3f, given the gaps left %.3f, the previous class %.3f, both %.3f (%d contexts); residual from the gaps left %.3f, from the previous class %.3f, from both %.3f",
		per(tm.low), per(tm.order0.bits()), per(tm.byLeft.bits()), per(tm.byPrev.bits()), per(tm.byBoth.bits()), len(tm.byBoth),
		per(tm.resLeft.bits()), per(tm.resPrev.bits()), per(tm.resBoth.bits()))
	b := func(n int) float64 { return float64(n) / float64(records) }
	t.Logf("targets: one stream %.3f, three streams %.3f, byte planes %.3f, byte planes with the DID's dictionary rank %.3f",
		b(tg.one), b(tg.three), b(tg.planes), b(tg.planesRank))
	t.Logf("huffman-coded streams: %.3f as stored (their own tables %.3f); with a table's shared tables %.3f (the shared tables %.4f; %d of %d streams coded with them)",
		b(sh.stored), b(sh.ownTables), b(sh.shared+sh.sharedTables), b(sh.sharedTables), sh.usedShared, sh.streams)
}

// sharedHuff measures Huffman tables shared by the frames of a table
// (TestMeasureModels): streams of huff0 mode only, as the codec stores
// them, against each coded with one table a stream kind for the table.
type sharedHuff struct {
	kinds                                   map[string][][]byte // a table's decoded streams by kind, a frame each
	stored, ownTables, shared, sharedTables int
	streams, usedShared                     int
}

// add reads a stored frame's entropy-coded streams.
func (sh *sharedHuff) add(fr []byte, m *TableMeta) error {
	if fr[0] != frameColumns {
		return nil
	}
	if sh.kinds == nil {
		sh.kinds = map[string][][]byte{}
	}
	// The frame's record count is not needed to split its streams: the
	// largest bounds them.
	f := colFrame{n: FrameBytesMax / m.Format.Width}
	rest, err := f.readHeader(fr[1:], m.layout)
	if err != nil {
		return err
	}
	var c colDecoder
	if err := c.readStreams(&f, rest); err != nil {
		return err
	}
	// A kind is a column's plane (or class or mantissa stream): its
	// name and its place among the column's streams.
	names := f.streamNames()
	seen := map[string]int{}
	for k, name := range names {
		names[k] = fmt.Sprintf("%s#%d", name, seen[name])
		seen[name]++
	}
	for k, name := range names {
		b := f.streams[k]
		own := huffBytes(b)
		if own >= len(b)+2 || bytes.Count(b, b[:min(1, len(b))]) == len(b) {
			continue // raw or repeated: no table either way
		}
		sh.kinds[name] = append(sh.kinds[name], bytes.Clone(b))
		sh.stored += own
		var s huff0.Scratch
		if _, _, err := huff0.Compress1X(b, &s); err == nil {
			sh.ownTables += len(s.OutTable)
		}
	}
	return nil
}

// table codes the table's streams with one table a kind and starts the
// next table.
func (sh *sharedHuff) table() {
	for _, frames := range sh.kinds {
		var all []byte
		for _, b := range frames {
			all = append(all, b...)
		}
		var s huff0.Scratch
		if _, _, err := huff0.Compress4X(all, &s); err != nil {
			for _, b := range frames {
				sh.shared += huffBytes(b)
			}
			continue
		}
		sh.sharedTables += len(s.OutTable)
		for _, b := range frames {
			sh.streams++
			own := huffBytes(b)
			var fs huff0.Scratch
			fs.TransferCTable(&s)
			fs.Reuse = huff0.ReusePolicyMust
			var out []byte
			var err error
			if len(b) >= 1024 {
				out, _, err = huff0.Compress4X(b, &fs)
			} else {
				out, _, err = huff0.Compress1X(b, &fs)
			}
			if err == nil && len(out)+5 < own {
				sh.shared += len(out) + 5 // a mode byte, the lengths
				sh.usedShared++
			} else {
				sh.shared += own
			}
		}
	}
	clear(sh.kinds)
}

// hist counts values; bits is the order-0 entropy of all of them.
type hist map[int64]int

func (h hist) bits() float64 {
	n := 0
	for _, c := range h {
		n += c
	}
	var b float64
	for _, c := range h {
		b -= float64(c) * math.Log2(float64(c)/float64(n))
	}
	return b
}

// ctxHist counts values by context; bits is the sum of each context's.
type ctxHist map[int64]hist

func (h ctxHist) add(ctx, v int64) {
	if h[ctx] == nil {
		h[ctx] = hist{}
	}
	h[ctx][v]++
}

func (h ctxHist) bits() float64 {
	var b float64
	for _, x := range h {
		b += x.bits()
	}
	return b
}

type timeModels struct {
	low                       float64
	order0                    hist
	byLeft, byPrev, byBoth    ctxHist
	resLeft, resPrev, resBoth hist
}

// add counts the time differences of a frame's records (whole backlinks),
// group by group.
func (tm *timeModels) add(recs []byte) {
	if tm.order0 == nil {
		tm.order0, tm.byLeft, tm.byPrev, tm.byBoth = hist{}, ctxHist{}, ctxHist{}, ctxHist{}
		tm.resLeft, tm.resPrev, tm.resBoth = hist{}, hist{}, hist{}
	}
	n := len(recs) / 64
	time := func(i int) uint64 { return binary.BigEndian.Uint64(recs[i*64+24:]) >> clockBits }
	for start := 0; start < n; {
		end := start + 1
		for end < n && string(recs[end*64:end*64+24]) == string(recs[start*64:start*64+24]) {
			end++
		}
		prev := int64(-1) // the group's previous class; -1 before its first gap
		for j := start + 1; j < end; j++ {
			c := int64(bits.Len64(time(j) - time(j-1)))
			tm.low += float64(max(c-1, 0))
			left := int64(bits.Len(uint(end - j))) // the gaps left, this one's included
			tm.order0[c]++
			tm.byLeft.add(left, c)
			tm.byPrev.add(prev, c)
			tm.byBoth.add(left*100+prev, c)
			tm.resLeft[c+left]++
			if prev < 0 {
				tm.resPrev[1000+c]++
				tm.resBoth[1000+c+left]++
			} else {
				tm.resPrev[c-prev]++
				// The previous class, scaled by the gaps left then
				// and now.
				tm.resBoth[c-prev+left-int64(bits.Len(uint(end-j+1)))]++
			}
			prev = c
		}
		start = end
	}
}

type targetModels struct {
	rank                           map[uint64]uint64 // a DID's rank in the run's dictionary
	groups                         int
	one, three, planes, planesRank int
}

// add encodes a frame's targets (one a group) the four ways and counts
// their Huffman-coded bytes. Planes are as many as the widest value needs,
// as the codec's are; a DID outside the dictionary (rank 0) is stored as a
// varint literal beside the ranks.
func (tg *targetModels) add(recs []byte) {
	n := len(recs) / 64
	u := func(i, off int) uint64 { return binary.BigEndian.Uint64(recs[i*64+off:]) }
	var one, rk, co, did, lit []byte
	var zs, dids, ranks []uint64
	var prev uint64
	for i := range n {
		if i > 0 && string(recs[i*64:i*64+24]) == string(recs[(i-1)*64:(i-1)*64+24]) {
			continue
		}
		tg.groups++
		z := zigzag(u(i, 0) - prev)
		prev = u(i, 0)
		one = binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(one, z), u(i, 8)), u(i, 16))
		rk = binary.AppendUvarint(rk, z)
		co = binary.AppendUvarint(co, u(i, 8))
		did = binary.AppendUvarint(did, u(i, 16))
		r := tg.rank[u(i, 16)]
		if r == 0 {
			lit = binary.AppendUvarint(lit, u(i, 16))
		}
		zs, dids, ranks = append(zs, z), append(dids, u(i, 16)), append(ranks, r)
	}
	tg.one += huffBytes(one)
	tg.three += huffBytes(rk) + huffBytes(co) + huffBytes(did)
	tg.planes += huffBytes(co) + planeBytes(zs) + planeBytes(dids)
	tg.planesRank += huffBytes(co) + planeBytes(zs) + planeBytes(ranks) + huffBytes(lit)
}

// planeBytes is what vals take as byte planes, as many as the largest
// needs, each Huffman-coded.
func planeBytes(vals []uint64) int {
	var most uint64
	for _, v := range vals {
		most = max(most, v)
	}
	total := 0
	for k := range bytesFor(most) {
		p := make([]byte, len(vals))
		for i, v := range vals {
			p[i] = byte(v >> (8 * k))
		}
		total += huffBytes(p)
	}
	return total
}

// huffBytes is about what the codec stores for stream b: one byte
// repeated, huff0's output and a few bytes of header, or b raw.
func huffBytes(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if bytes.Count(b, b[:1]) == len(b) {
		return 3
	}
	var s huff0.Scratch
	var out []byte
	var err error
	if len(b) >= 1024 {
		out, _, err = huff0.Compress4X(b, &s)
	} else {
		out, _, err = huff0.Compress1X(b, &s)
	}
	if err != nil || len(out) >= len(b) {
		return len(b) + 2
	}
	return len(out) + 4
}

// openKeptIndex opens a kept bench run's index (its temporary directory,
// holding store/ and db/) and returns the engine and its store.
// keptFrames calls fn with every frame of the first tables (at most max)
// of the first links run of a kept bench index in dir: the frame's table
// meta (its run's dictionary resolved), the frame as stored and its
// records; then, at each table's end, with stored and recs nil.
func keptFrames(t *testing.T, dir string, max int, fn func(m *TableMeta, stored, recs []byte)) {
	t.Helper()
	ctx := context.Background()
	db, store := openKeptIndex(t, dir)
	defer db.Close()
	runs := db.View().Manifest.RunsOf(TreeLinks)
	if len(runs) == 0 {
		t.Fatal("no links run")
	}
	get := func(id string, meta bool) []byte {
		dk, mk := TableKeys(TreeLinks, id)
		k := dk
		if meta {
			k = mk
		}
		b, err := store.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	decode := func(id string) *TableMeta {
		m, err := DecodeMeta(get(id, true))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i, tb := range runs[0].Tables {
		if i >= max {
			break
		}
		m := decode(tb.ID)
		if owner := m.DictTable(); owner != "" {
			if err := m.UseDictOf(decode(owner)); err != nil {
				t.Fatal(err)
			}
		}
		data := get(tb.ID, false)
		var buf []byte
		for f := range m.NumFrames() {
			off, n := m.ByteRange(f, f)
			var err error
			if buf, err = m.DecodeFrame(f, data[off:off+n], buf); err != nil {
				t.Fatal(err)
			}
			fn(m, data[off:off+n], buf)
		}
		fn(m, nil, nil)
	}
}

// openMeasuredIndex is openKeptIndex of -lsm.measure-dir, for the
// measurements of a kept bench run's index; it skips t without one.
func openMeasuredIndex(t *testing.T) (*DB, objstore.Store) {
	t.Helper()
	if *lsmMeasureDir == "" {
		t.Skip("-lsm.measure-dir not set")
	}
	return openKeptIndex(t, *lsmMeasureDir)
}

func openKeptIndex(t *testing.T, dir string) (*DB, objstore.Store) {
	t.Helper()
	store, err := local.New(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(context.Background(), Options{Store: store, Dir: filepath.Join(dir, "db"), NoGCGrace: true})
	if err != nil {
		t.Fatal(err)
	}
	return db, store
}
