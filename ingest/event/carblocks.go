package event

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ipfs/go-cid"
)

// CAR v1 container parsing shared by the firehose (a commit's "blocks"
// field is a CAR slice) and whole-repository CAR files.

// maxCIDDigestLen bounds the multihash digest length accepted in a CID.
const maxCIDDigestLen = 128

// cidLen returns the length of the binary CID at the start of b.
// CIDv0 (a bare sha2-256 multihash) and CIDv1 are recognised.
func cidLen(b []byte) (int, error) {
	if len(b) >= 2 && b[0] == 0x12 && b[1] == 0x20 {
		if len(b) < 34 {
			return 0, errors.New("car: truncated CIDv0")
		}
		return 34, nil
	}
	off := 0
	// version, codec, multihash code, digest length
	var vals [4]uint64
	for i := range vals {
		v, n := binary.Uvarint(b[off:])
		if n <= 0 {
			return 0, errors.New("car: bad varint in CID")
		}
		vals[i] = v
		off += n
	}
	if vals[0] != 1 {
		return 0, fmt.Errorf("car: unsupported CID version %d", vals[0])
	}
	if vals[3] > maxCIDDigestLen || vals[3] > uint64(len(b)-off) {
		return 0, errors.New("car: bad CID digest length")
	}
	return off + int(vals[3]), nil
}

// cidString renders a binary CID in its canonical string form (base32 for
// CIDv1, base58 for CIDv0), or returns "" if it is not a valid CID.
func cidString(b []byte) string {
	c, err := cid.Cast(b)
	if err != nil {
		return ""
	}
	return c.String()
}

// carHeader parses the CAR v1 header at the start of b and returns the
// root CIDs (binary, aliasing b) and the offset of the first block.
func carHeader(b []byte) (roots [][]byte, off int, err error) {
	hl, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, 0, errors.New("car: bad header length varint")
	}
	if hl == 0 || hl > uint64(len(b)-n) {
		return nil, 0, errors.New("car: bad header length")
	}
	hdr := b[n : n+int(hl)]
	off = n + int(hl)
	if err := scanOne(hdr); err != nil {
		return nil, 0, fmt.Errorf("car header: %w", err)
	}
	r := cborReader{b: hdr}
	nf, err := r.mapLen()
	if err != nil {
		return nil, 0, fmt.Errorf("car header: %w", err)
	}
	version := int64(-1)
	for i := 0; i < nf; i++ {
		k, err := r.text()
		if err != nil {
			return nil, 0, fmt.Errorf("car header: %w", err)
		}
		switch string(k) {
		case "version":
			if version, err = r.int(); err != nil {
				return nil, 0, fmt.Errorf("car header version: %w", err)
			}
		case "roots":
			na, err := r.arrayLen()
			if err != nil {
				return nil, 0, fmt.Errorf("car header roots: %w", err)
			}
			roots = make([][]byte, 0, min(na, 4))
			for j := 0; j < na; j++ {
				c, err := r.link()
				if err != nil {
					return nil, 0, fmt.Errorf("car header roots: %w", err)
				}
				roots = append(roots, c)
			}
		default:
			if err := r.skip(); err != nil {
				return nil, 0, fmt.Errorf("car header: %w", err)
			}
		}
	}
	if version != 1 {
		return nil, 0, fmt.Errorf("car: unsupported CAR version %d (only CAR v1)", version)
	}
	return roots, off, nil
}

// carBlocks walks the blocks of a CAR v1 body (b[off:]) and calls fn with
// each block's binary CID and data, both aliasing b. The block data is not
// hashed against its CID.
func carBlocks(b []byte, off int, maxBlocks int, fn func(c, data []byte)) (int, error) {
	count := 0
	for off < len(b) {
		l, n := binary.Uvarint(b[off:])
		if n <= 0 {
			return count, errors.New("car: bad block length varint")
		}
		off += n
		if l == 0 || l > uint64(len(b)-off) {
			return count, errors.New("car: bad block length")
		}
		sec := b[off : off+int(l)]
		off += int(l)
		cl, err := cidLen(sec)
		if err != nil {
			return count, err
		}
		count++
		if count > maxBlocks {
			return count, fmt.Errorf("car: more than %d blocks", maxBlocks)
		}
		fn(sec[:cl:cl], sec[cl:])
	}
	return count, nil
}
