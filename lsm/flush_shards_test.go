package lsm

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// A flush large enough is written in the shards its next two merges
// will need: a compacted run marked Flush, in the fast form. The merge
// of fanIn such flushes takes them for flushes (the fast form again, in
// the same shards) and spills nothing; every count stays exact, and a
// small flush is still a delta run.
func TestLargeFlushInShards(t *testing.T) {
	ctx := context.Background()
	const fanIn = 2
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true, CompactionFanIn: fanIn, MemtableBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// 36 MiB of records a flush: the merge of MergedFanIn runs of fanIn
	// such flushes holds 288 MiB, above one output shard's 256 MiB.
	const targets, per = 59000, 10
	wantBits := flushShardBits(TreeLinks, targets*per*uint64(BacklinkFormat.Width), fanIn)
	if wantBits != 1 {
		t.Fatalf("a flush of %d records gets %d shard bits, want 1: the test shows nothing", targets*per, wantBits)
	}
	counts := func(when string, flushes int) {
		t.Helper()
		for tg := 0; tg < targets; tg += 997 {
			n, _, err := db.Count(ctx, link.RecordID{RKey: uint64(tg), Collection: 3, DID: 1}, Filter{})
			if err != nil || n != uint64(flushes*per) {
				t.Fatalf("%s: target %d: count %d (%v), want %d", when, tg, n, err, flushes*per)
			}
		}
	}
	// check demands the links tree's runs be n, each compacted in bits
	// shard bits and the fast form, flush or not.
	check := func(when string, n int, flush bool) {
		t.Helper()
		runs := db.View().trees[TreeLinks]
		if len(runs) != n {
			t.Fatalf("%s: %d runs, want %d", when, len(runs), n)
		}
		for _, vr := range runs {
			if vr.run.Kind != RunCompacted || vr.run.Flush != flush || vr.run.IsFlush() != flush || vr.shardBits != wantBits || len(vr.run.Tables) != 1<<wantBits {
				t.Fatalf("%s: run kind %d, flush %v, %d tables of %d shard bits; want compacted, flush %v, %d tables of %d bits", when, vr.run.Kind, vr.run.Flush, len(vr.run.Tables), vr.shardBits, flush, 1<<wantBits, wantBits)
			}
			for _, vt := range vr.tables {
				m, err := vt.load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if m.transform != transformShuffleS2 {
					t.Fatalf("%s: a table in %s, want the fast form", when, m.transform)
				}
			}
		}
	}
	for i := range fanIn {
		addTargetLinks(t, db, targets, per, i)
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("after the flushes", fanIn, true)
	counts("after the flushes", fanIn)
	if !FastMerge(db.View().Manifest.RunsOf(TreeLinks)) {
		t.Fatal("a merge of the flushes would not be in the fast form")
	}
	spills := spillsCreated.Load()
	if ok, err := db.Compact(ctx); err != nil || !ok {
		t.Fatalf("compaction: %v %v", ok, err)
	}
	if n := spillsCreated.Load() - spills; n != 0 {
		t.Fatalf("the merge of flushes in its shards made %d spill files", n)
	}
	check("after their merge", 1, false)
	counts("after their merge", fanIn)

	// A small flush is a delta run, as ever.
	addTargetLinks(t, db, 10, per, fanIn)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	runs := db.View().Manifest.RunsOf(TreeLinks)
	if last := runs[len(runs)-1]; last.Kind != RunDelta || !last.IsFlush() {
		t.Fatalf("a small flush: kind %d, want a delta run", last.Kind)
	}
}

// splitShardsInto splits as splitShards does, into the buffer it is
// given, whatever the shard bits and however long the prefixes' runs.
func TestSplitShardsInto(t *testing.T) {
	f := BacklinkFormat
	var recs []byte
	for tg := range 3000 {
		for i := range 1 + tg%7 {
			l := link.Backlink{Target: link.RecordID{RKey: uint64(tg), Collection: 3, DID: 1}, Source: link.RecordID{RKey: uint64(i), Collection: 5, DID: 2}}
			recs = appendBacklink(recs, l)
		}
	}
	SortRecords(recs, f.Width)
	for bits := range uint8(6) {
		want := splitShards(f, recs, bits)
		got, _ := splitShardsInto(f, recs, bits, make([]byte, len(recs)), nil)
		if len(got) != len(want) {
			t.Fatalf("%d bits: %d parts, want %d", bits, len(got), len(want))
		}
		for s := range want {
			if !bytes.Equal(got[s], want[s]) {
				t.Fatalf("%d bits: shard %d: %d bytes differ from splitShards' %d", bits, s, len(got[s]), len(want[s]))
			}
		}
	}
}

// The Flush mark survives the manifest's encoding; a manifest without it
// (an earlier version's) decodes to runs that are flushes by kind alone;
// and an earlier version's decoding, which has no such field, takes a
// marked run for a compacted run and refuses nothing.
func TestManifestFlushMark(t *testing.T) {
	m := &Manifest{Generation: 3, NextSeq: 2, Runs: []Run{
		{ID: "a", Tree: TreeLinks, Kind: RunCompacted, Seq: 0, Flush: true, Tables: []TableRef{{ID: "t0", Records: 1, ShardBits: 1}, {ID: "t1", Records: 1, ShardBits: 1, Shard: 1}}},
		{ID: "b", Tree: TreeLinks, Kind: RunDelta, Seq: 1, Tables: []TableRef{{ID: "t2", Records: 1}}},
	}}
	got, err := DecodeManifest(m.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Runs[0].Flush || !got.Runs[0].IsFlush() || got.Runs[1].Flush || !got.Runs[1].IsFlush() {
		t.Fatalf("decoded runs %+v", got.Runs)
	}
	old := []byte(`{"v":1,"generation":3,"next_seq":2,"runs":[{"id":"c","tree":"links","kind":2,"seq":0,"tables":[{"id":"t3","records":1}]}]}`)
	if got, err = DecodeManifest(old); err != nil || got.Runs[0].Flush || got.Runs[0].IsFlush() {
		t.Fatalf("an earlier manifest's compacted run: %+v, %v", got, err)
	}
	var earlier struct {
		V    int `json:"v"`
		Runs []struct {
			ID     string     `json:"id"`
			Kind   RunKind    `json:"kind"`
			Tables []TableRef `json:"tables"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(m.Encode(), &earlier); err != nil || earlier.Runs[0].Kind != RunCompacted || len(earlier.Runs[0].Tables) != 2 {
		t.Fatalf("an earlier version's decoding: %+v, %v", earlier, err)
	}
}
