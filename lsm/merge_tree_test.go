package lsm

import (
	"bytes"
	mrand "math/rand/v2"
	"slices"
	"testing"
)

// blocksSource yields fixed blocks (some of them empty) of a sequence.
type blocksSource struct{ blocks [][]byte }

func (s *blocksSource) nextBlock() ([]byte, error) {
	if len(s.blocks) == 0 {
		return nil, nil
	}
	b := s.blocks[0]
	s.blocks = s.blocks[1:]
	return b, nil
}

// mergeCursors gives the sorted concatenation of its sequences, whatever
// their number (none to twenty), the records' width (narrower than the
// 24 bytes a cursor keeps, not a multiple of eight, a revocation's 32, or
// a backlink's 64), how the sequences are cut into blocks (empty ones
// too), and however many records share their first words (then the rest
// orders them): half the records start with 16 bytes of zeros, as a
// follow's target (an account) starts with two words of zeros, a quarter
// with 24 (the links of one target).
func TestMergeCursorsMatchesSort(t *testing.T) {
	r := mrand.New(mrand.NewPCG(3, 5))
	for trial := range 400 {
		w := []int{4, 12, 32, 64}[trial%4]
		k := r.IntN(21)
		var all []byte
		var cs []*cursor
		for range k {
			var recs [][]byte
			for range r.IntN(200) {
				rec := make([]byte, w)
				// Few distinct leading bytes: equal first words are common.
				for i := range rec {
					rec[i] = byte(r.IntN(3))
				}
				switch r.IntN(4) {
				case 0, 1: // an account's target: its first two words zeros
					clear(rec[:min(w, 16)])
				case 2: // one target's links: three words the same
					clear(rec[:min(w, 24)])
				}
				recs = append(recs, rec)
			}
			slices.SortFunc(recs, bytes.Compare)
			seq := bytes.Join(recs, nil)
			all = append(all, seq...)
			var blocks [][]byte
			for len(seq) > 0 || r.IntN(4) == 0 {
				n := min(len(seq)/w, r.IntN(30)) * w
				blocks = append(blocks, seq[:n])
				seq = seq[n:]
				if len(seq) == 0 && r.IntN(2) == 0 {
					break
				}
			}
			cs = append(cs, &cursor{src: &blocksSource{blocks: blocks}})
		}
		got, err := mergeCursors(cs, w, len(all), []byte("head"))
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		want := sortedRecs(all, w)
		if !bytes.Equal(got[:4], []byte("head")) || !bytes.Equal(got[4:], want) {
			t.Fatalf("trial %d (%d sequences of %d-byte records): merge differs from sort", trial, k, w)
		}
	}
	// A size that does not match what the sequences hold is an error.
	cs := []*cursor{{src: &blocksSource{blocks: [][]byte{make([]byte, 64)}}}}
	if _, err := mergeCursors(cs, 64, 128, nil); err == nil {
		t.Fatal("a merge of 64 bytes, told 128, gave no error")
	}
	// So is a block that is not whole records.
	cs = []*cursor{{src: &blocksSource{blocks: [][]byte{make([]byte, 65)}}}}
	if _, err := mergeCursors(cs, 64, 64, nil); err == nil {
		t.Fatal("a block of 65 bytes of 64-byte records gave no error")
	}
}

// sortedRecs returns recs's records of width w in bytewise order.
func sortedRecs(recs []byte, w int) []byte {
	var rs [][]byte
	for o := 0; o < len(recs); o += w {
		rs = append(rs, recs[o:o+w])
	}
	slices.SortFunc(rs, bytes.Compare)
	return bytes.Join(rs, nil)
}
