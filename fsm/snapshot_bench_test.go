package fsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// BenchmarkSnapshotDIDOutlines measures what outlined DIDs cost the Raft
// state: with the PLC map off every DID is an outline, held in every
// node's memory and in every snapshot. N accounts (EDDY_BENCH_OUTLINES,
// default 1,000,000; did:plc-shaped, 32 bytes each) are restored from a
// snapshot, which is then taken again; reported: snapshot bytes, restore
// and persist time, and the heap the restored state holds, per account.
//
//	EDDY_BENCH_OUTLINES=4000000 go test -run '^$' -bench BenchmarkSnapshotDIDOutlines -benchtime 1x ./fsm
func BenchmarkSnapshotDIDOutlines(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("EDDY_BENCH_OUTLINES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("EDDY_BENCH_OUTLINES=%q", v)
		}
	}
	dids := make([]string, n)
	for i := range dids {
		dids[i] = fmt.Sprintf("did:plc:%024d", i)
	}
	var buf bytes.Buffer
	empty := (&lsm.Manifest{}).Encode()
	sn := &snapshot{v: snapshotJSON{V: SnapshotVersion, Outlines: map[string][]string{"did": dids}, Manifest: empty}}
	if err := sn.Persist(&memSink{Buffer: &buf}); err != nil {
		b.Fatal(err)
	}
	dids, sn = nil, nil
	snapBytes := buf.Len()
	var restore, persist time.Duration
	var heap uint64
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		s := New()
		start := time.Now()
		if err := s.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
			b.Fatal(err)
		}
		restore = time.Since(start)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		if got := s.OutlineLen(link.OutlineDID); got != n {
			b.Fatalf("restored %d DID outlines, want %d", got, n)
		}
		snap, err := s.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		start = time.Now()
		if err := snap.Persist(&memSink{Buffer: &out}); err != nil {
			b.Fatal(err)
		}
		persist = time.Since(start)
		// The same outlines; only the empty maps' spelling ({} for null) differs.
		if d := out.Len() - snapBytes; d < 0 || d > 256 {
			b.Fatalf("snapshot taken again is %d bytes, was %d", out.Len(), snapBytes)
		}
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(n), "accounts")
	b.ReportMetric(float64(snapBytes)/float64(n), "snapshot_B/account")
	b.ReportMetric(float64(heap)/float64(n), "heap_B/account")
	b.ReportMetric(restore.Seconds(), "restore_s")
	b.ReportMetric(persist.Seconds(), "persist_s")
}

// memSink is a raft.SnapshotSink over a buffer.
type memSink struct{ *bytes.Buffer }

func (m *memSink) ID() string    { return "bench" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }
