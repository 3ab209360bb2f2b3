package event

import (
	"bytes"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/klauspost/compress/zstd"
)

// The benchmarks run over all real data of the test set and report
// throughput per second of the whole run (events/s, records/s). Every
// figure includes decoding the records into atdata maps. Each rate is also
// reported per second of process CPU time (events/cpu-s, records/cpu-s:
// all threads, the garbage collector included), which stays meaningful on
// a machine shared with other work, where wall-clock rates drop.

// cpuMeter measures process CPU time over a benchmark's timed loop.
type cpuMeter struct{ start time.Duration }

func startCPU(b *testing.B) *cpuMeter {
	b.ResetTimer()
	return &cpuMeter{start: processCPU()}
}

// report adds "<unit>/s" (wall clock) and "<unit>/cpu-s" metrics for n
// items processed in the timed loop.
func (m *cpuMeter) report(b *testing.B, n int, unit string) {
	cpu := processCPU() - m.start
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), unit+"/s")
	if cpu > 0 {
		b.ReportMetric(float64(n)/cpu.Seconds(), unit+"/cpu-s")
	}
}

func BenchmarkJetstreamDecode(b *testing.B) {
	msgs := jetstreamLines(b)
	size := 0
	for _, m := range msgs {
		size += len(m)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	m := startCPU(b)
	for b.Loop() {
		for _, m := range msgs {
			if _, err := DecodeJetstream(m); err != nil {
				b.Fatal(err)
			}
		}
	}
	m.report(b, b.N*len(msgs), "events")
}

// BenchmarkJetstreamDecompressDecode adds zstd decompression (compress=true).
func BenchmarkJetstreamDecompressDecode(b *testing.B) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderDict(JetstreamDict()))
	if err != nil {
		b.Fatal(err)
	}
	var msgs [][]byte
	for _, m := range jetstreamLines(b) {
		msgs = append(msgs, enc.EncodeAll(m, nil))
	}
	enc.Close()
	d, err := NewJetstreamDecompressor()
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var buf []byte
	b.ReportAllocs()
	m := startCPU(b)
	for b.Loop() {
		for _, m := range msgs {
			if buf, err = d.Decompress(buf, m); err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeJetstream(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	m.report(b, b.N*len(msgs), "events")
}

// BenchmarkFirehoseDecode decodes frames.bin's 150 frames (148 commits,
// 150 record ops) from the length-prefixed file, as a consumer replaying
// a capture would.
func BenchmarkFirehoseDecode(b *testing.B) {
	data := readTD(b, "jetstream/corpus/frames.bin")
	frames, ops := 0, 0
	count := func(*Op) error { ops++; return nil }
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	m := startCPU(b)
	for b.Loop() {
		if err := ReadFrames(bytes.NewReader(data), func(f []byte) error {
			frames++
			return DecodeFrame(f, count)
		}); err != nil {
			b.Fatal(err)
		}
	}
	m.report(b, frames, "events")
	m.report(b, ops, "ops")
}

// BenchmarkCARDecode reads every repository CAR of the test set (10 files,
// 495 records present).
func BenchmarkCARDecode(b *testing.B) {
	var cars [][]byte
	size := 0
	for _, s := range loadCARSummary(b) {
		c := readTD(b, s.file)
		cars = append(cars, c)
		size += len(c)
	}
	records := 0
	count := func(o *Op) error {
		if o.Record != nil {
			records++
		}
		return nil
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	m := startCPU(b)
	for b.Loop() {
		for _, c := range cars {
			if _, err := ReadCAR(bytes.NewReader(c), count); err != nil {
				b.Fatal(err)
			}
		}
	}
	m.report(b, records, "records")
}

// BenchmarkRecordCBOR compares decodeRecord with atdata.UnmarshalCBOR on
// the record blocks of the test set's CARs.
func BenchmarkRecordCBOR(b *testing.B) {
	var recs [][]byte
	for _, s := range loadCARSummary(b) {
		c := readTD(b, s.file)
		if _, err := ReadCAR(bytes.NewReader(c), func(*Op) error { return nil }); err != nil {
			b.Fatal(err)
		}
		_, blocks := carBlockList(b, c)
		for _, bl := range blocks {
			if m, err := decodeRecord(bl[1]); err == nil && m["$type"] != nil {
				recs = append(recs, bl[1])
			}
		}
	}
	for _, impl := range []struct {
		name string
		fn   func([]byte) (map[string]any, error)
	}{{"atdata", atdata.UnmarshalCBOR}, {"eddy", decodeRecord}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			m := startCPU(b)
			for b.Loop() {
				for _, r := range recs {
					if _, err := impl.fn(r); err != nil {
						b.Fatal(err)
					}
				}
			}
			m.report(b, b.N*len(recs), "records")
		})
	}
}
