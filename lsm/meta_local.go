package lsm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Mapped metas. A node's catalog (NewCatalogMapped, the default) keeps
// each table's meta on local disk in a layout made to be read in place,
// and maps the file instead of decoding it: a query reads the few filter
// fingerprints, the fences its binary search visits and the dictionary
// entries its frames name, straight from the file. The operating system's
// page cache holds what is hot and drops the rest; the process's heap holds
// a few hundred bytes a table (the header fields, the first and last keys)
// and a copy of every 64th fence, which a binary search over the fences
// visits first so that it reads at most 64 fences (a few pages) of the
// mapping. So the metadata of an index of any size costs local disk, not
// memory (measured in docs/scale.md).
//
// The local layout (little-endian), one file a table, layout 2 (written
// since the dictionary was packed; layout 1 files still map):
//
//	0        P       the bucket meta's bytes up to its dictionary section:
//	                 header, last key, frame entries, filter (doc.go);
//	                 a table that refers to another's dictionary (format
//	                 version 4) keeps its 24-byte reference section here
//	                 too, and has no dictionary arrays (E = 0)
//	D        wd*E    the dictionary's DIDs (D a multiple of 8): wd = 4
//	                 when every DID's value is below 2^31 (bit 31 then
//	                 holds the outline bit, bit 63), else 8 (uint64)
//	D+wd*E   2E      the dictionary's clock ids, uint16
//	R        wr*E    table format version 3: the dictionary's revs, wr
//	                 bytes each (0..8, the fewest that hold them all): 0
//	                 for none, else the entry's rev (1 + the majority rev,
//	                 codec.go) minus B
//	O        8K      the data offset of frames 0, 64, 128, ... (K =
//	                 ceil(frames/64); O a multiple of 8)
//	end-72   72      trailer: magic "EDDYLMT2", P, E, D, O, the bucket
//	                 meta's size, wd | wr<<8, B, xxh3 of every byte
//	                 before its own 8
//
// Layout 1 (magic "EDDYLMT1", a 56-byte trailer without the widths and B)
// has 8-byte DIDs, then (version 3) 8-byte revs, then the clock ids. At a
// billion backfilled links the dictionaries were ~3/4 of the local
// directory, an account paid again in every table it has two links in:
// layout 2 stores an entry in 4 + 2 + ~5 bytes instead of 18.
//
// The whole file is checked (its checksum, the header, every size) when it
// is mapped; the meta it came from was checked whole (DecodeMeta) before
// the file was written.

const (
	localMetaMagic    = "EDDYLMT2"
	localTrailerSize  = 72
	localMetaMagic1   = "EDDYLMT1" // layout 1
	localTrailerSize1 = 56
	offsetEvery       = 64 // frames between two stored data offsets
)

// hostLittleEndian: a mapped dictionary is read as native uint64s.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// isLocalMeta reports whether b is a local meta file (encodeLocalMeta's,
// or layout 1's).
func isLocalMeta(b []byte) bool { return localLayout(b) != 0 }

// localLayout is the local layout of b (1 or 2), 0 if b is not a local
// meta file.
func localLayout(b []byte) int {
	switch {
	case len(b) >= localTrailerSize && string(b[len(b)-localTrailerSize:len(b)-localTrailerSize+8]) == localMetaMagic:
		return 2
	case len(b) >= localTrailerSize1 && string(b[len(b)-localTrailerSize1:len(b)-localTrailerSize1+8]) == localMetaMagic1:
		return 1
	}
	return 0
}

// encodeLocalMeta returns the local file of a meta: meta is the bucket
// object, m its decoding (DecodeMeta's).
func encodeLocalMeta(m *TableMeta, meta []byte) ([]byte, error) {
	// DecodeMeta checked the envelope and the checksum: only the header's
	// section sizes are needed here.
	_, sec, err := decodeMetaHeader(meta, m.version)
	if err != nil {
		return nil, err
	}
	p := sec.hdr + m.Format.Width + int(sec.nFrames)*(frameEntryFixed+m.Format.Width) + int(sec.filterBytes)
	e := m.dict.len()
	if m.dictRef != nil {
		// A reference to another table's dictionary: kept as the bucket
		// meta has it, after the filter, and no arrays.
		p += int(sec.dictBytes)
		e = 0
	}
	nf := len(m.Frames)
	k := (nf + offsetEvery - 1) / offsetEvery
	d := align8(p)
	wd, wr, base := 0, 0, uint64(0)
	if e > 0 {
		wd, wr, base = packWidths(m.dict)
	}
	r := d + (wd+2)*e
	o := align8(r + wr*e)
	out := make([]byte, o+8*k+localTrailerSize)
	copy(out, meta[:p])
	var tmp [8]byte
	for i := range e {
		did, clock := m.dict.account(i)
		if wd == 4 {
			binary.LittleEndian.PutUint32(out[d+4*i:], packDID32(did))
		} else {
			binary.LittleEndian.PutUint64(out[d+8*i:], did)
		}
		binary.LittleEndian.PutUint16(out[d+wd*e+2*i:], uint16(clock))
		if wr > 0 {
			v := m.dict.rev(i)
			if v != 0 {
				v -= base
			}
			binary.LittleEndian.PutUint64(tmp[:], v)
			copy(out[r+wr*i:], tmp[:wr])
		}
	}
	for j := range k {
		binary.LittleEndian.PutUint64(out[o+8*j:], m.Frames[j*offsetEvery].Offset)
	}
	t := out[len(out)-localTrailerSize:]
	copy(t, localMetaMagic)
	binary.LittleEndian.PutUint64(t[8:], uint64(p))
	binary.LittleEndian.PutUint64(t[16:], uint64(e))
	binary.LittleEndian.PutUint64(t[24:], uint64(d))
	binary.LittleEndian.PutUint64(t[32:], uint64(o))
	binary.LittleEndian.PutUint64(t[40:], uint64(len(meta)))
	binary.LittleEndian.PutUint64(t[48:], uint64(wd)|uint64(wr)<<8)
	binary.LittleEndian.PutUint64(t[56:], base)
	binary.LittleEndian.PutUint64(t[64:], xxh3.Hash(out[:len(out)-8]))
	return out, nil
}

// packWidths chooses a non-empty dictionary's layout-2 widths: 4-byte DIDs
// when every one fits, revs in the fewest bytes that hold each one's
// difference from the base (one less than the smallest; none: 0 bytes).
func packWidths(dict *accountDict) (wd, wr int, base uint64) {
	wd = 4
	lo, hi := uint64(0), uint64(0)
	for i := range dict.len() {
		did, _ := dict.account(i)
		if !fitsDID32(did) {
			wd = 8
		}
		if dict.hasRevs() {
			if v := dict.rev(i); v != 0 {
				if lo == 0 || v < lo {
					lo = v
				}
				hi = max(hi, v)
			}
		}
	}
	if lo == 0 {
		return wd, 0, 0
	}
	base = lo - 1
	return wd, (bits.Len64(hi-base) + 7) / 8, base
}

func align8(n int) int { return (n + 7) &^ 7 }

// dictRevsWidth is the bytes a mapped dictionary entry's rev takes in a
// table of format version (none before version 3).
func dictRevsWidth(version int) int {
	if dictHasRevs(version) {
		return 8
	}
	return 0
}

// metaMapping is a mapped local meta file: where the fences are, and the
// data offsets of every 64th frame.
type metaMapping struct {
	region  *mapRegion
	entries []byte // the frame entries (in the mapping)
	entry   int    // bytes per entry
	nFrames int
	offsets []uint64 // data offset of frame 64*j (in the mapping)
	samples []byte   // the fences of frames 0, 64, 128, ... (on the heap)
}

// mapRegion is one mmap; unmapped once the meta owning it is unreachable.
type mapRegion struct{ b []byte }

func (mp *metaMapping) fence(i int) []byte {
	at := i*mp.entry + frameEntryFixed
	return mp.entries[at : at+mp.entry-frameEntryFixed : at+mp.entry-frameEntryFixed]
}

// frameEntry is frame i's entry but its offset (which costs up to 63
// additions).
func (mp *metaMapping) frameEntry(i int) FrameMeta {
	e := mp.entries[i*mp.entry:]
	return FrameMeta{
		Length:    binary.LittleEndian.Uint32(e[0:]),
		Records:   binary.LittleEndian.Uint32(e[4:]),
		Checksum:  binary.LittleEndian.Uint64(e[8:]),
		Continues: e[16]&flagContinues != 0,
		First:     mp.fence(i),
	}
}

func (mp *metaMapping) frame(i int) FrameMeta {
	fr := mp.frameEntry(i)
	j := i / offsetEvery
	off := mp.offsets[j]
	for k := j * offsetEvery; k < i; k++ {
		off += uint64(binary.LittleEndian.Uint32(mp.entries[k*mp.entry:]))
	}
	fr.Offset = off
	return fr
}

// heapBytes is what a mapped meta holds on the heap (the mapping is the
// page cache's).
func (mp *metaMapping) heapBytes() int64 {
	return int64(unsafe.Sizeof(TableMeta{})+unsafe.Sizeof(metaMapping{})) + 2*int64(mp.entry) + int64(len(mp.samples))
}

// mapLocalMeta maps a local meta file and checks it whole. The result reads
// the file in place and unmaps it when it becomes unreachable.
func mapLocalMeta(path string) (*TableMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < localTrailerSize || size > 2*MaxMetaBytes {
		return nil, corruptf("local meta of %d bytes", size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("lsm: mapping %s: %w", path, err)
	}
	region := &mapRegion{b: b}
	m, err := openMapped(region)
	if err != nil {
		_ = syscall.Munmap(b)
		return nil, err
	}
	// The checksum read every page: let them go from this process (the
	// page cache keeps them) so that it holds only what queries touch.
	_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
	runtime.AddCleanup(m, func(r *mapRegion) { _ = syscall.Munmap(r.b) }, region)
	return m, nil
}

// openMapped checks a local meta's bytes and returns the meta reading them.
func openMapped(region *mapRegion) (*TableMeta, error) {
	b := region.b
	layout := localLayout(b)
	if layout == 0 {
		return nil, corruptf("not a local meta file")
	}
	ts := localTrailerSize
	if layout == 1 {
		ts = localTrailerSize1
	}
	t := b[len(b)-ts:]
	if got, want := xxh3.Hash(b[:len(b)-8]), binary.LittleEndian.Uint64(t[ts-8:]); got != want {
		return nil, corruptf("local meta checksum mismatch (%016x, stored %016x)", got, want)
	}
	p := binary.LittleEndian.Uint64(t[8:])
	e := binary.LittleEndian.Uint64(t[16:])
	d := binary.LittleEndian.Uint64(t[24:])
	o := binary.LittleEndian.Uint64(t[32:])
	bucketBytes := binary.LittleEndian.Uint64(t[40:])
	end := uint64(len(b) - ts)
	if p < 10 || p > end || string(b[:8]) != metaMagic {
		return nil, corruptf("local meta: prefix of %d bytes", p)
	}
	version := int(binary.LittleEndian.Uint16(b[8:]))
	if version == 0 || version > TableFormatVersion {
		return nil, corruptf("local meta: version %d", version)
	}
	hdr := metaHeaderSize
	if version >= 2 {
		hdr = metaHeader2Size
	}
	if p < uint64(hdr) {
		return nil, corruptf("local meta: prefix of %d bytes", p)
	}
	m, sec, err := decodeMetaHeader(b[:p], version)
	if err != nil {
		return nil, err
	}
	// The dictionary's widths: layout 1's are fixed by the version.
	wd, wr, rwBase := uint64(8), uint64(dictRevsWidth(version)), uint64(0)
	if layout == 2 {
		widths := binary.LittleEndian.Uint64(t[48:])
		wd, wr, rwBase = widths&0xff, widths>>8, binary.LittleEndian.Uint64(t[56:])
		switch {
		case e > 0 && wd != 4 && wd != 8, e == 0 && wd != 0:
			return nil, corruptf("local meta: DIDs of %d bytes", wd)
		case wr > 8, wr > 0 && !dictHasRevs(version):
			return nil, corruptf("local meta: revs of %d bytes (version %d)", wr, version)
		}
	}
	w := m.Format.Width
	entry := uint64(frameEntryFixed + w)
	filterAt := uint64(hdr) + uint64(w) + sec.nFrames*entry
	k := (sec.nFrames + offsetEvery - 1) / offsetEvery
	var ref []byte // a reference to another table's dictionary (version 4)
	if filterAt+sec.filterBytes+dictRefSize == p && sec.dictBytes == dictRefSize && dictShared(version) {
		ref = b[filterAt+sec.filterBytes : p]
		if !isDictRef(ref) || e != 0 {
			return nil, corruptf("local meta: a dictionary section that is not a reference")
		}
		p -= dictRefSize
	}
	switch {
	case filterAt+sec.filterBytes != p:
		return nil, corruptf("local meta: prefix %d bytes, its header says %d", p, filterAt+sec.filterBytes)
	case e > uint64(maxDictEntries(version)), e > m.Records/2 && !dictShared(version):
		return nil, corruptf("local meta: dictionary of %d entries", e)
	case d%8 != 0 || o%8 != 0 || d < p+uint64(len(ref)) || d > end || o > end || d+(wd+2+wr)*e > o || o+8*k != end:
		return nil, corruptf("local meta: sections at %d, %d, %d bytes", d, o, end)
	case bucketBytes > MaxMetaBytes:
		return nil, corruptf("local meta: bucket meta of %d bytes", bucketBytes)
	case (e > 0 || ref != nil) && m.transform != transformColumns:
		return nil, corruptf("local meta: a dictionary without the columnar transform")
	}
	if m.transform == transformColumns {
		l, ok := columnsLayout(m.Format, version)
		if !ok {
			return nil, corruptf("columnar transform for width %d prefix %d", w, m.Format.PrefixLen)
		}
		m.layout = l
		if !hostLittleEndian {
			return nil, fmt.Errorf("lsm: mapped metas need a little-endian host")
		}
		dict := &accountDict{}
		switch {
		case layout == 1:
			if wr > 0 {
				dict.revs = []uint64{}
			}
			if e > 0 {
				dict.dids = unsafe.Slice((*uint64)(unsafe.Pointer(&b[d])), e)
				if wr > 0 {
					dict.revs = unsafe.Slice((*uint64)(unsafe.Pointer(&b[d+8*e])), e)
				}
				dict.clocks = unsafe.Slice((*uint16)(unsafe.Pointer(&b[d+(8+wr)*e])), e)
			}
		case e == 0:
			if dictHasRevs(version) {
				dict.revs = []uint64{}
			}
		default:
			if wd == 4 {
				dict.dids32 = unsafe.Slice((*uint32)(unsafe.Pointer(&b[d])), e)
			} else {
				dict.dids = unsafe.Slice((*uint64)(unsafe.Pointer(&b[d])), e)
			}
			dict.clocks = unsafe.Slice((*uint16)(unsafe.Pointer(&b[d+wd*e])), e)
			if dictHasRevs(version) {
				// Read 8 bytes at a time: the trailer follows, so an
				// entry's 8 bytes are always in the file.
				r := d + (wd+2)*e
				dict.revsPacked, dict.rw, dict.revBase = b[r:len(b)-8:len(b)-8], int(wr), rwBase
			}
		}
		m.dict = dict
		if ref != nil {
			if err := m.decodeDictRef(ref); err != nil {
				return nil, err
			}
		}
	}
	fb := b[filterAt:p]
	if sz, err := filterSectionSize(fb, m.filterBits); err != nil {
		return nil, err
	} else if sz != sec.filterBytes {
		return nil, corruptf("filter section %d bytes, its header says %d", sec.filterBytes, sz)
	}
	m.filter = mapFilter(fb, m.filterBits, sec.keySeed)
	mp := &metaMapping{
		region:  region,
		entries: b[uint64(hdr)+uint64(w) : filterAt : filterAt],
		entry:   int(entry),
		nFrames: int(sec.nFrames),
	}
	if k > 0 {
		mp.offsets = unsafe.Slice((*uint64)(unsafe.Pointer(&b[o])), k)
	}
	for j := 0; j < mp.nFrames; j += offsetEvery {
		mp.samples = append(mp.samples, mp.fence(j)...)
	}
	m.mapped = mp
	m.MetaBytes = int(bucketBytes)
	m.MaxKey = append([]byte(nil), b[hdr:hdr+w]...)
	m.MinKey = append([]byte(nil), mp.fence(0)...)
	// The last frame's data must end where the header says the data does.
	last := mp.frame(mp.nFrames - 1)
	if last.Offset+uint64(last.Length) != m.DataBytes {
		return nil, corruptf("local meta: frames end at %d, the header says %d", last.Offset+uint64(last.Length), m.DataBytes)
	}
	return m, nil
}
