package lsm

import (
	"fmt"
	"testing"
)

// BenchmarkBuildFilter builds the 8-bit fuse filter and the blocked filter
// of a table of as many distinct prefixes as the tables of the 1B
// backfill hold (TestMeasureWritePath): a merge of flushes' (~135k: 0.51
// a record of 262k), a flush's (~770k: 0.73 a record of 1M) and a merge
// into columns' (~920k: 0.22 a record of 4.2M), in ns of CPU a key.
func BenchmarkBuildFilter(b *testing.B) {
	for _, kind := range []int{FilterBits8, FilterBlocked} {
		for _, n := range []int{135_000, 770_000, 920_000} {
			benchBuildFilter(b, kind, n)
		}
	}
}

func benchBuildFilter(b *testing.B, kind, n int) {
	keys := make([]uint64, n)
	x := uint64(7)
	for i := range keys {
		x = x*6364136223846793005 + 1442695040888963407
		keys[i] = x
	}
	b.Run(fmt.Sprintf("%s/%d", filterName(kind), n), func(b *testing.B) {
		var dst []byte
		c0 := processCPU()
		for range b.N {
			var err error
			if dst, err = buildFilter(dst[:0], keys, kind); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((processCPU()-c0).Nanoseconds())/float64(b.N*n), "cpu-ns/key")
	})
}
