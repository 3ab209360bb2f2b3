package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/zeebo/xxh3"
)

// TestFastTable: a table built with TableOptions.Fast (a flush's) is format
// version 11 with frame transform 5 and no dictionary, decodes to its
// records frame by frame, through its decoded meta and through its local
// (mapped) layout, and its filter holds every prefix; a merge of fast
// tables writes the columns again.
func TestFastTable(t *testing.T) {
	links, revs := synthCorpus()
	for _, tc := range []struct {
		name string
		f    Format
		recs []byte
	}{
		{"backlinks", BacklinkFormat, links[:64*300_000]},
		{"revocations", RevocationFormat, revs[:32*100_000]},
		{"one record", BacklinkFormat, links[:64]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, meta, err := BuildTable(tc.f, tc.recs, TableOptions{Fast: true})
			if err != nil {
				t.Fatal(err)
			}
			m, err := DecodeMeta(meta)
			if err != nil {
				t.Fatal(err)
			}
			if m.version != TableFormatVersion || m.transform != transformShuffleS2 || m.dict != nil {
				t.Fatalf("version %d transform %v dictionary %v", m.version, m.transform, m.dict != nil)
			}
			got := decodeFrames(t, m, data)
			if !bytes.Equal(got, tc.recs) {
				t.Fatal("frames decode to other records")
			}
			local, err := encodeLocalMeta(m, meta)
			if err != nil {
				t.Fatal(err)
			}
			lm, err := openMapped(&mapRegion{b: local})
			if err != nil {
				t.Fatal(err)
			}
			off, n := lm.ByteRange(0, 0)
			fr, err := lm.DecodeFrame(0, data[off:off+n], nil)
			if err != nil || !bytes.Equal(fr, tc.recs[:len(fr)]) {
				t.Fatalf("the local layout's first frame: %v", err)
			}
			w, p := tc.f.Width, tc.f.PrefixLen
			for i := 0; i < len(tc.recs); i += w {
				if !m.MayContain(tc.recs[i : i+p]) {
					t.Fatalf("filter misses prefix %x", tc.recs[i:i+p])
				}
			}
			if tc.f == BacklinkFormat && len(tc.recs) > 64*1000 {
				cdata, _, err := BuildTable(tc.f, tc.recs, TableOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d records: fast %.2f bytes a record, columns %.2f", len(tc.recs)/w,
					float64(len(data))/float64(len(tc.recs)/w), float64(len(cdata))/float64(len(tc.recs)/w))
				if len(data) <= len(cdata) {
					t.Fatalf("fast %d bytes, columns %d: the fast form is the larger one", len(data), len(cdata))
				}
			}
		})
	}
}

// TestFastTableNeedsVersion11: frame transform 5 in a meta of an older
// version is corrupt, and BuildTable refuses to write it there.
func TestFastTableNeedsVersion11(t *testing.T) {
	links, _ := synthCorpus()
	recs := links[:64*5000]
	_, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	old := slices.Clone(meta)
	binary.LittleEndian.PutUint16(old[8:], 10)
	binary.LittleEndian.PutUint64(old[len(old)-8:], xxh3.Hash(old[:len(old)-8]))
	if _, err := DecodeMeta(old); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("version 10 with transform 5: %v, want ErrCorrupt", err)
	}
	if _, _, err := BuildTable(BacklinkFormat, recs, TableOptions{Fast: true, version: 10}); err == nil {
		t.Fatal("BuildTable wrote a fast table in version 10")
	}
}

// TestFastFrameCorrupt: an S2 frame whose checksum matches but whose
// block is wrong (another decoded length, a bad copy, too little output)
// is an ErrCorrupt error, never a panic or an allocation past the frame.
func TestFastFrameCorrupt(t *testing.T) {
	links, _ := synthCorpus()
	data, meta, err := BuildTable(BacklinkFormat, links[:64*3000], TableOptions{Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	off, n := m.ByteRange(0, 0)
	good := data[off : off+n]
	want := int(m.Frames[0].Records) * 64
	var lenBytes []byte
	lenBytes = binary.AppendUvarint(lenBytes, uint64(want))
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"a longer decoded length", append(binary.AppendUvarint(nil, uint64(want+64)), good[len(lenBytes):]...)},
		{"a shorter decoded length", append(binary.AppendUvarint(nil, uint64(want-64)), good[len(lenBytes):]...)},
		{"a length past 2^32", append(binary.AppendUvarint(nil, 1<<40), good[len(lenBytes):]...)},
		{"a copy before the start", append(slices.Clone(lenBytes), 0x01|1<<2, 0xff)}, // a 1-byte-offset copy of 5 bytes at offset 255
		{"too little output", good[:len(good)/2]},
		{"no block", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			mm := *m
			mm.Frames = slices.Clone(m.Frames)
			mm.Frames[0].Length = uint32(len(c.frame))
			mm.Frames[0].Checksum = xxh3.Hash(c.frame)
			_, err := mm.DecodeFrame(0, c.frame, nil)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%v, want ErrCorrupt", err)
			}
		})
	}
}

// TestMergeOfFlushesIsFast: a DB's flushes write the fast form, and so
// does a merge of flushes only (FastMerge); a merge with a merged run
// among its inputs writes the columns, and so does a full compaction
// whatever its inputs; every count holds throughout.
func TestMergeOfFlushesIsFast(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true, CompactionFanIn: 2})
	if err != nil {
		t.Fatal(err)
	}
	const targets, per = 200, 3
	flushes := 0
	flush := func() {
		addTargetLinks(t, db, targets, per, flushes)
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	// The links tree's runs: kind and transforms, oldest first.
	runs := func() string {
		out := ""
		v := db.View()
		for _, vr := range v.trees[TreeLinks] {
			kind := "delta"
			if vr.run.Kind == RunCompacted {
				kind = "compacted"
			}
			out += kind + ":"
			for _, vt := range vr.tables {
				m, err := vt.load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				out += fmt.Sprintf(" %s", m.transform)
			}
			out += "; "
		}
		return out
	}
	counts := func(when string) {
		for tg := range targets {
			n, _, err := db.Count(ctx, link.RecordID{RKey: uint64(tg), Collection: 3, DID: 1}, Filter{})
			if err != nil || n != uint64(flushes*per) {
				t.Fatalf("%s: target %d: count %d (%v), want %d", when, tg, n, err, flushes*per)
			}
		}
	}
	compact := func() {
		if ok, err := db.Compact(ctx); err != nil || !ok {
			t.Fatalf("compaction: %v %v", ok, err)
		}
	}
	for _, step := range []struct {
		name string
		do   func()
		want string
	}{
		{"two flushes", func() { flush(); flush() }, "delta: shuffle+s2; delta: shuffle+s2; "},
		{"a merge of two flushes", compact, "compacted: shuffle+s2; "},
		{"a merge of a merged run and a flush", func() { flush(); compact() }, "compacted: columns; "},
		{"a full compaction", func() {
			flush()
			if ok, err := db.CompactFull(ctx); err != nil || !ok {
				t.Fatalf("full compaction: %v %v", ok, err)
			}
		}, "compacted: columns; "},
	} {
		step.do()
		if got := runs(); got != step.want {
			t.Fatalf("after %s: runs %q, want %q", step.name, got, step.want)
		}
		counts(step.name)
	}
}

// TestFullCompactionRewritesALoneFastRun: a tree whose only run is a
// flush's is rewritten in columns by a full compaction; one already in
// columns is left alone.
func TestFullCompactionRewritesALoneFastRun(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Options{Store: newLocalStore(t), Dir: t.TempDir(), NoGCGrace: true})
	if err != nil {
		t.Fatal(err)
	}
	addTargetLinks(t, db, 50, 4, 0)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	form := func() (bool, RunKind) {
		runs := db.View().Manifest.RunsOf(TreeLinks)
		if len(runs) != 1 {
			t.Fatalf("%d runs", len(runs))
		}
		fast, err := RunInFastForm(ctx, db.cat, runs[0])
		if err != nil {
			t.Fatal(err)
		}
		return fast, runs[0].Kind
	}
	if fast, kind := form(); !fast || kind != RunDelta {
		t.Fatalf("after a flush: fast %v, kind %v", fast, kind)
	}
	if did, err := db.CompactFull(ctx); err != nil || !did {
		t.Fatalf("full compaction of a lone flush: %v %v", did, err)
	}
	if fast, kind := form(); fast || kind != RunCompacted {
		t.Fatalf("after the full compaction: fast %v, kind %v", fast, kind)
	}
	if did, err := db.CompactFull(ctx); err != nil || did {
		t.Fatalf("full compaction of a lone run in columns: %v %v, want nothing done", did, err)
	}
	for tg := range 50 {
		if n, _, err := db.Count(ctx, link.RecordID{RKey: uint64(tg), Collection: 3, DID: 1}, Filter{}); err != nil || n != 4 {
			t.Fatalf("target %d: count %d (%v), want 4", tg, n, err)
		}
	}
}

// addTargetLinks adds per links to each of targets targets (record keys
// 0..targets-1 of collection 3 of DID 1), from sources whose record keys
// are seq*1000+i (i < per) of collection 5 of DIDs 2+i.
func addTargetLinks(t *testing.T, db *DB, targets, per, seq int) {
	t.Helper()
	for tg := range targets {
		for i := range per {
			l := link.Backlink{
				Target: link.RecordID{RKey: uint64(tg), Collection: 3, DID: 1},
				Source: link.RecordID{RKey: uint64(seq*1000 + i), Collection: 5, DID: uint64(2 + i)},
			}
			if err := db.AddBacklink(&l); err != nil {
				t.Fatal(err)
			}
		}
	}
}
