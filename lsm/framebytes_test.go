package lsm

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// A table's frames hold at most frameBytes(version) of records: 128 KiB
// from format 7, 64 KiB before; a meta of an older version whose frames
// hold more is corrupt (no older build wrote one), and the frames of the
// larger bound read back exactly.
func TestFrameBytesByVersion(t *testing.T) {
	recs := synthBackfillBacklinks(31, 6000)
	w := BacklinkFormat.Width
	for _, v := range []struct{ version, perFrame int }{{6, 1024}, {TableFormatVersion, 2048}} {
		data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{version: v.version})
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		most := 0
		var got []byte
		for i, fr := range m.Frames {
			most = max(most, int(fr.Records))
			b, err := m.DecodeFrame(i, data[fr.Offset:fr.Offset+uint64(fr.Length)], nil)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b...)
		}
		// BuildTable may end a frame up to an eighth early, at a target's
		// boundary.
		if most > v.perFrame || most <= v.perFrame*7/8 {
			t.Fatalf("version %d: frames of up to %d records, want up to %d", v.version, most, v.perFrame)
		}
		if !slices.Equal(got, recs) {
			t.Fatalf("version %d: the frames do not read back", v.version)
		}
		if v.version == TableFormatVersion {
			old := slices.Clone(meta)
			binary.LittleEndian.PutUint16(old[8:], 6)
			binary.LittleEndian.PutUint64(old[len(old)-8:], tblXXH3(old[:len(old)-8]))
			if _, err := DecodeMeta(old); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a version 6 meta with frames of %d records (%d bytes): %v, want corrupt", most, most*w, err)
			}
		}
	}
}
