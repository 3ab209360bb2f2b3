package event

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
)

// A DAG-CBOR record decoder that produces exactly what
// atdata.UnmarshalCBOR produces (the same map[string]any, []any, string,
// int64, bool, nil, atdata.CIDLink, atdata.Bytes and atdata.Blob values),
// about three times faster: atdata goes through go-ipld-cbor's
// reflection-based refmt and then copies the result once more to apply the
// atproto data model's rules; this decoder applies the same rules in one
// pass over the bytes.
//
// Where the two differ, this one is stricter, never more lenient: anything
// it accepts within MaxCBORDepth, atdata accepts with a deep-equal result
// (checked on every real record of the test set and by FuzzRecordCBOR). It
// rejects what scanItem rejects (indefinite lengths, the undefined value,
// trailing bytes), unsigned integers above MaxInt64 (refmt wraps them to
// negative numbers), and a top-level null (atdata turns it into an empty
// record). What is nested past MaxCBORDepth, and a map at it (whose
// values would be), it leaves out (nil) after checking it well formed,
// where atdata keeps it: the extractor never walks that deep.
//
// The rules of atdata's parse step (data.go, parse.go in
// github.com/bluesky-social/indigo/atproto/atdata), mirrored here:
//   - a float is accepted only if integral, and becomes an int64;
//   - a map with a "$link" key must be exactly {"$link": <CID string>} and
//     becomes a CIDLink; with "$bytes", exactly {"$bytes": <base64>}, which
//     becomes Bytes;
//   - a "$type" key must hold a non-empty string; "$type": "blob" makes the
//     map a Blob, which must have exactly $type, ref (a link), mimeType (a
//     string) and size (an integer);
//   - a map of exactly mimeType (a string) and cid (a CID string, a byte
//     string or a tag-42 link, but not a {"$link"} map) is a legacy blob,
//     Size -1;
//   - maps and arrays hold at most atdata.MAX_CBOR_CONTAINER_LEN items;
//     keys of plain maps are at most atdata.MAX_OBJECT_KEY_LEN bytes;
//     duplicate keys are an error.

var (
	errRecNotMap   = errors.New("record: top-level value is not an object")
	errRecDupKey   = errors.New("record: repeated map key")
	errRecKeyType  = errors.New("record: map key is not a string")
	errRecTooLong  = errors.New("record: container too long")
	errRecKeyLen   = errors.New("record: map key too long")
	errRecFloat    = errors.New("record: number is not a safe integer")
	errRecUint     = errors.New("record: integer overflows int64")
	errRecLink     = errors.New("record: invalid CID link")
	errRecType     = errors.New("record: $type field must contain a non-empty string")
	errRecLinkObj  = errors.New("record: invalid $link object")
	errRecBytesObj = errors.New("record: invalid $bytes object")
	errRecBlob     = errors.New("record: invalid blob")
)

// decodeRecord decodes a DAG-CBOR record block; see the comment above.
// The result does not alias b.
func decodeRecord(b []byte) (map[string]any, error) {
	if len(b) > atdata.MAX_CBOR_RECORD_SIZE {
		return nil, errRecordTooBig
	}
	if err := scanWhole(b, true); err != nil { // a subtree past MaxCBORDepth is cut, not the record refused
		return nil, err
	}
	if len(b) == 0 || b[0]>>5 != majMap {
		return nil, errRecNotMap
	}
	d := recDecoder{b: b}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errRecNotMap
	}
	return m, nil
}

type recDecoder struct {
	b     []byte
	off   int
	depth int // of the item value decodes next; the record is 0
}

// head reads an item head; scanItem has already vouched for the bytes.
func (d *recDecoder) head() (maj byte, ai byte, arg uint64, err error) {
	if d.off >= len(d.b) {
		return 0, 0, 0, errCBORShort
	}
	ai = d.b[d.off] & 0x1f
	maj, arg, d.off, err = readHead(d.b, d.off)
	return maj, ai, arg, err
}

// value decodes one item into its atdata form. An item past MaxCBORDepth
// is left out (nil, as a JSON null): the JSON path keeps it, and the
// extractor walks neither past extract.DepthMax, far above real records
// (the atproto data model suggests 32 levels). Before, the record was
// refused whole, and its links lost on the firehose and in backfills.
func (d *recDecoder) value() (any, error) {
	start := d.off
	if d.depth > MaxCBORDepth {
		return d.skip(start)
	}
	maj, ai, arg, err := d.head()
	if err != nil {
		return nil, err
	}
	switch maj {
	case majUint:
		if arg > math.MaxInt64 {
			return nil, errRecUint
		}
		return int64(arg), nil
	case majNegInt:
		if arg > math.MaxInt64 {
			return nil, errRecUint
		}
		return -1 - int64(arg), nil
	case majBytes:
		if arg > uint64(len(d.b)-d.off) {
			return nil, errCBORShort
		}
		out := make([]byte, arg)
		copy(out, d.b[d.off:])
		d.off += int(arg)
		return atdata.Bytes(out), nil
	case majText:
		if arg > uint64(len(d.b)-d.off) {
			return nil, errCBORShort
		}
		s := string(d.b[d.off : d.off+int(arg)])
		d.off += int(arg)
		return s, nil
	case majArray:
		if arg > atdata.MAX_CBOR_CONTAINER_LEN {
			return nil, errRecTooLong
		}
		if arg > uint64(len(d.b)-d.off) {
			return nil, errCBORShort
		}
		out := make([]any, arg)
		d.depth++
		for i := range out {
			if out[i], err = d.value(); err != nil {
				return nil, err
			}
		}
		d.depth--
		return out, nil
	case majMap:
		if d.depth == MaxCBORDepth && arg > 0 {
			// Its values would be left out, and a special form (a blob,
			// a $link) cannot be judged without them: the map is.
			return d.skip(start)
		}
		return d.mapValue(arg)
	case majTag:
		if arg != cidTag {
			return nil, errCBORTag
		}
		return d.link()
	default: // majSimple
		switch ai {
		case 20:
			return false, nil
		case 21:
			return true, nil
		case 22:
			return nil, nil
		case 25:
			return floatToInt(float64(math.Float32frombits(halfToFloat32Bits(uint16(arg)))))
		case 26:
			return floatToInt(float64(math.Float32frombits(uint32(arg))))
		case 27:
			return floatToInt(math.Float64frombits(arg))
		}
		return nil, errCBORSimple
	}
}

// skip leaves out the item at start (checked well formed): nil.
func (d *recDecoder) skip(start int) (any, error) {
	end, err := skipItem(d.b, start)
	d.off = end
	return nil, err
}

// link decodes the byte string of a tag 42 as go-ipld-cbor does.
func (d *recDecoder) link() (atdata.CIDLink, error) {
	maj, _, n, err := d.head()
	if err != nil {
		return atdata.CIDLink{}, err
	}
	if maj != majBytes || n > uint64(len(d.b)-d.off) {
		return atdata.CIDLink{}, errRecLink
	}
	raw := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	if len(raw) == 0 || raw[0] != 0 {
		return atdata.CIDLink{}, errRecLink
	}
	c, err := cid.Cast(raw[1:])
	if err != nil {
		return atdata.CIDLink{}, errRecLink
	}
	return atdata.CIDLink(c), nil
}

// floatToInt is atdata's parseFloat.
func floatToInt(f float64) (any, error) {
	if f != float64(int64(f)) {
		return nil, errRecFloat
	}
	return int64(f), nil
}

// halfToFloat32Bits converts an IEEE 754 half-precision float to single
// precision bits.
func halfToFloat32Bits(h uint16) uint32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0:
		if mant == 0 {
			return sign
		}
		// subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return sign | e<<23 | mant<<13
	case 0x1f:
		return sign | 0xff<<23 | mant<<13
	}
	return sign | (exp+127-15)<<23 | mant<<13
}

// typeValue decodes the text value of a "$type" key, sharing the string
// of a common type instead of allocating it again.
func (d *recDecoder) typeValue() (any, error) {
	_, _, arg, err := d.head()
	if err != nil {
		return nil, err
	}
	if arg > uint64(len(d.b)-d.off) {
		return nil, errCBORShort
	}
	b := d.b[d.off : d.off+int(arg)]
	d.off += int(arg)
	if s, ok := commonStrings[string(b)]; ok {
		return s, nil
	}
	return string(b), nil
}

// commonStrings shares the map keys and $type values that nearly every
// record repeats (a lookup allocates nothing; the string it saves would be
// allocated for every record).
var commonStrings = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		// keys
		"$type", "text", "createdAt", "subject", "uri", "cid", "reply", "root", "parent", "embed",
		"facets", "features", "index", "byteStart", "byteEnd", "langs", "labels", "tags", "via",
		"images", "image", "alt", "aspectRatio", "width", "height", "external", "title", "description",
		"thumb", "record", "media", "video", "captions", "did", "tag", "ref", "mimeType", "size",
		"displayName", "avatar", "banner", "pinnedPost", "name", "purpose", "list", "joinedViaStarterPack",
		"content", "visibility", "status", "url", "values", "val", "src", "knot", "repo", "owner", "ogp",
		// $type values
		"app.bsky.feed.post", "app.bsky.feed.like", "app.bsky.feed.repost", "app.bsky.graph.follow",
		"app.bsky.graph.block", "app.bsky.graph.list", "app.bsky.graph.listitem", "app.bsky.actor.profile",
		"app.bsky.richtext.facet", "app.bsky.richtext.facet#link", "app.bsky.richtext.facet#mention",
		"app.bsky.richtext.facet#tag", "app.bsky.embed.images", "app.bsky.embed.images#image",
		"app.bsky.embed.external", "app.bsky.embed.external#external", "app.bsky.embed.record",
		"app.bsky.embed.recordWithMedia", "app.bsky.embed.video", "app.bsky.embed.defs#aspectRatio",
		"app.bsky.feed.threadgate", "app.bsky.feed.postgate", "app.bsky.graph.starterpack",
		"app.bsky.feed.post#replyRef", "com.atproto.repo.strongRef", "com.atproto.label.defs#selfLabels",
		"com.atproto.label.defs#selfLabel", "blob", "sh.tangled.repo", "sh.tangled.feed.star",
		"com.whtwnd.blog.entry", "xyz.statusphere.status",
	} {
		m[s] = s
	}
	return m
}()

// keyKinds notes the major type of the values of the keys the special
// forms look at, since atdata inspects those values before parsing them.
type keyKinds struct {
	cidMajor byte
	longKey  bool // a key longer than atdata.MAX_OBJECT_KEY_LEN
	dollar   bool // a key starting with '$'
}

func (d *recDecoder) mapValue(n uint64) (any, error) {
	if n > atdata.MAX_CBOR_CONTAINER_LEN {
		return nil, errRecTooLong
	}
	if n > uint64(len(d.b)-d.off)/2 {
		return nil, errCBORShort
	}
	out := make(map[string]any, n)
	var kk keyKinds
	d.depth++ // for its values (an error ends the decoder: no need to undo it)
	for i := uint64(0); i < n; i++ {
		maj, _, kl, err := d.head()
		if err != nil {
			return nil, err
		}
		if maj != majText {
			return nil, errRecKeyType
		}
		if kl > uint64(len(d.b)-d.off) {
			return nil, errCBORShort
		}
		kb := d.b[d.off : d.off+int(kl)]
		d.off += int(kl)
		if string(kb) == "cid" && d.off < len(d.b) {
			kk.cidMajor = d.b[d.off] >> 5
		}
		key, common := commonStrings[string(kb)]
		if !common {
			key = string(kb)
			if len(key) > atdata.MAX_OBJECT_KEY_LEN {
				kk.longKey = true
			}
			if len(key) > 0 && key[0] == '$' {
				kk.dollar = true
			}
		} else if key[0] == '$' {
			kk.dollar = true
		}
		var v any
		if key == "$type" && d.off < len(d.b) && d.b[d.off]>>5 == majText {
			v, err = d.typeValue()
		} else {
			v, err = d.value()
		}
		if err != nil {
			return nil, err
		}
		out[key] = v
		if len(out) != int(i)+1 { // the key was there already
			return nil, errRecDupKey
		}
	}
	d.depth--
	return special(out, kk)
}

// special applies atdata's parseMap rules for $link, $bytes, $type and
// legacy blobs to a decoded map.
func special(m map[string]any, kk keyKinds) (any, error) {
	if !kk.dollar && len(m) != 2 {
		// No $link, $bytes or $type key, not a legacy blob: a plain map.
		if kk.longKey {
			return nil, errRecKeyLen
		}
		return m, nil
	}
	if _, ok := m["$link"]; ok {
		s, ok := m["$link"].(string)
		if len(m) != 1 || !ok {
			return nil, errRecLinkObj
		}
		c, err := cid.Parse(s)
		if err != nil || !c.Defined() {
			return nil, errRecLinkObj
		}
		return atdata.CIDLink(c), nil
	}
	if _, ok := m["$bytes"]; ok {
		s, ok := m["$bytes"].(string)
		if len(m) != 1 || !ok {
			return nil, errRecBytesObj
		}
		b, err := base64.RawStdEncoding.DecodeString(s)
		if err != nil {
			return nil, errRecBytesObj
		}
		return atdata.Bytes(b), nil
	}
	if tv, ok := m["$type"]; ok {
		ts, ok := tv.(string)
		if !ok || ts == "" {
			return nil, errRecType
		}
		if ts == "blob" {
			return blob(m)
		}
	}
	if len(m) == 2 {
		if _, ok := m["mimeType"]; ok {
			if cv, ok := m["cid"]; ok {
				return legacyBlob(m, cv, kk.cidMajor)
			}
		}
	}
	if kk.longKey {
		return nil, errRecKeyLen
	}
	return m, nil
}

func blob(m map[string]any) (any, error) {
	if len(m) != 4 {
		return nil, errRecBlob
	}
	size, ok := m["size"].(int64)
	if !ok {
		return nil, errRecBlob
	}
	mime, ok := m["mimeType"].(string)
	if !ok {
		return nil, errRecBlob
	}
	ref, ok := m["ref"].(atdata.CIDLink)
	if !ok {
		return nil, errRecBlob
	}
	return atdata.Blob{Size: size, MimeType: mime, Ref: ref}, nil
}

func legacyBlob(m map[string]any, cv any, cidMajor byte) (any, error) {
	mime, ok := m["mimeType"].(string)
	if !ok {
		return nil, errRecBlob
	}
	var c cid.Cid
	var err error
	switch v := cv.(type) {
	case string:
		c, err = cid.Parse(v)
	case atdata.Bytes:
		c, err = cid.Cast(v)
	case atdata.CIDLink:
		// A tag-42 link; atdata rejects a {"$link"} map here.
		if cidMajor != majTag {
			return nil, errRecBlob
		}
		c = cid.Cid(v)
	default:
		return nil, errRecBlob
	}
	if err != nil {
		return nil, fmt.Errorf("record: legacy blob: %w", err)
	}
	return atdata.Blob{Size: -1, MimeType: mime, Ref: atdata.CIDLink(c)}, nil
}
