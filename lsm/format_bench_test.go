package lsm

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
)

// The synthetic workload: what a flush or a compacted table of the backlink
// tree looks like, close enough to the network for compression and filter
// measurements.
//
//   - Authors: did:plc sequence numbers scattered over [1, 40M) (inline), 2%
//     outlined (did:web and friends); activity is Zipf-distributed.
//   - Sources are new records: a TID rkey at the event's time (microseconds
//     since the epoch << 10 | the author's clock id), one of ~30 collections
//     with network-like weights (likes dominate, then follows, posts,
//     reposts, blocks, list items...), each with its own set of paths
//     (a few dozen locations in all).
//   - Targets: posts from a pool with Zipf popularity (s=1.07), their TIDs
//     spread over the week before; whole repositories (follows, blocks,
//     list items, mentions) with Zipf popularity; 4% hashed URL targets,
//     mostly distinct.
//   - sourceRev: the ingestion stamp, increasing with the event (events
//     arrive in time order, a few links per commit).
//
// synthBacklinks returns n links in arrival order (unsorted).
func synthBacklinks(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const (
		nAuthors = 1 << 20
		didSpace = 40_000_000
	)
	authors := make([]uint64, nAuthors)
	clock := make([]uint64, nAuthors)
	for i := range authors {
		if rng.IntN(50) == 0 {
			authors[i] = link.OutlinedBit | uint64(1+rng.IntN(100_000))
		} else {
			authors[i] = uint64(1 + rng.IntN(didSpace))
		}
		clock[i] = uint64(rng.IntN(1024))
	}
	authorZipf := rand.NewZipf(rng, 1.2, 4, nAuthors-1)
	targetAuthorZipf := rand.NewZipf(rng, 1.1, 2, nAuthors-1)

	// Post pool: popular posts get most of the likes.
	nPosts := n/6 + 16
	type post struct {
		rkey uint64
		coll uint64
		did  uint64
	}
	start := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	span := int64(n) * 2000 // ~500 links per second of event time
	posts := make([]post, nPosts)
	for i := range posts {
		a := targetAuthorZipf.Uint64()
		ts := start - rng.Int64N(7*24*3600*1e6) + rng.Int64N(span+1)
		coll := synthCollPost
		switch r := rng.IntN(100); {
		case r < 2:
			coll = synthCollFeedGen
		case r < 3:
			coll = synthCollList
		case r < 4:
			coll = synthCollStarterPack
		}
		posts[i] = post{rkey: synthTID(ts, clock[a]), coll: coll, did: authors[a]}
	}
	postZipf := rand.NewZipf(rng, 1.07, 8, uint64(nPosts-1))

	out := make([]byte, 0, n*link.BacklinkSize)
	var l link.Backlink
	var rec [link.BacklinkSize]byte
	rev := uint64(1_000_000)
	emit := func() {
		l.Put(rec[:])
		out = append(out, rec[:]...)
	}
	for i := 0; len(out) < n*link.BacklinkSize; i++ {
		ts := start + int64(i)*int64(span)/int64(n)
		a := authorZipf.Uint64()
		rev += 1 + uint64(rng.IntN(3))
		l.SourceRev = rev
		k := synthPickCollection(rng)
		l.Source = link.RecordID{RKey: synthTID(ts, clock[a]), Collection: k.coll, DID: authors[a]}
		for _, p := range k.paths {
			if len(out) >= n*link.BacklinkSize {
				break
			}
			switch {
			case rng.IntN(25) == 0:
				// A URL (or a handle at-uri): hashed, nearly always distinct.
				l.Target = link.RecordID{RKey: rng.Uint64(), Collection: link.CollectionHashed, DID: rng.Uint64()}
				l.Location = link.MakeLocation(synthPathURL, false)
			case p.repo:
				l.Target = link.RepoID(authors[targetAuthorZipf.Uint64()])
				l.Location = link.MakeLocation(p.id, false)
			default:
				t := posts[postZipf.Uint64()]
				l.Target = link.RecordID{RKey: t.rkey, Collection: t.coll, DID: t.did}
				l.Location = link.MakeLocation(p.id, p.strong)
			}
			emit()
		}
	}
	return out[:n*link.BacklinkSize]
}

// synthSortedBacklinks returns n distinct backlinks, sorted.
func synthSortedBacklinks(seed uint64, n int) []byte {
	recs := synthBacklinks(seed, n)
	SortRecords(recs, link.BacklinkSize)
	return synthDedup(recs, link.BacklinkSize)
}

// synthRevocations returns about n distinct revocations, sorted: deletes of
// recent records (likes and follows mostly), some repository resets.
func synthRevocations(seed uint64, n int) []byte {
	links := synthBacklinks(seed, n)
	out := make([]byte, 0, n*link.RevocationSize)
	var v link.Revocation
	var rec [link.RevocationSize]byte
	for i := range n {
		l := link.GetBacklink(links[i*link.BacklinkSize:])
		v.Source = l.Source
		if i%50 == 0 {
			v.Source = l.Source.Repo()
		}
		v.Rev = l.SourceRev + 1000 + uint64(i%977)
		v.Put(rec[:])
		out = append(out, rec[:]...)
	}
	SortRecords(out, link.RevocationSize)
	return synthDedup(out, link.RevocationSize)
}

func synthDedup(recs []byte, w int) []byte {
	out := recs[:0]
	var last []byte
	for off := 0; off < len(recs); off += w {
		r := recs[off : off+w]
		if last != nil && string(last) == string(r) {
			continue
		}
		out = append(out, r...)
		last = out[len(out)-w:]
	}
	return out
}

func synthTID(micros int64, clockID uint64) uint64 {
	return uint64(micros)<<10 | clockID&1023
}

// Outline counters of the synthetic collections and paths.
const (
	synthCollPost = link.CollectionFirst + iota
	synthCollLike
	synthCollRepost
	synthCollFollow
	synthCollBlock
	synthCollListItem
	synthCollList
	synthCollFeedGen
	synthCollStarterPack
	synthCollThreadgate
	synthCollPostgate
	synthCollListblock
	synthCollOther // and up: ~20 rarely used lexicons
)

const (
	synthPathURL = 1 + iota
	synthPathSubject
	synthPathSubjectURI
	synthPathReplyParent
	synthPathReplyRoot
	synthPathEmbedRecord
	synthPathEmbedRecordWithMedia
	synthPathFacetMention
	synthPathListItemList
	synthPathThreadgatePost
	synthPathPostgatePost
	synthPathOther // and up
)

type synthPath struct {
	id     uint64
	strong bool
	repo   bool // the target is a whole repository
}

type synthKind struct {
	coll   uint64
	weight int
	paths  []synthPath
}

var synthKinds = func() []synthKind {
	ks := []synthKind{
		{synthCollLike, 450, []synthPath{{id: synthPathSubjectURI, strong: true}}},
		{synthCollFollow, 160, []synthPath{{id: synthPathSubject, repo: true}}},
		{synthCollRepost, 90, []synthPath{{id: synthPathSubjectURI, strong: true}}},
		{synthCollPost, 120, []synthPath{{id: synthPathReplyParent, strong: true}, {id: synthPathReplyRoot, strong: true}}},
		{synthCollPost, 30, []synthPath{{id: synthPathEmbedRecord, strong: true}}},
		{synthCollPost, 10, []synthPath{{id: synthPathEmbedRecordWithMedia, strong: true}, {id: synthPathFacetMention, repo: true}}},
		{synthCollPost, 15, []synthPath{{id: synthPathFacetMention, repo: true}}},
		{synthCollBlock, 40, []synthPath{{id: synthPathSubject, repo: true}}},
		{synthCollListItem, 30, []synthPath{{id: synthPathSubject, repo: true}, {id: synthPathListItemList}}},
		{synthCollThreadgate, 8, []synthPath{{id: synthPathThreadgatePost}}},
		{synthCollPostgate, 4, []synthPath{{id: synthPathPostgatePost}}},
		{synthCollListblock, 3, []synthPath{{id: synthPathSubject}}},
	}
	for i := range 20 {
		ks = append(ks, synthKind{synthCollOther + uint64(i), 2, []synthPath{{id: synthPathOther + uint64(i%14), strong: i%2 == 0}}})
	}
	return ks
}()

var synthWeightTotal = func() int {
	t := 0
	for _, k := range synthKinds {
		t += k.weight
	}
	return t
}()

func synthPickCollection(rng *rand.Rand) *synthKind {
	r := rng.IntN(synthWeightTotal)
	for i := range synthKinds {
		r -= synthKinds[i].weight
		if r < 0 {
			return &synthKinds[i]
		}
	}
	return &synthKinds[len(synthKinds)-1]
}

// BenchmarkSortRecords sorts 2M synthetic backlinks (128 MB): in arrival
// order (a memtable's order: each target's links nearly in source order)
// and shuffled (no order at all).
func BenchmarkSortRecords(b *testing.B) {
	const n = 2 << 20
	arrival := synthBacklinks(1, n)
	shuffled := slices.Clone(arrival)
	var tmp [64]byte
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) {
		copy(tmp[:], shuffled[i*64:])
		copy(shuffled[i*64:i*64+64], shuffled[j*64:j*64+64])
		copy(shuffled[j*64:j*64+64], tmp[:])
	})
	for _, c := range []struct {
		name string
		recs []byte
	}{{"arrival", arrival}, {"shuffled", shuffled}} {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, len(c.recs))
			copy(buf, c.recs)
			SortRecords(buf, link.BacklinkSize) // warm the scratch
			b.SetBytes(int64(len(c.recs)))
			b.ResetTimer()
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				copy(buf, c.recs)
				c0 := processCPU()
				b.StartTimer()
				SortRecords(buf, link.BacklinkSize)
				b.StopTimer()
				cpu += processCPU() - c0
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/sort")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "cpu-ms/sort")
		})
	}
}

// processCPU is the process's CPU time (user and system). With -cpu 1 it is
// the benchmark's own time plus the GC's, and unlike wall time it does not
// count other tenants of a shared machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// -lsm.measure runs the format measurements (compression options, filters):
//
//	go test ./lsm -run 'TestMeasure' -v -lsm.measure
var lsmMeasure = flag.Bool("lsm.measure", false, "run the table format measurements")

// synthCorpus caches the sorted synthetic workloads (generating 1M links
// takes a while).
var synthCorpus = sync.OnceValues(func() (links, revs []byte) {
	return synthSortedBacklinks(1, 1<<20), synthRevocations(2, 1<<19)
})

// TestMeasureFrameCodecs prints, for each frame transform and zstd level,
// the compressed bytes per record and the single-core encode and decode
// speeds, on the synthetic backlinks and revocations.
func TestMeasureFrameCodecs(t *testing.T) {
	if !*lsmMeasure {
		t.Skip("-lsm.measure not set")
	}
	links, revs := synthCorpus()
	for _, tc := range []struct {
		name string
		f    Format
		recs []byte
	}{{"backlinks", BacklinkFormat, links}, {"revocations", RevocationFormat, revs}} {
		n := len(tc.recs) / tc.f.Width
		t.Logf("%s: %d records (%d MB)", tc.name, n, len(tc.recs)>>20)
		t.Logf("%-14s %5s %10s %10s %12s %12s", "transform", "level", "B/record", "ratio", "encode MB/s", "decode us/64K")
		for tr := range frameTransform(transformColumns) {
			for _, level := range []int{1, 3, 7, 11} {
				enc, err := encoderFor(level)
				if err != nil {
					t.Fatal(err)
				}
				dec, _ := frameDecoder()
				w := tc.f.Width
				per := FrameBytesMax / w
				tmp := make([]byte, FrameBytesMax)
				var frames [][]byte
				total := 0
				encBest := time.Duration(1 << 62)
				for r := range 3 {
					frames = frames[:0]
					total = 0
					start := time.Now()
					for s := 0; s < n; s += per {
						raw := tc.recs[s*w : min(s+per, n)*w]
						encodeTransform(tr, tmp[:len(raw)], raw, w)
						c := enc.EncodeAll(tmp[:len(raw)], nil)
						total += len(c)
						frames = append(frames, c)
					}
					encBest = min(encBest, time.Since(start))
					if level == 11 && r == 0 {
						break // slow; one pass is enough
					}
				}
				encSecs := encBest.Seconds()
				out := make([]byte, FrameBytesMax)
				// Decode: zstd + inverse transform, the work of DecodeFrame
				// minus its checks; best of three passes.
				best := time.Duration(1 << 62)
				for range 3 {
					start := time.Now()
					for i, c := range frames {
						raw := tc.recs[i*per*w : min((i+1)*per, n)*w]
						d, err := dec.DecodeAll(c, tmp[:0:len(raw)])
						if err != nil {
							t.Fatal(err)
						}
						decodeTransform(tr, out[:len(raw)], d, w)
					}
					best = min(best, time.Since(start))
				}
				// Check one frame round trip.
				d, _ := dec.DecodeAll(frames[0], nil)
				decodeTransform(tr, out[:len(d)], d, w)
				if !bytes.Equal(out[:len(d)], tc.recs[:len(d)]) {
					t.Fatalf("%s %s: round trip differs", tc.name, tr)
				}
				t.Logf("%-14s %5d %10.2f %10.2f %12.0f %12.1f", tr, level, float64(total)/float64(n),
					float64(len(tc.recs))/float64(total), float64(len(tc.recs))/encSecs/1e6,
					float64(best.Microseconds())/float64(len(frames)))
			}
		}
		// The columnar codec (no zstd level: huff0 per column): data and
		// the meta's dictionary, BuildTable's speed (with its filter and
		// self-check), DecodeFrame's (with its checks).
		start := time.Now()
		data, meta, err := BuildTable(tc.f, tc.recs, TableOptions{})
		if err != nil {
			t.Fatal(err)
		}
		encSecs := time.Since(start).Seconds()
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		best := time.Duration(1 << 62)
		var buf []byte
		for range 3 {
			start := time.Now()
			for i := range m.NumFrames() {
				off, l := m.ByteRange(i, i)
				if buf, err = m.DecodeFrame(i, data[off:off+l], buf); err != nil {
					t.Fatal(err)
				}
			}
			best = min(best, time.Since(start))
		}
		dict := binary.LittleEndian.Uint32(meta[64:])
		t.Logf("%-14s %5s %10.2f %10.2f %12.0f %12.1f  (+ dictionary %.2f B/record in the meta, %d accounts)", transformColumns, "-",
			float64(len(data))/float64(n), float64(len(tc.recs))/float64(len(data)), float64(len(tc.recs))/encSecs/1e6,
			float64(best.Microseconds())/float64(m.NumFrames()), float64(dict)/float64(n), m.dict.len())
	}
}

// TestMeasureFilters prints the meta size and the measured false-positive
// rate of 8- and 16-bit filters over the synthetic backlinks.
func TestMeasureFilters(t *testing.T) {
	if !*lsmMeasure {
		t.Skip("-lsm.measure not set")
	}
	links, revs := synthCorpus()
	for _, tc := range []struct {
		name string
		f    Format
		recs []byte
	}{{"backlinks", BacklinkFormat, links}, {"revocations", RevocationFormat, revs}} {
		for _, bits := range []int{8, 16} {
			data, meta, err := BuildTable(tc.f, tc.recs, TableOptions{FilterBits: bits})
			if err != nil {
				t.Fatal(err)
			}
			m, err := DecodeMeta(meta)
			if err != nil {
				t.Fatal(err)
			}
			// Absent prefixes shaped like real ones: present prefixes with
			// the rkey or the did perturbed.
			rng := rand.New(rand.NewPCG(9, 9))
			w, p := tc.f.Width, tc.f.PrefixLen
			n := len(tc.recs) / w
			fp, tries := 0, 0
			probe := make([]byte, p)
			for range 2_000_000 {
				copy(probe, tc.recs[rng.IntN(n)*w:])
				binary.BigEndian.PutUint64(probe[rng.IntN(3)*8:], rng.Uint64())
				if len(tblScanPrefixSorted(tc.recs, w, probe)) > 0 {
					continue
				}
				tries++
				if m.MayContain(probe) {
					fp++
				}
			}
			records := float64(m.Records)
			t.Logf("%s filter=%d: %d records, %d prefixes, %d frames; data %.2f B/record; meta %d B = %.3f B/record (filter %d B = %.2f bits/prefix, fences %.3f B/record); false positives %d/%d = %.4f%%",
				tc.name, bits, m.Records, m.Prefixes, m.NumFrames(), float64(len(data))/records,
				len(meta), float64(len(meta))/records, m.FilterBytes(), float64(m.FilterBytes()*8)/float64(m.Prefixes),
				float64(m.NumFrames()*(frameEntryFixed+w))/records, fp, tries, 100*float64(fp)/float64(tries))
		}
	}
}

// tblScanPrefixSorted returns the records of sorted recs with a prefix, by
// binary search.
func tblScanPrefixSorted(recs []byte, w int, prefix []byte) []byte {
	n := len(recs) / w
	lo, hi := 0, n
	for lo < hi {
		mid := (lo + hi) / 2
		if bytes.Compare(recs[mid*w:mid*w+len(prefix)], prefix) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	end := lo
	for end < n && bytes.HasPrefix(recs[end*w:], prefix) {
		end++
	}
	return recs[lo*w : end*w]
}

// BenchmarkBuildTable builds a table of 1M synthetic backlinks (64 MiB):
// frames, filter, meta and the self-check (which decodes every frame),
// in columns and in the fast form of a flush (TableOptions.Fast).
func BenchmarkBuildTable(b *testing.B) {
	links, _ := synthCorpus()
	n := len(links) / 64
	for _, c := range []struct {
		name string
		opt  TableOptions
	}{{"columns", TableOptions{}}, {"fast", TableOptions{Fast: true}}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(links)))
			c0 := processCPU()
			var data, meta []byte
			for range b.N {
				var err error
				data, meta, err = BuildTable(BacklinkFormat, links, c.opt)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "links/s")
			b.ReportMetric(float64(n)*float64(b.N)/(processCPU()-c0).Seconds(), "links/cpu-s")
			b.ReportMetric(float64(len(data))/float64(n), "B/link")
			b.ReportMetric(float64(len(meta))/float64(n), "metaB/link")
		})
	}
}

// BenchmarkDecodeFrame decodes one full frame of backlinks (FrameBytesMax:
// 2048 links), checks included, of a columnar table and of a fast one
// (a flush's): what a warm query pays per frame.
func BenchmarkDecodeFrame(b *testing.B) {
	links, _ := synthCorpus()
	recs := links[:64*100_000]
	for _, c := range []struct {
		name string
		opt  TableOptions
	}{{"columns", TableOptions{}}, {"fast", TableOptions{Fast: true}}} {
		b.Run(c.name, func(b *testing.B) {
			data, meta, err := BuildTable(BacklinkFormat, recs, c.opt)
			if err != nil {
				b.Fatal(err)
			}
			m, err := DecodeMeta(meta)
			if err != nil {
				b.Fatal(err)
			}
			// Pick full frames.
			var full []int
			for i, fr := range m.Frames {
				if fr.Records == FrameBytesMax/64 {
					full = append(full, i)
				}
			}
			if len(full) == 0 {
				b.Fatal("no full frames")
			}
			dst := make([]byte, FrameBytesMax)
			b.SetBytes(FrameBytesMax)
			b.ResetTimer()
			c0 := processCPU()
			for k := range b.N {
				i := full[k%len(full)]
				off, n := m.ByteRange(i, i)
				var err error
				dst, err = m.DecodeFrame(i, data[off:off+n], dst)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/frame")
			b.ReportMetric(float64((processCPU()-c0).Microseconds())/float64(b.N), "cpu-us/frame")
		})
	}
}

// BenchmarkMayContain asks the filter of a 1M-link table about absent
// targets.
func BenchmarkMayContain(b *testing.B) {
	links, _ := synthCorpus()
	_, meta, err := BuildTable(BacklinkFormat, links, TableOptions{})
	if err != nil {
		b.Fatal(err)
	}
	m, err := DecodeMeta(meta)
	if err != nil {
		b.Fatal(err)
	}
	var p [24]byte
	hits := 0
	b.ResetTimer()
	for i := range b.N {
		binary.BigEndian.PutUint64(p[16:], uint64(i))
		if m.MayContain(p[:]) {
			hits++
		}
	}
	_ = hits
}
