package lsm

import (
	"testing"

	"github.com/klauspost/compress/zstd"
)

// A dictionary that compresses far past 64x (a backfill's: one large
// rev, clock id 0, DIDs sharing most of their bytes) decodes: a bound on
// the compression ratio once refused such a real table at its own
// self-check, failing its flush for ever (CI, TestScheduledFlushKeepsRepoWhole).
func TestDictionaryCompressesFarPast64x(t *testing.T) {
	const e = 20000
	d := &accountDict{dids: make([]uint64, e), clocks: make([]uint16, e), revs: make([]uint64, e)}
	for i := range e {
		d.dids[i] = 1<<63 | uint64(1000000+i%4)
		d.revs[i] = 1 << 50
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := appendDict(nil, d, enc)
	t.Logf("%d entries in %d bytes", e, len(b))
	got, err := decodeDict(b, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range e {
		if got.dids[i] != d.dids[i] || got.revs[i] != d.revs[i] || got.clocks[i] != 0 {
			t.Fatalf("entry %d differs", i)
		}
	}
}
