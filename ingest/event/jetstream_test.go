package event

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/klauspost/compress/zstd"
)

func jetstreamLines(t testing.TB) [][]byte {
	t.Helper()
	return append(lines(t, "jetstream/corpus/expected_v1.jsonl"), lines(t, "jetstream/subscribe/golden_v1.jsonl")...)
}

func TestDecodeJetstreamCorpus(t *testing.T) {
	m := loadManifest(t)
	corpus := lines(t, "jetstream/corpus/expected_v1.jsonl")
	if len(corpus) != m.V1Events {
		t.Fatalf("expected_v1.jsonl has %d lines, manifest says %d", len(corpus), m.V1Events)
	}
	counts := map[string]int{}
	for i, line := range corpus {
		op, err := DecodeJetstream(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		checkJetstreamOp(t, line, op)
		if op.Kind == KindCommit {
			counts[op.Action.String()]++
		} else {
			counts[op.Kind.String()]++
		}
	}
	want := map[string]int{"create": m.Creates, "update": m.Updates, "delete": m.Deletes, "identity": m.Identity, "account": m.Account}
	if !reflect.DeepEqual(counts, want) {
		t.Fatalf("counts %v, manifest %v", counts, want)
	}
}

func TestDecodeJetstreamGolden(t *testing.T) {
	kinds := map[Kind]int{}
	for i, line := range lines(t, "jetstream/subscribe/golden_v1.jsonl") {
		op, err := DecodeJetstream(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		checkJetstreamOp(t, line, op)
		kinds[op.Kind]++
	}
	if want := map[Kind]int{KindCommit: 8, KindIdentity: 1, KindAccount: 1}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
}

// checkJetstreamOp compares op with an independent generic decode of line.
func checkJetstreamOp(t *testing.T, line []byte, op Op) {
	t.Helper()
	var ev struct {
		DID    string `json:"did"`
		TimeUS int64  `json:"time_us"`
		Kind   string `json:"kind"`
		Commit struct {
			Rev        string          `json:"rev"`
			Operation  string          `json:"operation"`
			Collection string          `json:"collection"`
			RKey       string          `json:"rkey"`
			Record     json.RawMessage `json:"record"`
			CID        string          `json:"cid"`
		} `json:"commit"`
		Identity map[string]any `json:"identity"`
		Account  map[string]any `json:"account"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		t.Fatal(err)
	}
	if op.DID != ev.DID || op.Seq != ev.TimeUS || op.Kind.String() != ev.Kind || op.Skip != "" {
		t.Fatalf("op %+v for %s", op, line)
	}
	switch op.Kind {
	case KindCommit:
		c := ev.Commit
		if op.Rev != c.Rev || op.Action.String() != c.Operation || op.Collection != c.Collection || op.RKey != c.RKey || op.CID != c.CID {
			t.Fatalf("op %+v for %s", op, line)
		}
		if op.Action == ActionDelete {
			if op.Record != nil {
				t.Fatalf("delete with record: %s", line)
			}
			return
		}
		want, err := atdata.UnmarshalJSON(c.Record)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(op.Record, want) {
			t.Fatalf("record %#v, want %#v", op.Record, want)
		}
	case KindIdentity:
		if h, _ := ev.Identity["handle"].(string); op.Handle != h {
			t.Fatalf("handle %q, want %q", op.Handle, h)
		}
	case KindAccount:
		a, _ := ev.Account["active"].(bool)
		s, _ := ev.Account["status"].(string)
		if op.Active != a || op.Status != s {
			t.Fatalf("account %+v for %s", op, line)
		}
	}
}

func TestDecodeJetstreamSkipsAndErrors(t *testing.T) {
	ok := []struct {
		msg  string
		skip string
	}{
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"create","collection":"a.b.c","rkey":"x","record":{"n":1.5},"cid":"bafy"}}`, SkipRecordJSON},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"create","collection":"a.b.c","rkey":"x","record":{"$type":""},"cid":"bafy"}}`, SkipRecordJSON},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"create","collection":"a.b.c","rkey":"x","record":[1],"cid":"bafy"}}`, SkipRecordJSON},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"update","collection":"a.b.c","rkey":"x","cid":"bafy"}}`, SkipRecordMissing},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"create","collection":"a.b.c","rkey":"x","record":null}}`, SkipRecordMissing},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"frob","collection":"a.b.c","rkey":"x"}}`, SkipBadAction},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"delete","collection":"a.b/c","rkey":"x"}}`, SkipBadPath},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"delete","collection":"a.b.c","rkey":""}}`, SkipBadPath},
		{`{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"delete","collection":"a.b.c","rkey":"x"}}`, ""},
		{`{"did":"did:plc:a","time_us":5,"kind":"account","account":{"active":false,"status":"takendown","did":"did:plc:a","seq":1}}`, ""},
	}
	for _, c := range ok {
		op, err := DecodeJetstream([]byte(c.msg))
		if err != nil {
			t.Fatalf("%s: %v", c.msg, err)
		}
		if op.Skip != c.skip || op.Seq != 5 || op.DID != "did:plc:a" {
			t.Fatalf("%s: op %+v, want skip %q", c.msg, op, c.skip)
		}
		if op.Skip != "" && op.Record != nil {
			t.Fatalf("%s: skipped op with record", c.msg)
		}
	}
	op, _ := DecodeJetstream([]byte(ok[len(ok)-1].msg))
	if op.Kind != KindAccount || op.Active || op.Status != "takendown" {
		t.Fatalf("account op %+v", op)
	}

	// A valid record of 400 KB of CBOR whose JSON is 2.4 MB of \u0001
	// escapes (as a Jetstream server writes it): decoded as far as its
	// path, SkipRecordTooBig, so an update still revokes and its
	// repository is resynced. Before, the whole event was refused.
	big := `{"did":"did:plc:a","time_us":5,"kind":"commit","commit":{"rev":"r","operation":"update","collection":"a.b.c","rkey":"x","cid":"bafy","record":{"$type":"a.b.c","text":"` +
		strings.Repeat(`\u0001`, 400_000) + `"}}}`
	if op, err := DecodeJetstream([]byte(big)); err != nil || op.Skip != SkipRecordTooBig || op.Action != ActionUpdate || op.RKey != "x" || op.Record != nil {
		t.Fatalf("a %d-byte event of a valid record: op %+v, %v", len(big), op, err)
	}

	bad := []string{
		``, `null`, `[]`, `{}`, `{"did":"did:plc:a","kind":"commit"}`,
		`{"did":"did:plc:a","kind":"identity"}`, `{"did":"did:plc:a","kind":"account"}`,
		`{"did":"did:plc:a","time_us":"x","kind":"account","account":{}}`,
		`{"did":"did:plc:a","kind":"commit","commit":{"record":{"a":1}`,
	}
	for _, m := range bad {
		if _, err := DecodeJetstream([]byte(m)); err == nil {
			t.Fatalf("%q: no error", m)
		}
	}
	_, err := DecodeJetstream([]byte(`{"did":"did:plc:a","time_us":1,"kind":"labels"}`))
	if !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestJetstreamDictionary(t *testing.T) {
	d := JetstreamDict()
	if len(d) < 8 || binary.LittleEndian.Uint32(d) != 0xEC30A437 || binary.LittleEndian.Uint32(d[4:]) != 1612007021 {
		t.Fatal("embedded dictionary is not zstd dictionary 1612007021")
	}
	d[0] ^= 0xff
	if JetstreamDict()[0] == d[0] {
		t.Fatal("JetstreamDict returned the embedded slice")
	}
}

// TestJetstreamDecompressRoundTrip compresses every real Jetstream line
// with the dictionary, as the server does for compress=true, and checks
// that Decompress gives the line back and that it still decodes.
func TestJetstreamDecompressRoundTrip(t *testing.T) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderDict(JetstreamDict()), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	d, err := NewJetstreamDecompressor()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var buf []byte
	var in, out int
	for i, line := range jetstreamLines(t) {
		z := enc.EncodeAll(line, nil)
		in += len(line)
		out += len(z)
		buf, err = d.Decompress(buf, z)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !bytes.Equal(buf, line) {
			t.Fatalf("line %d: round trip differs", i+1)
		}
		want, err1 := DecodeJetstream(line)
		got, err2 := DecodeJetstream(buf)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("line %d: decode after decompress differs (%v, %v)", i+1, err1, err2)
		}
	}
	t.Logf("%d bytes compressed to %d with the dictionary", in, out)

	// A frame made without the dictionary still decodes; one that needs
	// an unknown dictionary does not.
	plain, _ := zstd.NewWriter(nil)
	z := plain.EncodeAll([]byte(`{"a":1}`), nil)
	plain.Close()
	if got, err := d.Decompress(nil, z); err != nil || string(got) != `{"a":1}` {
		t.Fatalf("plain frame: %q %v", got, err)
	}
	if _, err := d.Decompress(nil, []byte("not zstd")); err == nil {
		t.Fatal("garbage decompressed")
	}
}

func TestJetstreamDecompressLimit(t *testing.T) {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderDict(JetstreamDict()))
	defer enc.Close()
	big := bytes.Repeat([]byte("a"), MaxJetstreamMessageSize+1)
	z := enc.EncodeAll(big, nil)
	d, err := NewJetstreamDecompressor()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Decompress(nil, z); err == nil {
		t.Fatalf("decompressed %d bytes past the limit", len(big))
	}
	// Exactly at the limit is fine, also when dst holds data (overwritten).
	z = enc.EncodeAll(big[:MaxJetstreamMessageSize], nil)
	got, err := d.Decompress(make([]byte, 10, 100), z)
	if err != nil || !bytes.Equal(got, big[:MaxJetstreamMessageSize]) {
		t.Fatalf("at the limit: %d %v", len(got), err)
	}
	// Without a content size in the frame header (streaming encoder).
	var sb bytes.Buffer
	sw, _ := zstd.NewWriter(&sb, zstd.WithEncoderDict(JetstreamDict()))
	sw.Write(big)
	sw.Close()
	if _, err := d.Decompress(nil, sb.Bytes()); err == nil {
		t.Fatal("streamed frame decompressed past the limit")
	}
}

// TestDecodeJetstreamCursor: a Jetstream v2 server's v1 events carry its
// seq as "cursor" (kept in Op.Cursor); a v1 server's do not (0); a
// negative one is refused.
func TestDecodeJetstreamCursor(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want int64
		bad  bool
	}{
		{`{"did":"did:plc:a","time_us":1779719009132431,"cursor":5541,"kind":"identity","identity":{"did":"did:plc:a","handle":"a.test","seq":9}}`, 5541, false},
		{`{"did":"did:plc:a","time_us":1779719009132431,"kind":"identity","identity":{"did":"did:plc:a","seq":9}}`, 0, false},
		{`{"did":"did:plc:a","time_us":1779719009132431,"cursor":-1,"kind":"identity","identity":{"did":"did:plc:a","seq":9}}`, 0, true},
	} {
		op, err := DecodeJetstream([]byte(c.msg))
		if (err != nil) != c.bad || op.Cursor != c.want {
			t.Errorf("%s: cursor %d, error %v; want %d, error %v", c.msg, op.Cursor, err, c.want, c.bad)
		}
	}
}

// An event's time_us is also its Time, in UTC: when the network emitted
// it (zero without a time_us).
func TestDecodeJetstreamTime(t *testing.T) {
	op, err := DecodeJetstream([]byte(`{"did":"did:plc:a","time_us":1779719009132431,"kind":"account","account":{"did":"did:plc:a","active":true,"seq":9}}`))
	if want := time.UnixMicro(1779719009132431).UTC(); err != nil || !op.Time.Equal(want) || op.Time.Location() != time.UTC {
		t.Fatalf("time %v (%v), want %v", op.Time, err, want)
	}
	op, err = DecodeJetstream([]byte(`{"did":"did:plc:a","kind":"account","account":{"did":"did:plc:a","active":true,"seq":9}}`))
	if err != nil || !op.Time.IsZero() {
		t.Fatalf("no time_us: time %v (%v), want zero", op.Time, err)
	}
}
