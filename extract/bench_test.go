package extract_test

import (
	"bufio"
	"bytes"
	"os"
	"testing"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
)

// End-to-end input-to-links benchmarks: decode plus extraction, the work a
// node does per event before encoding links. Run with -cpu 1 for per-core
// figures (docs/bench.md).

func BenchmarkJetstreamToLinks(b *testing.B) {
	data, err := os.ReadFile(corpus + "expected_v1.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	var ex extract.Extractor
	links := 0
	b.SetBytes(int64(len(data)) / int64(len(lines)))
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		o, err := event.DecodeJetstream(lines[i%len(lines)])
		if err != nil {
			b.Fatal(err)
		}
		if o.Record != nil {
			ls, _ := ex.Extract(o.Record)
			links += len(ls)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/(processCPU()-cpu0).Seconds(), "events/cpu-s")
	b.ReportMetric(float64(links)/float64(b.N), "links/event")
}

func BenchmarkFirehoseToLinks(b *testing.B) {
	f, err := os.Open(corpus + "frames.bin")
	if err != nil {
		b.Fatal(err)
	}
	var frames [][]byte
	err = event.ReadFrames(bufio.NewReader(f), func(fr []byte) error { frames = append(frames, append([]byte(nil), fr...)); return nil })
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	var ex extract.Extractor
	events, links := 0, 0
	fn := func(o *event.Op) error {
		events++
		if o.Record != nil {
			ls, _ := ex.Extract(o.Record)
			links += len(ls)
		}
		return nil
	}
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		if err := event.DecodeFrame(frames[i%len(frames)], fn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(events)/(processCPU()-cpu0).Seconds(), "events/cpu-s")
	b.ReportMetric(float64(links)/float64(events), "links/event")
}

func BenchmarkCARToLinks(b *testing.B) {
	data, err := os.ReadFile("../testdata/indigo/atproto/repo/testdata/bnewbold.robocracy.org.20250310005405.car")
	if err != nil {
		b.Fatal(err)
	}
	var ex extract.Extractor
	records, links := 0, 0
	fn := func(o *event.Op) error {
		records++
		if o.Record != nil {
			ls, _ := ex.Extract(o.Record)
			links += len(ls)
		}
		return nil
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := event.DecodeCAR(data, fn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(records)/(processCPU()-cpu0).Seconds(), "records/cpu-s")
	b.ReportMetric(float64(links)/float64(records), "links/record")
}
