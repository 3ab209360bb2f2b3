package lsm

import (
	"bytes"
	"strings"
	"testing"
)

// TestVerifyTableCatchesMismatch: BuildTable's self-check fails when the
// data decode to other records than it was given, in either form, and
// when a frame's bytes differ from what its meta says. The check of the
// decoded records' order is left to the input's own check and the
// comparison (decodeFrame with order false), so this is what stands
// between an encoder's bug and the bucket.
func TestVerifyTableCatchesMismatch(t *testing.T) {
	recs := synthBacklinks(7, 5000)
	SortRecords(recs, BacklinkFormat.Width)
	recs = Fold(BacklinkFormat, recs)
	n := len(recs) / BacklinkFormat.Width
	for _, fast := range []bool{false, true} {
		opt := TableOptions{Fast: fast}
		data, meta, err := BuildTable(BacklinkFormat, recs, opt)
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		verify := func(recs, data []byte) error {
			return verifyTable(BacklinkFormat, recs, data, meta, opt, m.transform, m.filterBits, int(m.Prefixes))
		}
		if err := verify(recs, data); err != nil {
			t.Fatalf("fast %v: the table as built fails its check: %v", fast, err)
		}
		// Another record in the middle, the order kept: its last byte
		// one lower where the next record differs from it anyway.
		other := bytes.Clone(recs)
		w := BacklinkFormat.Width
		i := n / 2
		for ; i < n-1; i++ {
			if !bytes.Equal(other[i*w:i*w+w-1], other[(i-1)*w:(i-1)*w+w-1]) && other[i*w+w-1] > 0 {
				break
			}
		}
		other[i*w+w-1]--
		if err := verify(other, data); err == nil || !strings.Contains(err.Error(), "decodes to different records") {
			t.Fatalf("fast %v: records other than the data's: %v", fast, err)
		}
		bad := bytes.Clone(data)
		bad[len(bad)/2] ^= 1
		if err := verify(recs, bad); err == nil {
			t.Fatalf("fast %v: a flipped bit in the data passed", fast)
		}
	}
}
