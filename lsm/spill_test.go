package lsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"testing"
)

// spillInput makes seqs sorted sequences of 64-byte records whose keys
// come in groups of about group records (a target's links in one input
// table), the sequences' keys interleaved as a compaction's inputs are;
// dup makes every seq-th record of a sequence also appear in the next
// one (equal records across inputs).
func spillInput(seed uint64, seqs, records, group int, dup bool) [][]byte {
	r := mrand.New(mrand.NewPCG(seed, 1))
	out := make([][]byte, seqs)
	for s := range out {
		var recs [][]byte
		for len(recs) < records {
			key := r.Uint64()
			n := 1 + r.IntN(2*group)
			for i := range n {
				rec := make([]byte, 64)
				binary.BigEndian.PutUint64(rec, key)
				binary.BigEndian.PutUint64(rec[8:], uint64(i))
				binary.BigEndian.PutUint64(rec[16:], r.Uint64())
				recs = append(recs, rec)
			}
		}
		if dup && s > 0 {
			for i := 0; i < len(out[s-1])/64; i += seqs {
				recs = append(recs, slices.Clone(out[s-1][i*64:(i+1)*64]))
			}
		}
		slices.SortFunc(recs, compareRecords)
		out[s] = bytes.Join(recs, nil)
	}
	return out
}

// The spill merges each shard's sequences into one sorted sequence that
// holds every record spilled, equal ones once per time spilled: the same
// as sorting them all.
func TestSpillMerge(t *testing.T) {
	for _, c := range []struct {
		name                 string
		seqs, records, group int
		dup                  bool
	}{
		{"one sequence", 1, 5000, 10, false},
		{"single records interleaved", 8, 3000, 1, false},
		{"groups", 8, 20000, 20, false},
		{"long groups across blocks", 3, 40000, 3000, false},
		{"equal records across sequences", 5, 4000, 4, true},
		{"two sequences", 2, 3000, 5, false},
		{"seven sequences", 7, 2000, 3, true},
		{"eighteen sequences (a full compaction's inputs)", 18, 1500, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := spillInput(1, c.seqs, c.records, c.group, c.dup)
			sp, err := newSpill(t.TempDir(), 64, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.close()
			var want [][]byte
			for _, seq := range in {
				// Each input table's records go to shard 1 (shard 0 stays
				// empty), in pieces as a table's frames come.
				for len(seq) > 0 {
					n := min(len(seq), 64*(1+len(seq)/64%700))
					if err := sp.add(1, seq[:n]); err != nil {
						t.Fatal(err)
					}
					for i := 0; i < n; i += 64 {
						want = append(want, seq[i:i+64])
					}
					seq = seq[n:]
				}
				if err := sp.endSequence(); err != nil {
					t.Fatal(err)
				}
			}
			if err := sp.finish(); err != nil {
				t.Fatal(err)
			}
			slices.SortStableFunc(want, compareRecords)
			got, err := sp.merge(1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, bytes.Join(want, nil)) {
				t.Fatalf("merged %d bytes differ from the %d records sorted", len(got), len(want))
			}
			if empty, err := sp.merge(0, nil); err != nil || len(empty) != 0 {
				t.Fatalf("empty shard: %d bytes, %v", len(empty), err)
			}
		})
	}
}

// BenchmarkSpillMerge: a compaction's merge of one output shard, eight
// input tables' sequences of it merged (records of ~10-link
// groups, as a backfill's targets in a run).
func BenchmarkSpillMerge(b *testing.B) {
	in := spillInput(2, 8, 100000, 10, false)
	sp, err := newSpill(b.TempDir(), 64, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.close()
	n := 0
	for _, seq := range in {
		if err := sp.add(0, seq); err != nil {
			b.Fatal(err)
		}
		if err := sp.endSequence(); err != nil {
			b.Fatal(err)
		}
		n += len(seq) / 64
	}
	if err := sp.finish(); err != nil {
		b.Fatal(err)
	}
	seqs := sp.shards[0]
	dst := make([]byte, 0, n*64)
	b.ResetTimer()
	for range b.N {
		sp.shards[0] = slices.Clone(seqs) // merge consumes the shard's sequences
		if dst, err = sp.merge(0, dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
}

// merge (for the tests) appends shard s's records, merged into order, to dst (grown to
// hold them) and returns it. Records equal in every byte come out once
// each time they were spilled (Fold keeps one).
func (sp *spill) merge(s int, dst []byte) ([]byte, error) {
	seqs := sp.shards[s]
	cs := make([]*cursor, 0, len(seqs))
	for i := range seqs {
		cs = append(cs, &cursor{src: &spillIter{sp: sp, seq: &seqs[i]}})
	}
	out, err := mergeCursors(cs, sp.w, sp.records[s]*sp.w, dst)
	if err != nil {
		return nil, fmt.Errorf("spill of shard %d: %w", s, err)
	}
	sp.shards[s] = nil
	return out, nil
}

// The pending blocks of a spill over many shards stay within
// spillPendMax (and a record): past it, every pending block is written.
func TestSpillPendingBound(t *testing.T) {
	defer func(n int) { spillPendMax = n }(spillPendMax)
	spillPendMax = 64 << 10
	sp, err := newSpill(t.TempDir(), 64, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	rec := make([]byte, 64)
	written := false
	for i := range 20000 {
		rec[0] = byte(i)
		if err := sp.add(i%4096, rec); err != nil {
			t.Fatal(err)
		}
		if sp.pendSum > spillPendMax+64 {
			t.Fatalf("after %d records: %d bytes pending, bound %d", i+1, sp.pendSum, spillPendMax)
		}
		written = written || sp.off > 0
	}
	// 20,000 records a block (64 KiB) never fills: only the bound wrote.
	if !written {
		t.Fatal("no block written: the test shows nothing")
	}
	if err := sp.finish(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for s := range sp.shards {
		n += sp.records[s]
	}
	if n != 20000 {
		t.Fatalf("%d records spilled, want 20000", n)
	}
}
