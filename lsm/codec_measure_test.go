package lsm

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/klauspost/compress/huff0"
)

var lsmMeasureDir = flag.String("lsm.measure-dir", "", "TestMeasureColumns: measure a kept bench run's index (its temporary directory) instead")

// TestMeasureColumns writes the bench's workload (lsm/workload, 2M links,
// seed 1: what `eddy-ctl bench lsm` writes) through a DB as the bench does
// and merges it into one run (its flushes and their merges are in S2,
// TableOptions.Fast; a kept index's are counted whole), then reports, per tree, where the columnar frames' bytes go (per column,
// per live link) and, next to each column, an estimate of what an ideal
// memoryless coder of the same values would need (the entropy floor of
// the model; see columnFloors). Reproduce:
//
//	go test ./lsm -run TestMeasureColumns -v -lsm.measure
//	go test ./lsm -run TestMeasureColumns -v -lsm.measure-dir DIR   # a kept bench run (per stored link)
func TestMeasureColumns(t *testing.T) {
	if !*lsmMeasure && *lsmMeasureDir == "" {
		t.Skip("-lsm.measure not set")
	}
	ctx := context.Background()
	var db *DB
	var store objstore.Store
	var live float64
	if dir := *lsmMeasureDir; dir != "" {
		// A kept bench run's index (bench lsm --keep): its tables as
		// they are; bytes per stored record of the links tree.
		db, store = openKeptIndex(t, dir)
		for _, r := range db.View().Manifest.RunsOf(TreeLinks) {
			for _, tb := range r.Tables {
				live += float64(tb.Records)
			}
		}
	} else {
		wl, err := workload.Generate(workload.Config{Links: 2_000_000, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if store, err = local.New(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		if db, err = Open(ctx, Options{Store: store, Dir: t.TempDir(), NoGCGrace: true}); err != nil {
			t.Fatal(err)
		}
		measureLoad(t, db, wl)
		// At 2M links every merge is of flushes, in S2 (FastMerge):
		// merged into one run, the index is in columns.
		if _, err := db.CompactFull(ctx); err != nil {
			t.Fatal(err)
		}
		live = float64(wl.LiveLinks())
	}
	defer db.Close()
	for _, tree := range []Tree{TreeLinks, TreeRevocations} {
		sizes := map[string]int{}
		floors := map[string]float64{}
		for _, r := range db.View().Manifest.RunsOf(tree) {
			// A run's metas (and their bytes) by table ID: a table's
			// dictionary may be another's of the run.
			metas, metaBytes := map[string]*TableMeta{}, map[string][]byte{}
			for _, tb := range r.Tables {
				_, mk := TableKeys(tree, tb.ID)
				mb, err := store.Get(ctx, mk)
				if err != nil {
					t.Fatal(err)
				}
				if metas[tb.ID], err = DecodeMeta(mb); err != nil {
					t.Fatal(err)
				}
				metaBytes[tb.ID] = mb
			}
			for _, tb := range r.Tables {
				dk, _ := TableKeys(tree, tb.ID)
				mb := metaBytes[tb.ID]
				data, err := store.Get(ctx, dk)
				if err != nil {
					t.Fatal(err)
				}
				m := metas[tb.ID]
				if owner := m.DictTable(); owner != "" {
					if metas[owner] == nil {
						t.Fatalf("table %s: its dictionary's table %s is not in its run", tb.ID, owner)
					}
					if err := m.UseDictOf(metas[owner]); err != nil {
						t.Fatal(err)
					}
				}
				sizes["meta: dictionary"] += int(binary.LittleEndian.Uint32(mb[64:]))
				sizes["meta: filter"] += int(binary.LittleEndian.Uint32(mb[60:]))
				sizes["meta: rest"] += len(mb) - int(binary.LittleEndian.Uint32(mb[64:])) - int(binary.LittleEndian.Uint32(mb[60:]))
				if m.transform != transformColumns {
					// A flush's table, or a merge of flushes, in S2
					// (TableOptions.Fast): no columns to measure.
					sizes["fast tables (S2), whole frames"] += len(data)
					continue
				}
				var recs, buf []byte
				for i := range m.NumFrames() {
					off, n := m.ByteRange(i, i)
					fr := data[off : off+n]
					if err := columnStreamSizes(fr, m.layout, sizes); err != nil {
						t.Fatal(err)
					}
					if buf, err = m.DecodeFrame(i, fr, buf); err != nil {
						t.Fatal(err)
					}
					recs = append(recs, buf...)
				}
				columnFloors(recs, m, floors)
			}
		}
		keys := make([]string, 0, len(sizes))
		total := 0
		for k, v := range sizes {
			keys = append(keys, k)
			if !strings.HasPrefix(k, "(of which") { // parts of the columns' bytes
				total += v
			}
		}
		sort.Strings(keys)
		t.Logf("%s tree: %.2f bytes per live link", tree, float64(total)/live)
		for _, k := range keys {
			floor := ""
			if f, ok := floors[k]; ok {
				floor = fmt.Sprintf("   floor ~%.2f", f/8/live)
			}
			t.Logf("  %-22s %6.2f%s", k, float64(sizes[k])/live, floor)
		}
		for k, f := range floors {
			if _, ok := sizes[k]; !ok {
				t.Logf("  (floor) %-14s %6.2f", k, f/8/live)
			}
		}
	}
}

// measureLoad writes the workload into db in its order, flushing (and
// compacting) whenever a memtable is full, and at the end.
func measureLoad(t *testing.T, db *DB, wl *workload.Workload) {
	ctx := context.Background()
	flush := func() {
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for {
			did, err := db.Compact(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !did {
				return
			}
		}
	}
	ri := 0
	for i := range wl.Links {
		for ri < len(wl.Revocations) && wl.Revocations[ri].At == i {
			if err := db.AddRevocation(&wl.Revocations[ri].Revocation); errors.Is(err, ErrFull) {
				flush()
				if err := db.AddRevocation(&wl.Revocations[ri].Revocation); err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			ri++
		}
		if err := db.AddBacklink(&wl.Links[i]); errors.Is(err, ErrFull) {
			flush()
			if err := db.AddBacklink(&wl.Links[i]); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	for ; ri < len(wl.Revocations); ri++ {
		if err := db.AddRevocation(&wl.Revocations[ri].Revocation); errors.Is(err, ErrFull) {
			flush()
			ri--
		} else if err != nil {
			t.Fatal(err)
		}
	}
	flush()
}

// columnStreamSizes adds the stored bytes of each column of a columnar
// frame (table.go's frame byte 0 included in "frame header") to sizes.
func columnStreamSizes(fr []byte, l colLayout, sizes map[string]int) error {
	if fr[0] != frameColumns {
		sizes["fallback frames"] += len(fr)
		return nil
	}
	// The frame's record count is not needed to split its streams: the
	// largest bounds them.
	f := colFrame{n: FrameBytesMax / l.w}
	rest, err := f.readHeader(fr[1:], l)
	if err != nil {
		return err
	}
	r := colReader{b: rest}
	sizes["frame header"] += len(fr) - len(r.b)
	names := f.streamNames()
	for _, name := range names {
		before := len(r.b)
		mode := r.b[0]
		r.b = r.b[1:]
		raw := r.uvarint()
		switch mode {
		case modeRaw:
			r.b = r.b[raw:]
		case modeRepeat:
			r.b = r.b[1:]
		default:
			s := r.uvarint()
			var sc huff0.Scratch
			if _, rem, err := huff0.ReadTable(r.b[:s], &sc); err == nil {
				sizes["(of which huffman tables)"] += int(s) - len(rem)
				sizes["(of which huffman tables: "+name+")"] += int(s) - len(rem)
			}
			r.b = r.b[s:]
		}
		sizes[name] += before - len(r.b)
	}
	if len(r.b) != 0 || r.bad {
		return errors.New("frame not consumed")
	}
	return nil
}

// streamNames names each of the frame's streams by the column it holds
// (a column's planes share its name; a magnitude form is the column's
// classes and "<column>: mantissas"), as readHeader read them.
func (f *colFrame) streamNames() []string {
	names := []string{"targets", "group lengths", "time: first of group", "accounts: literals", "pairs", "revs"}
	col := func(name string, streams int, mag bool) {
		if mag && streams > 0 {
			names = append(names, name, name+": mantissas")
			return
		}
		for range streams {
			names = append(names, name)
		}
	}
	col("time: differences", f.st, f.magT)
	col("accounts: ranks", f.sd, f.mag)
	col("pairs: indexes", f.kp, false)
	col("clock ids", f.kc, false)
	col("targets: rkeys", f.sr, f.magR)
	col("targets: DID ranks", f.sa, f.mag)
	if f.tlits {
		names = append(names, "targets: literal DIDs")
	}
	if f.magF {
		names = append(names, "time: first of group: mantissas")
	}
	return names
}

// columnFloors adds, in bits, estimates of what an ideal memoryless coder
// needs for the values the codec stores (per table): the order-0 entropy of
// accounts and of (collection, location) pairs over the table, and for the
// numeric columns (time differences, first times, rev residuals) the
// entropy of their bit lengths plus the bits below the leading one (a
// value's magnitude class coded ideally, its low bits stored plainly).
func columnFloors(recs []byte, m *TableMeta, floors map[string]float64) {
	l := m.layout
	w, s := l.w, l.src()
	n := len(recs) / w
	u := func(i, off int) uint64 { return binary.BigEndian.Uint64(recs[i*w+off:]) }
	accts := map[account]int{}
	pairs := map[[2]uint64]int{}
	var diffs, firsts, targetDiffs []uint64
	tColls, tDIDs := map[uint64]int{}, map[uint64]int{}
	var prevTarget uint64
	// With a clock column: each DID's clock ids, for the floor of the
	// clock planes (a record's clock id xor its DID's most frequent one
	// in the table).
	clocks := map[uint64]map[uint16]int{}
	for i := range n {
		first := i == 0 || (l.target && string(recs[i*w:i*w+24]) != string(recs[(i-1)*w:(i-1)*w+24]))
		hi := u(i, s) >> clockBits
		var prev uint64
		if i > 0 {
			prev = u(i-1, s) >> clockBits
		}
		if first {
			firsts = append(firsts, zigzag(hi-prev))
		} else {
			diffs = append(diffs, hi-prev)
		}
		if first && l.target {
			targetDiffs = append(targetDiffs, zigzag(u(i, 0)-prevTarget))
			prevTarget = u(i, 0)
			tColls[u(i, 8)]++
			tDIDs[u(i, 16)]++
		}
		did, clock := u(i, s+16), uint16(u(i, s)&1023)
		if l.clockCol {
			if clocks[did] == nil {
				clocks[did] = map[uint16]int{}
			}
			clocks[did][clock]++
			clock = 0
		}
		accts[account{did, clock}]++
		p := [2]uint64{u(i, s+8), 0}
		if l.target {
			p[1] = u(i, s+24)
		}
		pairs[p]++
	}
	floors["time: differences"] += magnitudeBits(diffs)
	floors["time: first of group"] += magnitudeBits(firsts)
	floors["accounts (order 0)"] += order0Bits(accts, n)
	floors["pairs (order 0)"] += order0Bits(pairs, n)
	if l.target {
		// A group's target: its rkey's difference from the previous
		// group's (magnitude), its collection and DID (order 0 over the
		// table's groups).
		floors["targets"] += magnitudeBits(targetDiffs) + order0Bits(tColls, len(targetDiffs)) + order0Bits(tDIDs, len(targetDiffs))
	}
	if l.clockCol {
		xors := map[uint16]int{}
		for _, cs := range clocks {
			var usual uint16
			for c, k := range cs {
				if k > cs[usual] || k == cs[usual] && c < usual {
					usual = c
				}
			}
			for c, k := range cs {
				xors[c^usual] += k
			}
		}
		floors["clock ids"] += order0Bits(xors, n)
	}
}

func order0Bits[K comparable](counts map[K]int, n int) float64 {
	var h float64
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= float64(c) * math.Log2(p)
	}
	return h
}

func magnitudeBits(vals []uint64) float64 {
	var classes [65]int
	var low float64
	for _, v := range vals {
		b := bits.Len64(v)
		classes[b]++
		if b > 1 {
			low += float64(b - 1)
		}
	}
	var h float64
	for _, c := range classes {
		if c > 0 {
			h -= float64(c) * math.Log2(float64(c)/float64(len(vals)))
		}
	}
	return h + low
}
