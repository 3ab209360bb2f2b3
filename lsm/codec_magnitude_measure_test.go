package lsm

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// TestMeasureTimeCoding measures, on a kept bench run's index
// (-lsm.measure-dir DIR, the first -lsm.measure-tables tables of its first
// links run), what the magnitude form (codec_magnitude.go) would take
// against byte planes, frame by frame, each stream coded by appendStream
// as the codec codes it: the time differences (the class in one stream,
// or split by the group's previous class, or with the bit below the
// leading one in the class), and the account ranks, target rkey
// differences, first times of groups and target DID ranks (the class
// with 0, 1 or 2 of the bits below the leading one); and the pair indexes
// in one stream against one a context of the record's target collection.
// The index must be of
// a version whose frames decode; what it measures does not depend on how
// they were stored.
//
// Reproduce: go test ./lsm -run TestMeasureTimeCoding -v -lsm.measure-dir DIR
func TestMeasureTimeCoding(t *testing.T) {
	if *lsmMeasureDir == "" {
		t.Skip("-lsm.measure-dir not set")
	}
	e := new(colEncoder)
	var planes, mant, mantTop, one, firstSplit, prev4, prev8, topbit, prev4top int
	records := 0
	var pairsOne, pairsCtx int
	gen := map[string]*[4]int{"ranks": {}, "target rkeys": {}, "group firsts": {}, "target ranks": {}}
	rank := map[uint64]uint64{}
	cmpCoding := func(acc *[4]int, vals []uint64) {
		var mx uint64
		for _, v := range vals {
			mx = max(mx, v)
		}
		for k := range bytesFor(mx) {
			var p []byte
			for _, v := range vals {
				p = append(p, byte(v>>(8*k)))
			}
			acc[0] += len(e.appendStream(nil, p))
		}
		for k := 0; k <= 2; k++ {
			var sym []byte
			mb := 0
			for _, v := range vals {
				c := bits.Len64(v)
				x := c << k
				if c-1 >= k {
					x |= int(v>>(c-1-k)) & (1<<k - 1)
					mb += c - 1 - k
				} else if c > 0 {
					x |= int(v) & (1<<(c-1) - 1) << (k - (c - 1))
				}
				sym = append(sym, byte(x))
			}
			acc[k+1] += len(e.appendStream(nil, sym)) + (mb+7)/8
		}
	}
	keptFrames(t, *lsmMeasureDir, *lsmMeasureTables, func(m *TableMeta, stored, buf []byte) {
		if len(rank) == 0 {
			for j := range m.dict.len() {
				did, _ := m.dict.account(j)
				rank[did] = uint64(j + 1)
			}
		}
		if stored == nil {
			return
		}
		{
			nr := len(buf) / 64
			records += nr
			time := func(i int) uint64 { return binary.BigEndian.Uint64(buf[i*64+24:]) >> clockBits }
			var ds, rks, trk, gf, tra []uint64
			var prevT uint64
			for i := range nr {
				rks = append(rks, rank[binary.BigEndian.Uint64(buf[i*64+40:])])
			}
			var prevc []int // previous class in the group, -1 first
			var maxD uint64
			for s := 0; s < nr; {
				end := s + 1
				for end < nr && string(buf[end*64:end*64+24]) == string(buf[s*64:s*64+24]) {
					end++
				}
				tr := binary.BigEndian.Uint64(buf[s*64:])
				z := tr - prevT
				trk = append(trk, z<<1^uint64(int64(z)>>63))
				prevT = tr
				tra = append(tra, rank[binary.BigEndian.Uint64(buf[s*64+16:])])
				if s > 0 {
					z := time(s) - time(s-1)
					gf = append(gf, z<<1^uint64(int64(z)>>63))
				}
				p := -1
				for j := s + 1; j < end; j++ {
					d := time(j) - time(j-1)
					ds = append(ds, d)
					prevc = append(prevc, p)
					p = bits.Len64(d)
					maxD = max(maxD, d)
				}
				s = end
			}
			size := func(b []byte) int { return len(e.appendStream(nil, b)) }
			// Pair indexes: one stream, against one a context of the
			// record's target collection (accounts, hashed targets, the
			// frame's most frequent other collection, the rest).
			{
				pairOf := func(i int) [2]uint64 {
					return [2]uint64{binary.BigEndian.Uint64(buf[i*64+32:]), binary.BigEndian.Uint64(buf[i*64+48:])}
				}
				idx := map[[2]uint64]int{}
				for i := range nr {
					idx[pairOf(i)] = 0
				}
				keys := make([][2]uint64, 0, len(idx))
				for k := range idx {
					keys = append(keys, k)
				}
				slices.SortFunc(keys, comparePairs)
				for j, k := range keys {
					idx[k] = j
				}
				tc := map[uint64]int{}
				for i := range nr {
					tc[binary.BigEndian.Uint64(buf[i*64+8:])]++
				}
				var top uint64
				best := -1
				for c, k := range tc {
					if c > link.CollectionHashed && k > best {
						top, best = c, k
					}
				}
				var one []byte
				var ctx [4][]byte
				for i := range nr {
					v := byte(idx[pairOf(i)])
					one = append(one, v)
					c := binary.BigEndian.Uint64(buf[i*64+8:])
					k := 3
					switch {
					case c == link.CollectionRepo:
						k = 0
					case c == link.CollectionHashed:
						k = 1
					case c == top:
						k = 2
					}
					ctx[k] = append(ctx[k], v)
				}
				pairsOne += size(one)
				for _, b := range ctx {
					pairsCtx += size(b)
				}
			}
			cmpCoding(gen["ranks"], rks)
			cmpCoding(gen["target rkeys"], trk)
			cmpCoding(gen["group firsts"], gf)
			cmpCoding(gen["target ranks"], tra)
			kt := bytesFor(maxD)
			for k := range kt {
				var p []byte
				for _, d := range ds {
					p = append(p, byte(d>>(8*k)))
				}
				planes += size(p)
			}
			var cls, top []byte
			var ctxA, ctxB [2][]byte
			var c4, c8, c4t [8][]byte
			mb, mbt := 0, 0
			for j, d := range ds {
				c := bits.Len64(d)
				cls = append(cls, byte(c))
				mb += max(c-1, 0)
				mbt += max(c-2, 0)
				tb := byte(c) << 1
				if c >= 2 {
					tb |= byte(d>>(c-2)) & 1
				}
				top = append(top, tb)
				fi := 0
				if prevc[j] >= 0 {
					fi = 1
				}
				ctxA[fi] = append(ctxA[fi], byte(c))
				_ = ctxB
				// Buckets of the previous class.
				b4 := 0
				if pc := prevc[j]; pc >= 0 {
					b4 = 1 + min(max(pc-24, 0)/4, 2) // <28, 28-31, >=32
				}
				c4[b4] = append(c4[b4], byte(c))
				c4t[b4] = append(c4t[b4], tb)
				b8 := 0
				if pc := prevc[j]; pc >= 0 {
					b8 = 1 + min(max(pc-20, 0)/3, 6)
				}
				c8[b8] = append(c8[b8], byte(c))
			}
			mant += (mb + 7) / 8
			one += size(cls)
			mantTop += (mbt + 7) / 8
			topbit += size(top)
			for _, s := range ctxA {
				firstSplit += size(s)
			}
			for _, s := range c4 {
				prev4 += size(s)
			}
			for _, s := range c8 {
				prev8 += size(s)
			}
			for _, s := range c4t {
				prev4top += size(s)
			}
		}
	})
	per := func(n int) float64 { return float64(n) / float64(records) }
	t.Logf("pair indexes: one stream %.3f, by the target's collection %.3f", per(pairsOne), per(pairsCtx))
	for _, name := range []string{"ranks", "target rkeys", "group firsts", "target ranks"} {
		t.Logf("%s: planes %.3f; class + mantissa with k top bits in the symbol: k=0 %.3f, k=1 %.3f, k=2 %.3f", name, per(gen[name][0]), per(gen[name][1]), per(gen[name][2]), per(gen[name][3]))
	}
	t.Logf("%d records: planes %.3f; mantissa %.3f + class: one stream %.3f, first/rest %.3f, prev in 4 %.3f, prev in 8 %.3f; mantissa %.3f + class and top bit: one stream %.3f, prev in 4 %.3f",
		records, per(planes), per(mant), per(one), per(firstSplit), per(prev4), per(prev8), per(mantTop), per(topbit), per(prev4top))
}
