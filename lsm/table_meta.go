package lsm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/zeebo/xxh3"
)

// The meta object (the package documentation gives its layout): written by
// tableBuild.encodeMeta, read by DecodeMeta.

// encodeMeta returns the meta object of the table built (b.frames, over a
// data object of dataBytes).
func (b *tableBuild) encodeMeta(dataBytes int) ([]byte, error) {
	w, p, n := b.f.Width, b.f.PrefixLen, b.n
	frames, opt := b.frames, b.opt
	size := metaHeader2Size + w + len(frames)*(frameEntryFixed+w) + metaTrailerSize
	meta := make([]byte, metaHeader2Size, size+filterHeaderSize+len(b.keys)*5/2+b.dict.len()*6+64)
	copy(meta, metaMagic)
	version := uint16(opt.writeVersion())
	binary.LittleEndian.PutUint16(meta[8:], version)
	binary.LittleEndian.PutUint16(meta[10:], uint16(w))
	binary.LittleEndian.PutUint16(meta[12:], uint16(p))
	meta[14] = byte(b.transform)
	meta[15] = byte(b.filterBits)
	meta[16] = opt.ShardBits
	binary.LittleEndian.PutUint32(meta[20:], opt.Shard)
	binary.LittleEndian.PutUint64(meta[24:], uint64(n))
	binary.LittleEndian.PutUint64(meta[32:], uint64(dataBytes))
	binary.LittleEndian.PutUint64(meta[40:], uint64(len(b.keys)))
	binary.LittleEndian.PutUint64(meta[48:], b.seed)
	binary.LittleEndian.PutUint32(meta[56:], uint32(len(frames)))
	meta = append(meta, b.lastRecord()...)
	for k, fr := range frames {
		meta = binary.LittleEndian.AppendUint32(meta, uint32(fr.length))
		meta = binary.LittleEndian.AppendUint32(meta, uint32(fr.n))
		meta = binary.LittleEndian.AppendUint64(meta, fr.sum)
		var flags byte
		if fr.continues {
			flags |= flagContinues
		}
		meta = append(meta, flags)
		meta = append(meta, b.fence(k, fr)...)
	}
	filterStart := len(meta)
	meta, err := buildFilter(meta, b.keys, b.filterBits)
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(meta[60:], uint32(len(meta)-filterStart))
	if b.transform == transformColumns {
		dictStart := len(meta)
		if opt.dictOwner != nil {
			meta = appendDictRef(meta, opt.dictOwner, b.dict.len())
		} else {
			meta = appendDict(meta, b.dict, b.enc)
		}
		binary.LittleEndian.PutUint32(meta[64:], uint32(len(meta)-dictStart))
	}
	meta = binary.LittleEndian.AppendUint64(meta, xxh3.Hash(meta))
	if len(meta) > MaxMetaBytes {
		return nil, fmt.Errorf("lsm: BuildTable: meta of %d bytes exceeds MaxMetaBytes", len(meta))
	}
	return meta, nil
}

// DecodeMeta decodes a meta object. It verifies the magic number, the
// version (a newer one is ErrVersion), the trailing checksum and the
// structure; anything inconsistent is ErrCorrupt. It never panics, and
// allocates in proportion to len(b) only. The result refers to b (an 8-bit
// fuse filter's fingerprints and a blocked filter's blocks are read from
// it in place): b must not change while the result is used.
func DecodeMeta(b []byte) (*TableMeta, error) {
	version, err := checkMetaEnvelope(b)
	if err != nil {
		return nil, err
	}
	m, sec, err := decodeMetaHeader(b, version)
	if err != nil {
		return nil, err
	}
	w, p := m.Format.Width, m.Format.PrefixLen
	hdr := sec.hdr
	entry := uint64(frameEntryFixed + w)
	// Every term is bounded (nFrames < 2^32, entry < 2^9, filterBytes <
	// 2^32), so the sum cannot overflow.
	if want := uint64(hdr) + uint64(w) + sec.nFrames*entry + sec.filterBytes + sec.dictBytes + metaTrailerSize; want != uint64(len(b)) {
		return nil, corruptf("size %d, fields say %d", len(b), want)
	}
	filterAt := hdr + w + int(sec.nFrames)*int(entry)
	dictAt := filterAt + int(sec.filterBytes)
	fb := b[filterAt:dictAt]
	if err := m.decodeDictSection(b[dictAt : dictAt+int(sec.dictBytes)]); err != nil {
		return nil, err
	}
	if sz, err := filterSectionSize(fb, m.filterBits); err != nil {
		return nil, err
	} else if sz != sec.filterBytes {
		return nil, corruptf("filter section %d bytes, its header says %d", sec.filterBytes, sz)
	}
	if err := m.decodeFrameEntries(b[hdr:filterAt], int(sec.nFrames)); err != nil {
		return nil, err
	}
	m.MinKey = m.Frames[0].First
	last := m.Frames[len(m.Frames)-1]
	if c := compareRecords(last.First, m.MaxKey); c > 0 || (c == 0 && last.Records != 1) || (c < 0 && last.Records == 1) {
		return nil, corruptf("last key %x does not fit the last frame (fence %x, %d records)", m.MaxKey, last.First, last.Records)
	}
	m.filter = decodeFilter(fb, m.filterBits, sec.keySeed)
	for i := range m.Frames {
		if !m.MayContain(m.Frames[i].First[:p]) {
			return nil, corruptf("filter lacks frame %d's fence prefix", i)
		}
	}
	if !m.MayContain(m.MaxKey[:p]) {
		return nil, corruptf("filter lacks the last key's prefix")
	}
	return m, nil
}

// checkMetaEnvelope checks what comes before every other field of a meta:
// the magic, the version (a newer one is ErrVersion), the size bounds and
// the trailing checksum. It returns the version.
func checkMetaEnvelope(b []byte) (version int, err error) {
	// Magic and version first: a newer version may change everything after.
	if len(b) < 10 {
		return 0, corruptf("%d bytes is too short", len(b))
	}
	if string(b[:8]) != metaMagic {
		return 0, corruptf("bad magic %q", b[:8])
	}
	switch v := binary.LittleEndian.Uint16(b[8:]); {
	case v == 0:
		return 0, corruptf("format version 0")
	case v > TableFormatVersion:
		return 0, fmt.Errorf("%w: meta has version %d, this binary reads up to %d", ErrVersion, v, TableFormatVersion)
	}
	version = int(binary.LittleEndian.Uint16(b[8:]))
	hdr := metaHeaderSize
	if version >= 2 {
		hdr = metaHeader2Size
	}
	if len(b) < hdr+1+frameEntryFixed+1+filterHeaderSize+metaTrailerSize {
		return 0, corruptf("%d bytes is too short", len(b))
	}
	if len(b) > MaxMetaBytes {
		return 0, corruptf("%d bytes exceeds MaxMetaBytes", len(b))
	}
	body := b[:len(b)-metaTrailerSize]
	if got, want := xxh3.Hash(body), binary.LittleEndian.Uint64(b[len(body):]); got != want {
		return 0, corruptf("checksum mismatch (%016x, stored %016x)", got, want)
	}
	return version, nil
}

// metaSections are what a meta's header says of the sections after it.
type metaSections struct {
	hdr         int // the header's size
	keySeed     uint64
	nFrames     uint64
	filterBytes uint64
	dictBytes   uint64
}

// decodeMetaHeader decodes and checks the header fields of a meta whose
// envelope checkMetaEnvelope accepted.
func decodeMetaHeader(b []byte, version int) (*TableMeta, metaSections, error) {
	sec := metaSections{hdr: metaHeaderSize}
	if version >= 2 {
		sec.hdr = metaHeader2Size
	}
	w := int(binary.LittleEndian.Uint16(b[10:]))
	p := int(binary.LittleEndian.Uint16(b[12:]))
	m := &TableMeta{
		Format:    Format{Width: w, PrefixLen: p},
		transform: frameTransform(b[14]),
		ShardBits: b[16],
		Shard:     binary.LittleEndian.Uint32(b[20:]),
		Records:   binary.LittleEndian.Uint64(b[24:]),
		DataBytes: binary.LittleEndian.Uint64(b[32:]),
		Prefixes:  binary.LittleEndian.Uint64(b[40:]),
		MetaBytes: len(b),
		version:   version,
	}
	if version >= 2 {
		sec.dictBytes = uint64(binary.LittleEndian.Uint32(b[64:]))
		if r := binary.LittleEndian.Uint32(b[68:]); r != 0 {
			return nil, sec, corruptf("reserved header bytes %08x", r)
		}
	}
	filterBits := int(b[15])
	m.filterBits = filterBits
	sec.keySeed = binary.LittleEndian.Uint64(b[48:])
	sec.nFrames = uint64(binary.LittleEndian.Uint32(b[56:]))
	sec.filterBytes = uint64(binary.LittleEndian.Uint32(b[60:]))
	nFrames := sec.nFrames
	switch {
	case m.Format.check() != nil:
		return nil, sec, corruptf("width %d prefix %d", w, p)
	case m.transform >= transformCount, m.transform == transformColumns && version < 2,
		m.transform == transformShuffleS2 && version < 11:
		return nil, sec, corruptf("unknown frame transform %d", m.transform)
	case filterBits != FilterBits8 && filterBits != FilterBits16 && (filterBits != FilterBlocked || version < 12):
		return nil, sec, corruptf("filter bits %d", filterBits)
	case b[17] != 0 || b[18] != 0 || b[19] != 0:
		return nil, sec, corruptf("reserved header bytes %x", b[17:20])
	case m.ShardBits > MaxShardBits || uint64(m.Shard) >= 1<<m.ShardBits:
		return nil, sec, corruptf("shard %d of %d bits", m.Shard, m.ShardBits)
	case m.Records == 0 || m.Records > MaxTableRecords:
		return nil, sec, corruptf("%d records", m.Records)
	case m.Prefixes == 0 || m.Prefixes > m.Records:
		return nil, sec, corruptf("%d prefixes for %d records", m.Prefixes, m.Records)
	case nFrames == 0 || nFrames > m.Records:
		return nil, sec, corruptf("%d frames for %d records", nFrames, m.Records)
	}
	return m, sec, nil
}

// decodeDictSection decodes the dictionary section d of a columnar
// table's meta (and checks that any other table's is empty).
func (m *TableMeta) decodeDictSection(d []byte) error {
	if m.transform != transformColumns {
		if len(d) != 0 {
			return corruptf("dictionary section without the columnar transform")
		}
		return nil
	}
	l, ok := columnsLayout(m.Format, m.version)
	if !ok {
		return corruptf("columnar transform for width %d prefix %d", m.Format.Width, m.Format.PrefixLen)
	}
	m.layout = l
	if isDictRef(d) {
		return m.decodeDictRef(d)
	}
	dict, err := decodeDict(d, m.version)
	if err != nil {
		return err
	}
	if uint64(dict.len()) > m.Records/2 && !dictShared(m.version) {
		return corruptf("dictionary of %d entries for %d records", dict.len(), m.Records)
	}
	m.dict = dict
	return nil
}

// A dictionary section of format version 4 may instead refer to the
// dictionary of another table of the same run (a compaction's output
// shares one: an account is then stored once a run, not once in every
// table it has two records in):
//
//	0   4   0xffffffff (an own dictionary's entry count is at most
//	        maxDictEntries(version))
//	4   16  the ID (binary) of the table whose meta holds the dictionary
//	20  4   that dictionary's entries
const (
	dictRefMark = 0xffffffff
	dictRefSize = 24
)

// dictShared reports whether tables of format version share dictionaries
// (version 4 on): a dictionary may then hold more entries than half its
// own table's records.
func dictShared(version int) bool { return version >= 4 }

func appendDictRef(dst, owner []byte, entries int) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, dictRefMark)
	dst = append(dst, owner...)
	return binary.LittleEndian.AppendUint32(dst, uint32(entries))
}

// isDictRef reports whether a dictionary section is a reference.
func isDictRef(d []byte) bool {
	return len(d) >= 4 && binary.LittleEndian.Uint32(d) == dictRefMark
}

// decodeDictRef decodes a reference section (isDictRef).
func (m *TableMeta) decodeDictRef(d []byte) error {
	switch {
	case !dictShared(m.version):
		return corruptf("a dictionary reference in a table of format version %d", m.version)
	case len(d) != dictRefSize:
		return corruptf("dictionary reference of %d bytes", len(d))
	}
	e := binary.LittleEndian.Uint32(d[20:])
	if e > uint32(maxDictEntries(m.version)) {
		return corruptf("dictionary reference to %d entries (version %d)", e, m.version)
	}
	m.dictRef, m.dictRefEntries, m.dict = append([]byte(nil), d[4:20]...), e, nil
	return nil
}

// DictTable returns the ID of the table of the same run whose meta holds
// the dictionary this table's frames use, or "" when it holds its own.
// Its frames decode once UseDictOf was given that table's meta (the
// catalog does it when it loads a meta).
func (m *TableMeta) DictTable() string {
	if m.dictRef == nil {
		return ""
	}
	return hex.EncodeToString(m.dictRef)
}

// UseDictOf resolves m's dictionary reference (DictTable) to owner's
// dictionary. It must be called before m is shared between goroutines. A
// meta that is not the one named, or whose dictionary is not the one m
// was written with, is ErrCorrupt.
func (m *TableMeta) UseDictOf(owner *TableMeta) error {
	if m.dictRef == nil {
		return fmt.Errorf("lsm: table %s holds its own dictionary", m.Name)
	}
	return m.useDict(owner)
}

func (m *TableMeta) useDict(owner *TableMeta) error {
	switch {
	case owner.dictRef != nil:
		return corruptf("the dictionary's table refers to another's")
	case owner.transform != transformColumns || owner.dict == nil:
		return corruptf("the dictionary's table has none")
	case owner.layout != m.layout || owner.version != m.version:
		return corruptf("the dictionary's table is of another format")
	case owner.dict.len() != int(m.dictRefEntries):
		return corruptf("the dictionary's table has %d entries, the reference says %d", owner.dict.len(), m.dictRefEntries)
	}
	m.dict, m.dictOwner = owner.dict, owner
	return nil
}

// decodeFrameEntries decodes the last key and the frame entries (b, from
// the end of the header to the filter section) of nFrames frames, and
// checks each entry, the fences' order and the totals against the header.
func (m *TableMeta) decodeFrameEntries(b []byte, nFrames int) error {
	w, p := m.Format.Width, m.Format.PrefixLen
	entry := frameEntryFixed + w
	// Fences and the last key share one buffer; nothing refers to b.
	keys := make([]byte, (nFrames+1)*w)
	m.MaxKey = keys[:w:w]
	copy(m.MaxKey, b)
	m.Frames = make([]FrameMeta, nFrames)
	perFrame := uint32(frameBytes(m.version) / w)
	maxLength := uint32(frameBytes(m.version) + frameSlack)
	var offset, records uint64
	at := w
	for i := range m.Frames {
		e := b[at : at+entry]
		at += entry
		fr := &m.Frames[i]
		fr.Offset = offset
		fr.Length = binary.LittleEndian.Uint32(e[0:])
		fr.Records = binary.LittleEndian.Uint32(e[4:])
		fr.Checksum = binary.LittleEndian.Uint64(e[8:])
		flags := e[16]
		fr.Continues = flags&flagContinues != 0
		fr.First = keys[(i+1)*w : (i+2)*w : (i+2)*w]
		copy(fr.First, e[frameEntryFixed:])
		switch {
		case fr.Length == 0 || fr.Length > maxLength:
			return corruptf("frame %d length %d", i, fr.Length)
		case fr.Records == 0 || fr.Records > perFrame:
			return corruptf("frame %d holds %d records", i, fr.Records)
		case flags&^flagContinues != 0:
			return corruptf("frame %d flags %#x", i, flags)
		}
		if i == 0 {
			if fr.Continues {
				return corruptf("frame 0 continues")
			}
		} else {
			prev := m.Frames[i-1].First
			if compareRecords(prev, fr.First) >= 0 {
				return corruptf("frame %d fence not above frame %d's", i, i-1)
			}
			if bytes.Equal(prev[:p], fr.First[:p]) && !fr.Continues {
				return corruptf("frame %d shares its fence prefix with frame %d but does not continue", i, i-1)
			}
		}
		offset += uint64(fr.Length)
		records += uint64(fr.Records)
	}
	if offset != m.DataBytes {
		return corruptf("frames hold %d bytes, the header says %d", offset, m.DataBytes)
	}
	if records != m.Records {
		return corruptf("frames hold %d records, the header says %d", records, m.Records)
	}
	return nil
}
