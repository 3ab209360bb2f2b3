package lsm

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// TestMeasureSortBackfill measures SortRecords on memtables of a 1B
// backfill's stream (the 21st to the 23rd, 1M links each), whole and by
// phase: the keys of the first word, their radix sort, the records moved
// into that order, and the runs of equal first words sorted where they
// lie. Reproduce: go test ./lsm -run TestMeasureSortBackfill -v -lsm.measure
func TestMeasureSortBackfill(t *testing.T) {
	if !*lsmMeasure {
		t.Skip("-lsm.measure not set")
	}
	mts := backfillMemtables(t, 20, 3)
	buf := make([]byte, DefaultMemtableBytes)
	n := len(buf) / 64
	for round := range 3 {
		var whole, tk, tr, tg, tp time.Duration
		for _, m := range mts {
			copy(buf, m)
			c0 := processCPU()
			SortRecords(buf, 64)
			whole += processCPU() - c0

			copy(buf, m)
			s := getSorter(n, 64)
			c0 = processCPU()
			ents := s.ents[:n]
			for i := range ents {
				ents[i] = sortEntry{key: s.word(buf, i*64, 0), idx: uint32(i)}
			}
			c1 := processCPU()
			radixSortKeys(ents, s.tmp)
			c2 := processCPU()
			s.gather(buf, ents)
			c3 := processCPU()
			for i := 0; i < n; {
				k := s.word(buf, i*64, 0)
				j := i + 1
				for j < n && s.word(buf, j*64, 0) == k {
					j++
				}
				if j-i > 1 {
					s.sortFrom(buf[i*64:j*64], 1)
				}
				i = j
			}
			c4 := processCPU()
			putSorter(s)
			tk, tr, tg, tp = tk+c1-c0, tr+c2-c1, tg+c3-c2, tp+c4-c3
		}
		d := float64(len(mts) * n)
		t.Logf("round %d: SortRecords %.0f ns a record; by phase: keys %.0f, radix %.0f, moving the records %.0f, runs of equal first words %.0f",
			round, float64(whole)/d, float64(tk)/d, float64(tr)/d, float64(tg)/d, float64(tp)/d)
	}
	// What the runs are: a follow's target (an account) starts with two
	// zero words, so every account-target record is moved again by its
	// run's sort.
	m := mts[0]
	zero, runs := 0, 0
	for i := 0; i < n; i++ {
		if binary.BigEndian.Uint64(m[i*64:]) == 0 {
			zero++
		}
	}
	copy(buf, m)
	SortRecords(buf, 64)
	for i := 0; i < n; {
		j := i + 1
		for j < n && binary.BigEndian.Uint64(buf[j*64:]) == binary.BigEndian.Uint64(buf[i*64:]) {
			j++
		}
		runs++
		i = j
	}
	t.Logf("%d records: %d with a first word of zeros (account targets), %d distinct first words", n, zero, runs)
}

// backfillMemtables returns count memtables of the 1B backfill's stream
// (links only, in arrival order) after skipping skip of them.
func backfillMemtables(t testing.TB, skip, count int) [][]byte {
	s, err := workload.NewStream(workload.StreamConfig{Links: 1_000_000_000, Seed: 1, Shape: workload.ShapeBackfill})
	if err != nil {
		t.Fatal(err)
	}
	per := DefaultMemtableBytes / 64
	var out [][]byte
	cur := make([]byte, 0, DefaultMemtableBytes)
	seen := 0
	enough := errors.New("enough")
	err = s.Run(func(op *workload.Op) error {
		if op.Revoke {
			return nil
		}
		if seen++; seen <= skip*per {
			return nil
		}
		var b [64]byte
		op.Link.Put(b[:])
		if cur = append(cur, b[:]...); len(cur) == cap(cur) {
			if out = append(out, cur); len(out) == count {
				return enough
			}
			cur = make([]byte, 0, DefaultMemtableBytes)
		}
		return nil
	})
	if err != nil && !errors.Is(err, enough) {
		t.Fatal(err)
	}
	return out
}
