package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A small DAG-CBOR reader over a byte slice. It serves two purposes:
//
//   - scanItem checks that bytes are one well-formed data item of the
//     DAG-CBOR subset before they are handed to indigo's decoders
//     (cbor-gen, and go-ipld-cbor/refmt under atdata.UnmarshalCBOR), which
//     trust declared lengths and nesting more than hostile input deserves;
//   - cborReader decodes the few fixed structures this package reads itself
//     (frame headers, CAR headers, repo commits and MST nodes) without
//     reflection or per-field allocation.

// MaxCBORDepth is the deepest nesting of arrays and maps accepted in any
// CBOR item (frame, commit, MST node or record). The atproto data model
// suggests 32 for records; real records stay far below either number.
const MaxCBORDepth = 128

// CBOR major types.
const (
	majUint   = 0
	majNegInt = 1
	majBytes  = 2
	majText   = 3
	majArray  = 4
	majMap    = 5
	majTag    = 6
	majSimple = 7
)

// cidTag is the DAG-CBOR tag of a CID link.
const cidTag = 42

var (
	errCBORShort      = errors.New("cbor: unexpected end of data")
	errCBORIndefinite = errors.New("cbor: indefinite-length item (not DAG-CBOR)")
	errCBORReserved   = errors.New("cbor: reserved additional information")
	errCBORDepth      = errors.New("cbor: nesting too deep")
	errCBORTag        = errors.New("cbor: unsupported tag (only 42 is DAG-CBOR)")
	errCBORSimple     = errors.New("cbor: unsupported simple value")
	errCBORTrailing   = errors.New("cbor: trailing bytes after item")
)

// readHead decodes the initial byte and argument of the item at b[off:].
// It returns the major type, the argument (for major 7: the additional
// information, with floats' bits skipped) and the offset after the head.
func readHead(b []byte, off int) (maj byte, arg uint64, next int, err error) {
	if off >= len(b) {
		return 0, 0, off, errCBORShort
	}
	ib := b[off]
	maj = ib >> 5
	ai := ib & 0x1f
	off++
	switch {
	case ai < 24:
		return maj, uint64(ai), off, nil
	case ai == 24:
		if len(b)-off < 1 {
			return 0, 0, off, errCBORShort
		}
		return maj, uint64(b[off]), off + 1, nil
	case ai == 25:
		if len(b)-off < 2 {
			return 0, 0, off, errCBORShort
		}
		return maj, uint64(binary.BigEndian.Uint16(b[off:])), off + 2, nil
	case ai == 26:
		if len(b)-off < 4 {
			return 0, 0, off, errCBORShort
		}
		return maj, uint64(binary.BigEndian.Uint32(b[off:])), off + 4, nil
	case ai == 27:
		if len(b)-off < 8 {
			return 0, 0, off, errCBORShort
		}
		return maj, binary.BigEndian.Uint64(b[off:]), off + 8, nil
	case ai == 31:
		return 0, 0, off, errCBORIndefinite
	default:
		return 0, 0, off, errCBORReserved
	}
}

// scanItem checks that b[off:] starts with one well-formed item of the
// DAG-CBOR subset and returns the offset just after it. Every declared
// length is checked against the bytes that remain, so a decoder run over a
// scanned item never allocates more than the input's size; nesting is
// limited to MaxCBORDepth. Rejected: indefinite lengths, tags other than 42
// (which must wrap a byte string), simple values other than false, true and
// null, reserved encodings. Floats (16, 32 and 64 bit) are let through for
// the decoders to judge. Key order, key type and minimal integer encoding
// are not checked.
func scanItem(b []byte, off int, depth int) (int, error) { return scan(b, off, depth, false) }

// scan is scanItem; with cut, an item past MaxCBORDepth is checked by
// skipItem (a record's subtree the decoder leaves out) instead of refused.
func scan(b []byte, off int, depth int, cut bool) (int, error) {
	if depth > MaxCBORDepth {
		if cut {
			return skipItem(b, off)
		}
		return off, errCBORDepth
	}
	start := off
	maj, arg, off, err := readHead(b, off)
	if err != nil {
		return off, err
	}
	switch maj {
	case majUint, majNegInt:
		return off, nil
	case majBytes, majText:
		if arg > uint64(len(b)-off) {
			return off, errCBORShort
		}
		return off + int(arg), nil
	case majArray:
		if arg > uint64(len(b)-off) {
			return off, errCBORShort
		}
		for i := uint64(0); i < arg; i++ {
			if off, err = scan(b, off, depth+1, cut); err != nil {
				return off, err
			}
		}
		return off, nil
	case majMap:
		if arg > uint64(len(b)-off)/2 {
			return off, errCBORShort
		}
		for i := uint64(0); i < 2*arg; i++ {
			if off, err = scan(b, off, depth+1, cut); err != nil {
				return off, err
			}
		}
		return off, nil
	case majTag:
		return scanTagged(b, off, arg)
	default: // majSimple
		ai := b[start] & 0x1f
		switch ai {
		case 20, 21, 22: // false, true, null
			return off, nil
		case 25, 26, 27: // float16, float32, float64
			return off, nil
		}
		return off, errCBORSimple
	}
}

// scanOne checks that b is exactly one well-formed item (see scanItem).
func scanOne(b []byte) error { return scanWhole(b, false) }

// scanWhole is scanOne; with cut, as scan's.
func scanWhole(b []byte, cut bool) error {
	end, err := scan(b, 0, 0, cut)
	if err != nil {
		return err
	}
	if end != len(b) {
		return errCBORTrailing
	}
	return nil
}

// scanTagged checks the content of a tag (arg) whose head ended at off:
// only tag 42, wrapping a byte string (a CID link), is accepted.
func scanTagged(b []byte, off int, arg uint64) (int, error) {
	if arg != cidTag {
		return off, errCBORTag
	}
	m, n, next, err := readHead(b, off)
	if err != nil {
		return next, err
	}
	if m != majBytes {
		return off, errCBORTag
	}
	if n > uint64(len(b)-next) {
		return next, errCBORShort
	}
	return next + int(n), nil
}

// skipItem checks the item at b[off:] as scanItem does, at any depth,
// without recursion (a count of the items still to read: each takes at
// least a byte, so it never passes the input's length), and returns the
// offset just after it.
func skipItem(b []byte, off int) (int, error) {
	for pending := uint64(1); pending > 0; pending-- {
		start := off
		maj, arg, next, err := readHead(b, off)
		if err != nil {
			return next, err
		}
		off = next
		switch maj {
		case majUint, majNegInt:
		case majBytes, majText:
			if arg > uint64(len(b)-off) {
				return off, errCBORShort
			}
			off += int(arg)
		case majArray:
			if arg > uint64(len(b)-off) {
				return off, errCBORShort
			}
			pending += arg
		case majMap:
			if arg > uint64(len(b)-off)/2 {
				return off, errCBORShort
			}
			pending += 2 * arg
		case majTag:
			if off, err = scanTagged(b, off, arg); err != nil {
				return off, err
			}
		default: // majSimple
			switch b[start] & 0x1f {
			case 20, 21, 22, 25, 26, 27: // false, true, null, floats
			default:
				return off, errCBORSimple
			}
		}
	}
	return off, nil
}

// cborReader decodes items from a slice that scanItem has already checked,
// so that lengths can be trusted to fit; it still reports every error
// instead of assuming. Strings and byte strings it returns alias the input.
type cborReader struct {
	b   []byte
	off int
}

func (r *cborReader) head() (byte, uint64, error) {
	maj, arg, next, err := readHead(r.b, r.off)
	if err != nil {
		return 0, 0, err
	}
	r.off = next
	return maj, arg, nil
}

// peekMajor returns the major type of the next item without consuming it.
func (r *cborReader) peekMajor() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errCBORShort
	}
	return r.b[r.off] >> 5, nil
}

// isNull consumes a null and reports true, or leaves the reader alone.
func (r *cborReader) isNull() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xf6 {
		r.off++
		return true
	}
	return false
}

func (r *cborReader) mapLen() (int, error) {
	maj, n, err := r.head()
	if err != nil {
		return 0, err
	}
	if maj != majMap {
		return 0, fmt.Errorf("cbor: expected map, got major type %d", maj)
	}
	if n > uint64(len(r.b)-r.off)/2 {
		return 0, errCBORShort
	}
	return int(n), nil
}

func (r *cborReader) arrayLen() (int, error) {
	maj, n, err := r.head()
	if err != nil {
		return 0, err
	}
	if maj != majArray {
		return 0, fmt.Errorf("cbor: expected array, got major type %d", maj)
	}
	if n > uint64(len(r.b)-r.off) {
		return 0, errCBORShort
	}
	return int(n), nil
}

func (r *cborReader) rawString(want byte) ([]byte, error) {
	maj, n, err := r.head()
	if err != nil {
		return nil, err
	}
	if maj != want {
		return nil, fmt.Errorf("cbor: expected major type %d, got %d", want, maj)
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, errCBORShort
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// text returns the next text string, aliasing the input.
func (r *cborReader) text() ([]byte, error) { return r.rawString(majText) }

// bytes returns the next byte string, aliasing the input.
func (r *cborReader) bytes() ([]byte, error) { return r.rawString(majBytes) }

// int reads an integer that fits in an int64.
func (r *cborReader) int() (int64, error) {
	maj, n, err := r.head()
	if err != nil {
		return 0, err
	}
	switch maj {
	case majUint:
		if n > math.MaxInt64 {
			return 0, errors.New("cbor: integer overflows int64")
		}
		return int64(n), nil
	case majNegInt:
		if n > math.MaxInt64 {
			return 0, errors.New("cbor: integer overflows int64")
		}
		return -1 - int64(n), nil
	}
	return 0, fmt.Errorf("cbor: expected integer, got major type %d", maj)
}

// link reads a tag-42 CID link and returns the binary CID (without the
// leading multibase 0x00), aliasing the input.
func (r *cborReader) link() ([]byte, error) {
	maj, tag, err := r.head()
	if err != nil {
		return nil, err
	}
	if maj != majTag || tag != cidTag {
		return nil, errors.New("cbor: expected CID link")
	}
	b, err := r.bytes()
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != 0 {
		return nil, errors.New("cbor: invalid CID link")
	}
	return b[1:], nil
}

// skip steps over one item.
func (r *cborReader) skip() error {
	end, err := scanItem(r.b, r.off, 0)
	if err != nil {
		return err
	}
	r.off = end
	return nil
}
