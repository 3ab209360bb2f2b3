package event

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
)

// A tiny CBOR writer for hand-made test records.
type (
	cmap  []any  // key, value, key, value... in this order
	craw  []byte // pre-encoded item(s)
	clink []byte // tag 42 around these bytes (include the 0x00 prefix yourself)
	cf16  uint16
	cf32  float32
	cf64  float64
	cuint uint64
)

func chead(maj byte, n uint64) []byte {
	switch {
	case n < 24:
		return []byte{maj<<5 | byte(n)}
	case n <= math.MaxUint8:
		return []byte{maj<<5 | 24, byte(n)}
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16([]byte{maj<<5 | 25}, uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32([]byte{maj<<5 | 26}, uint32(n))
	}
	return binary.BigEndian.AppendUint64([]byte{maj<<5 | 27}, n)
}

func cenc(v any) []byte {
	switch x := v.(type) {
	case nil:
		return []byte{0xf6}
	case bool:
		if x {
			return []byte{0xf5}
		}
		return []byte{0xf4}
	case int:
		if x < 0 {
			return chead(majNegInt, uint64(-1-x))
		}
		return chead(majUint, uint64(x))
	case cuint:
		return chead(majUint, uint64(x))
	case string:
		return append(chead(majText, uint64(len(x))), x...)
	case []byte:
		return append(chead(majBytes, uint64(len(x))), x...)
	case clink:
		return append([]byte{0xd8, 42}, cenc([]byte(x))...)
	case cf16:
		return binary.BigEndian.AppendUint16([]byte{0xf9}, uint16(x))
	case cf32:
		return binary.BigEndian.AppendUint32([]byte{0xfa}, math.Float32bits(float32(x)))
	case cf64:
		return binary.BigEndian.AppendUint64([]byte{0xfb}, math.Float64bits(float64(x)))
	case craw:
		return x
	case []any:
		out := chead(majArray, uint64(len(x)))
		for _, e := range x {
			out = append(out, cenc(e)...)
		}
		return out
	case cmap:
		out := chead(majMap, uint64(len(x)/2))
		for _, e := range x {
			out = append(out, cenc(e)...)
		}
		return out
	}
	panic("cenc: unsupported type")
}

const testCID = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm"

func testLink() clink {
	c, err := cid.Decode(testCID)
	if err != nil {
		panic(err)
	}
	return clink(append([]byte{0}, c.Bytes()...))
}

// compareRecordDecoders checks the contract of decodeRecord against
// atdata.UnmarshalCBOR: whatever decodeRecord accepts, atdata accepts
// with a deep-equal result.
func compareRecordDecoders(t testing.TB, b []byte) (ours, theirs bool) {
	t.Helper()
	got, err1 := decodeRecord(b)
	want, err2 := atdata.UnmarshalCBOR(b)
	if err1 == nil {
		if err2 != nil {
			t.Fatalf("decodeRecord accepted what atdata rejects (%v): %x", err2, b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeRecord differs from atdata for %x:\n%#v\n%#v", b, got, want)
		}
	}
	return err1 == nil, err2 == nil
}

func TestDecodeRecordEdgeCases(t *testing.T) {
	link := testLink()
	const (
		both    = "both"
		neither = "neither"
		atdOnly = "atdata only" // documented strictness of decodeRecord
	)
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"empty", cmap{}, both},
		{"scalars", cmap{"a", 1, "b", -5, "c", "s", "d", true, "e", false, "f", nil, "g", []byte{1, 2}, "h", []byte{}, "i", []any{}, "j", cmap{}}, both},
		{"big ints", cmap{"a", cuint(math.MaxInt64), "b", math.MinInt64}, both},
		{"uint above int64", cmap{"a", cuint(math.MaxUint64)}, atdOnly},
		{"non-minimal int", cmap{"a", craw{0x19, 0x00, 0x01}}, both},
		{"link", cmap{"a", link, "b", []any{link}}, both},
		{"link bad prefix", cmap{"a", clink(append([]byte{1}, link[1:]...))}, neither},
		{"link empty", cmap{"a", clink{}}, neither},
		{"link garbage", cmap{"a", clink{0, 1, 2}}, neither},
		{"tag on text", cmap{"a", craw(append([]byte{0xd8, 42}, cenc("x")...))}, neither},
		{"other tag", cmap{"a", craw(append([]byte{0xc1}, cenc(5)...))}, neither},
		{"float64 integral", cmap{"a", cf64(2)}, both},
		{"float64 fraction", cmap{"a", cf64(1.5)}, neither},
		{"float32 integral", cmap{"a", cf32(-3)}, both},
		{"float16 integral", cmap{"a", cf16(0x4000)}, both}, // 2.0
		{"float16 negzero", cmap{"a", cf16(0x8000)}, both},  // -0.0
		{"float16 subnormal", cmap{"a", cf16(0x0001)}, neither},
		{"float16 max", cmap{"a", cf16(0x7bff)}, both}, // 65504
		{"float16 inf", cmap{"a", cf16(0x7c00)}, neither},
		{"float16 nan", cmap{"a", cf16(0x7e00)}, neither},
		{"float64 huge", cmap{"a", cf64(1e300)}, neither},
		{"float64 2^62", cmap{"a", cf64(1 << 62)}, both},
		{"$link map", cmap{"a", cmap{"$link", testCID}}, both},
		{"$link ipfs path", cmap{"a", cmap{"$link", "/ipfs/" + testCID}}, both},
		{"$link extra", cmap{"a", cmap{"$link", testCID, "b", 1}}, neither},
		{"$link not string", cmap{"a", cmap{"$link", 5}}, neither},
		{"$link bad", cmap{"a", cmap{"$link", "nope"}}, neither},
		{"$bytes", cmap{"a", cmap{"$bytes", "aGVsbG8"}}, both},
		{"$bytes empty", cmap{"a", cmap{"$bytes", ""}}, both},
		{"$bytes padded", cmap{"a", cmap{"$bytes", "aGVsbG8="}}, neither},
		{"$bytes extra", cmap{"a", cmap{"$bytes", "", "x", 1}}, neither},
		{"blob", cmap{"a", cmap{"$type", "blob", "ref", link, "mimeType", "image/png", "size", 12}}, both},
		{"blob $link ref", cmap{"a", cmap{"$type", "blob", "ref", cmap{"$link", testCID}, "mimeType", "x", "size", 1}}, both},
		{"blob float size", cmap{"a", cmap{"$type", "blob", "ref", link, "mimeType", "x", "size", cf64(7)}}, both},
		{"blob negative size", cmap{"a", cmap{"$type", "blob", "ref", link, "mimeType", "x", "size", -7}}, both},
		{"blob extra", cmap{"a", cmap{"$type", "blob", "ref", link, "mimeType", "x", "size", 1, "y", 2}}, neither},
		{"blob no size", cmap{"a", cmap{"$type", "blob", "ref", link, "mimeType", "x", "y", 2}}, neither},
		{"blob string size", cmap{"a", cmap{"$type", "blob", "ref", link, "mimeType", "x", "size", "1"}}, neither},
		{"blob ref string", cmap{"a", cmap{"$type", "blob", "ref", testCID, "mimeType", "x", "size", 1}}, neither},
		{"blob ref map", cmap{"a", cmap{"$type", "blob", "ref", cmap{"x", 1}, "mimeType", "x", "size", 1}}, neither},
		{"blob ref bytes obj", cmap{"a", cmap{"$type", "blob", "ref", cmap{"$bytes", ""}, "mimeType", "x", "size", 1}}, neither},
		{"blob mime int", cmap{"a", cmap{"$type", "blob", "ref", link, "mimeType", 1, "size", 1}}, neither},
		{"legacy blob string", cmap{"a", cmap{"cid", testCID, "mimeType", "image/jpeg"}}, both},
		{"legacy blob tag", cmap{"a", cmap{"cid", link, "mimeType", "image/jpeg"}}, both},
		{"legacy blob bytes", cmap{"a", cmap{"cid", []byte(link[1:]), "mimeType", "image/jpeg"}}, both},
		{"legacy blob $link", cmap{"a", cmap{"cid", cmap{"$link", testCID}, "mimeType", "image/jpeg"}}, neither},
		{"legacy blob bad cid", cmap{"a", cmap{"cid", "x", "mimeType", "image/jpeg"}}, neither},
		{"legacy blob int mime", cmap{"a", cmap{"cid", testCID, "mimeType", 1}}, neither},
		{"not legacy (3 keys)", cmap{"a", cmap{"cid", "x", "mimeType", 1, "z", 1}}, both},
		{"$type empty", cmap{"$type", ""}, neither},
		{"$type int", cmap{"$type", 1}, neither},
		{"$type null", cmap{"$type", nil}, neither},
		{"$type other", cmap{"$type", "app.bsky.feed.like", "x", cmap{"$type", "y"}}, both},
		{"top-level link", cmap{"$link", testCID}, neither},
		{"top-level blob", cmap{"$type", "blob", "ref", link, "mimeType", "x", "size", 1}, neither},
		{"top-level array", []any{1}, neither},
		{"top-level string", "x", neither},
		{"top-level null", nil, atdOnly},
		{"duplicate key", cmap{"a", 1, "a", 2}, neither},
		{"int key", craw{0xa1, 0x01, 0x01}, neither},
		{"bytes key", craw{0xa1, 0x41, 'a', 0x01}, neither},
		{"long key", cmap{strings.Repeat("k", atdata.MAX_OBJECT_KEY_LEN+1), 1}, neither},
		{"max key", cmap{strings.Repeat("k", atdata.MAX_OBJECT_KEY_LEN), 1}, both},
		{"unsorted keys", cmap{"b", 1, "a", 2}, both},
		{"undefined", cmap{"a", craw{0xf7}}, atdOnly},
		{"simple 0", cmap{"a", craw{0xe0}}, neither},
		{"indefinite array", cmap{"a", craw{0x9f, 0x01, 0xff}}, atdOnly},
		{"indefinite string", cmap{"a", craw{0x7f, 0x61, 'a', 0xff}}, atdOnly},
		{"trailing bytes", craw(append(cenc(cmap{"a", 1}), 0x01)), atdOnly},
		{"truncated", craw(cenc(cmap{"a", "hello"})[:6]), neither},
		{"invalid utf8", cmap{"a", "\xff\xfe"}, both},
	}
	for _, c := range cases {
		b := cenc(c.v)
		ours, theirs := compareRecordDecoders(t, b)
		got := neither
		switch {
		case ours && theirs:
			got = both
		case theirs:
			got = atdOnly
		case ours:
			got = "ours only"
		}
		if got != c.want {
			t.Errorf("%s (%x): accepted by %s, want %s", c.name, b, got, c.want)
		}
	}

	// Nesting: items down to MaxCBORDepth are decoded as atdata does;
	// one past it is left out (nil), whatever is below it, and the rest of
	// the record kept (before, the record was refused whole, its links
	// lost on the firehose and in backfills while Jetstream's JSON kept
	// them). A subtree a million levels deep (the 1 MiB record bound) costs no stack.
	deep := func(n int, last byte) []byte {
		b := []byte{0xa2, 0x61, 'a'}
		for i := 0; i < n; i++ {
			b = append(b, 0x81)
		}
		return append(append(b, last), 0x61, 'u', 0x63, 'u', 'r', 'i')
	}
	if ours, theirs := compareRecordDecoders(t, deep(MaxCBORDepth-1, 0x01)); !ours || !theirs {
		t.Fatal("deep record refused")
	}
	want, err := decodeRecord(deep(MaxCBORDepth, 0xf6)) // the item at MaxCBORDepth+1 a null
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{MaxCBORDepth, MaxCBORDepth + 1, MaxCBORDepth + 50, 1<<20 - 64} {
		got, err := decodeRecord(deep(n, 0x01))
		if err != nil || !reflect.DeepEqual(got, want) || got["u"] != "uri" {
			t.Fatalf("%d levels of arrays: %v (a key beside them %v)", n, err, got["u"])
		}
	}
	// A map at the depth (its values past it), a special form among
	// them, is left out whole: before, its values were, and the form then
	// failed its checks and the record was refused. An empty one is kept,
	// as atdata keeps it.
	link = testLink()
	emptyAt := append(append([]byte{0xa1, 0x61, 'a'}, bytes.Repeat([]byte{0x81}, MaxCBORDepth-1)...), 0xa0)
	if ours, theirs := compareRecordDecoders(t, emptyAt); !ours || !theirs {
		t.Fatal("an empty map at the depth refused")
	}
	for _, special := range []any{
		cmap{"$type", "blob", "ref", link, "mimeType", "image/png", "size", 12},
		cmap{"$link", testCID},
		cmap{"$bytes", "aGk"},
		cmap{"cid", testCID, "mimeType", "image/jpeg"},
	} {
		inner := cenc(special)
		b := append([]byte{0xa2, 0x61, 'a'}, bytes.Repeat([]byte{0x81}, MaxCBORDepth-1)...)
		b = append(append(b, inner...), 0x61, 'u', 0x63, 'u', 'r', 'i')
		got, err := decodeRecord(b)
		if err != nil || got["u"] != "uri" {
			t.Fatalf("%v at depth %d: %v", special, MaxCBORDepth, err)
		}
	}
	// What lies past the depth is still checked: a malformed item there
	// refuses the record.
	for _, bad := range []byte{0x1c /* a reserved head */, 0xf7 /* undefined */, 0x9f /* indefinite */, 0xc1 /* tag 1 */} {
		b := deep(MaxCBORDepth+3, 0x01)
		b[3+MaxCBORDepth+2] = bad
		if _, err := decodeRecord(b); err == nil {
			t.Fatalf("a malformed item (%#x) past the depth accepted", bad)
		}
	}
}

// TestDecodeRecordRealData runs both decoders over every block of the
// test set's frames and CARs (records, MST nodes and commits alike) and
// requires identical results.
func TestDecodeRecordRealData(t *testing.T) {
	n := 0
	check := func(data []byte) {
		ours, theirs := compareRecordDecoders(t, data)
		if ours != theirs {
			t.Fatalf("decoders disagree on %x: ours %v atdata %v", data, ours, theirs)
		}
		n++
	}
	for _, f := range corpusFrames(t) {
		if frameType(t, f) != "#commit" {
			continue
		}
		end, _ := scanItem(f, 0, 0)
		var ev comatproto.SyncSubscribeRepos_Commit
		if err := ev.UnmarshalCBOR(bytes.NewReader(f[end:])); err != nil {
			t.Fatal(err)
		}
		_, off, err := carHeader(ev.Blocks)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := carBlocks(ev.Blocks, off, maxFrameBlocks, func(_, data []byte) { check(data) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range loadCARSummary(t) {
		_, blocks := carBlockList(t, readTD(t, s.file))
		for _, b := range blocks {
			check(b[1])
		}
	}
	t.Logf("%d blocks decoded identically", n)
}

func TestHalfFloat(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := float64(math.Float32frombits(halfToFloat32Bits(uint16(h))))
		// Reference: value = (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024.
		s, e, m := h>>15, (h>>10)&0x1f, h&0x3ff
		var want float64
		switch e {
		case 0:
			want = math.Ldexp(float64(m)/1024, -14)
		case 0x1f:
			if m == 0 {
				want = math.Inf(1)
			} else {
				want = math.NaN()
			}
		default:
			want = math.Ldexp(1+float64(m)/1024, e-15)
		}
		if s == 1 {
			want = -want
		}
		if !(f == want || (math.IsNaN(f) && math.IsNaN(want))) || math.Signbit(f) != math.Signbit(want) {
			t.Fatalf("half %#04x: %v, want %v", h, f, want)
		}
	}
}
