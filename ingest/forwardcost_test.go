package ingest_test

import (
	"bufio"
	"os"
	"testing"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// BenchmarkForwardEntriesCost measures what forward entries cost on real
// network traffic (the bundled Jetstream capture): the share of links in
// records with two or more links, and the links table's bytes (data and
// meta, one table as a flush writes it) without and with their forward
// entries. Figures in docs/bench.md.
//
//	go test -run '^$' -bench BenchmarkForwardEntriesCost -benchtime 1x ./ingest
func BenchmarkForwardEntriesCost(b *testing.B) {
	f, err := os.Open("../testdata/jetstream/corpus/expected_v1.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	codec := &link.Codec{Outlines: link.NewMemOutlines()}
	plain := lsm.NewMemtable(lsm.BacklinkFormat, 64<<20)
	withFw := lsm.NewMemtable(lsm.BacklinkFormat, 64<<20)
	var links, inMulti int
	var ex extract.Extractor
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for stamp := uint64(1); sc.Scan(); stamp++ {
		op, err := event.DecodeJetstream(sc.Bytes())
		if err != nil || op.Kind != event.KindCommit || op.Record == nil {
			continue
		}
		src, err := codec.Record(op.DID, op.Collection, op.RKey, true)
		if err != nil {
			continue
		}
		ls, _ := ex.Extract(op.Record)
		var bls []link.Backlink
		for i := range ls {
			tgt := codec.TargetKey(&ls[i].Target)
			loc, err := codec.Location(ls[i].Path, ls[i].StrongRef, true)
			if err != nil {
				b.Fatal(err)
			}
			bls = append(bls, link.Backlink{Target: tgt, Source: src, Location: loc, SourceRev: stamp})
		}
		links += len(bls)
		for i := range bls {
			if err := plain.AddBacklink(&bls[i]); err != nil {
				b.Fatal(err)
			}
			if err := withFw.AddBacklink(&bls[i]); err != nil {
				b.Fatal(err)
			}
			if len(bls) >= 2 {
				fl := link.Backlink{Target: link.ForwardKey(src), Source: bls[i].Target, Location: bls[i].Location, SourceRev: stamp}
				if err := withFw.AddBacklink(&fl); err != nil {
					b.Fatal(err)
				}
			}
		}
		if len(bls) >= 2 {
			inMulti += len(bls)
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	size := func(m *lsm.Memtable) int {
		data, meta, err := lsm.BuildTable(lsm.BacklinkFormat, m.Sorted(), lsm.TableOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return len(data) + len(meta)
	}
	var without, with int
	for range b.N {
		without, with = size(plain), size(withFw)
	}
	if links == 0 || inMulti == 0 || with <= without {
		b.Fatalf("%d links, %d in records of several links, %d bytes without forward entries, %d with", links, inMulti, without, with)
	}
	b.ReportMetric(float64(links), "links")
	b.ReportMetric(100*float64(inMulti)/float64(links), "%links_in_multi")
	b.ReportMetric(float64(without)/float64(links), "B/link_without")
	b.ReportMetric(float64(with)/float64(links), "B/link_with")
	b.ReportMetric(100*float64(with-without)/float64(without), "%bytes_added")
}
