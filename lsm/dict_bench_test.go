package lsm

import (
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"testing"
)

// dictBenchRecords makes n backlink records whose source accounts are
// drawn from accounts DIDs by a Pareto share of the links (the scale
// workload's: tail 1.3, the busiest at most 2,000 times the least), each
// with a rev and a clock id, in a random order (as a compaction meets
// them: by target, not by account).
func dictBenchRecords(n, accounts int) []byte {
	r := mrand.New(mrand.NewPCG(7, uint64(accounts)))
	cum := make([]float64, accounts)
	dids := make([]uint64, accounts)
	total := 0.0
	for i := range cum {
		total += math.Min(math.Pow(1-r.Float64(), -1/1.3), 2000)
		cum[i] = total
		dids[i] = 1 + uint64(i)*32 + r.Uint64N(32) // scattered PLC sequence numbers
	}
	recs := make([]byte, n*64)
	for i := range n {
		a, _ := slices.BinarySearch(cum, r.Float64()*total)
		a = min(a, accounts-1)
		rec := recs[i*64:]
		binary.BigEndian.PutUint64(rec, r.Uint64())                                   // target
		binary.BigEndian.PutUint64(rec[24:], r.Uint64()&^(1<<63)&^1023|r.Uint64N(32)) // TID with a clock id
		binary.BigEndian.PutUint64(rec[40:], dids[a])
		binary.BigEndian.PutUint64(rec[56:], 1000+dids[a]%977) // an account's backfill rev
	}
	return recs
}

// BenchmarkDictAccounts: what a table spends a record on its account
// dictionary, with as many accounts as the scale bench's 100M and 1B
// runs: a flushed table's own (buildAccountDict), and a compaction's
// shared one: counting (dictCounter.add), ordering it, finding each
// record's rank to encode it (ranksIn) and reading a rank's entry back
// to decode it.
func BenchmarkDictAccounts(b *testing.B) {
	l, _ := columnsLayout(BacklinkFormat, 0)
	// A backfill's flush: 2^20 links of whole repositories, ~700 links
	// each, so ~1,500 accounts.
	flush := dictBenchRecords(1<<20, 1500)
	b.Run("table/flush", func(b *testing.B) {
		for range b.N {
			buildAccountDict(flush, l)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(flush)/64), "ns/record")
	})
	for _, accounts := range []int{142_857, 1_428_571} {
		recs := dictBenchRecords(1<<21, accounts)
		n := len(recs) / 64
		b.Run(fmt.Sprintf("table/accounts=%d", accounts), func(b *testing.B) {
			for range b.N {
				buildAccountDict(recs, l) // a table of the run's accounts: its own dictionary
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
		// What the later sub-benchmarks start from, made once whichever
		// of them run (-bench may pick one).
		counted := func() *dictCounter {
			c := newDictCounter(l)
			for range 4 { // a run's records: each account seen ~4x as often
				c.add(recs)
			}
			return c
		}
		var c *dictCounter
		var d *accountDict
		var ranks []uint32
		setup := func() {
			if c == nil {
				c = counted()
				d = orderKeys(dictKeys(&c.t, l.clockCol), l.dictMax)
				ranks = ranksIn(recs, l, d) // and builds d's index
			}
		}
		b.Run(fmt.Sprintf("count/accounts=%d", accounts), func(b *testing.B) {
			for range b.N {
				counted()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(4*b.N*n), "ns/record")
		})
		b.Run(fmt.Sprintf("order/accounts=%d", accounts), func(b *testing.B) {
			setup()
			b.ResetTimer()
			for range b.N {
				orderKeys(dictKeys(&c.t, l.clockCol), l.dictMax) // dict, keeping the counter
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*d.len()), "ns/entry")
		})
		b.Run(fmt.Sprintf("rank/accounts=%d", accounts), func(b *testing.B) {
			setup()
			b.ResetTimer()
			for range b.N {
				ranksIn(recs, l, d)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
		b.Run(fmt.Sprintf("entry/accounts=%d", accounts), func(b *testing.B) {
			setup()
			b.ResetTimer()
			var sum uint64
			for range b.N {
				for _, r := range ranks {
					if r > 0 {
						did, clock := d.account(int(r - 1))
						sum += did + clock + d.rev(int(r-1))
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
			if sum == 0 {
				b.Fatal("no entry read")
			}
		})
	}
}
