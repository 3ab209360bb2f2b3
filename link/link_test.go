package link

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

const syntaxDir = "../testdata/atproto-interop-tests/syntax"

// readCases reads an interop list: one case per line, '#' comments, blank
// lines skipped, never trimmed.
func readCases(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(syntaxDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return out
}

func TestInteropSyntax(t *testing.T) {
	isATURI := func(s string) bool {
		tg, err := ParseTarget(s)
		return err == nil && tg.Kind == TargetATURI
	}
	isDID := func(s string) bool {
		tg, err := ParseTarget(s)
		return err == nil && tg.Kind == TargetDID && ValidDID(s)
	}
	isTID := func(s string) bool { _, ok := TIDValue(s); return ok }
	lists := []struct {
		name  string
		check func(string) bool
	}{
		{"aturi", isATURI},
		{"did", isDID},
		{"nsid", ValidCollection},
		{"recordkey", ValidRKey},
		{"tid", isTID},
	}
	for _, l := range lists {
		t.Run(l.name, func(t *testing.T) {
			valid := readCases(t, l.name+"_syntax_valid.txt")
			invalid := readCases(t, l.name+"_syntax_invalid.txt")
			for _, s := range valid {
				if !l.check(s) {
					t.Errorf("valid %s rejected: %q", l.name, s)
				}
			}
			for _, s := range invalid {
				if l.check(s) {
					t.Errorf("invalid %s accepted: %q", l.name, s)
				}
			}
			t.Logf("%d valid, %d invalid", len(valid), len(invalid))
		})
	}
}

func TestTIDRoundTrip(t *testing.T) {
	var c Codec
	c.Outlines = NewMemOutlines()
	for _, s := range readCases(t, "tid_syntax_valid.txt") {
		v, ok := TIDValue(s)
		if !ok || v&OutlinedBit != 0 {
			t.Fatalf("%q: %d %v", s, v, ok)
		}
		back, err := c.RenderRKey(v)
		if err != nil || back != s {
			t.Fatalf("%q -> %d -> %q %v", s, v, back, err)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		v := r.Uint64() >> 1
		s := syntax.NewTIDFromInteger(v).String()
		got, ok := TIDValue(s)
		if !ok || got != v {
			t.Fatalf("%d -> %q -> %d %v", v, s, got, ok)
		}
	}
	// TIDs sort as their integers: inline rkeys keep record-creation order.
	a, _ := TIDValue("3jzfcijpj2z2a")
	b, _ := TIDValue("3mptbyplj5d2a")
	if a >= b {
		t.Fatalf("TID order broken: %d >= %d", a, b)
	}
}

// Record keys of TID syntax whose first character is c-j would set the
// field's top bit, OutlinedBit: they are not TIDs here, and get fields of
// their own (c222222222223's integer is the outline of the first key
// outlined, here "self", and j222222222223's has NamedBit set too).
func TestTIDSyntaxWithTheTopBit(t *testing.T) {
	c := Codec{Outlines: NewMemOutlines()}
	keys := []string{"self", "c222222222223", "j222222222223", "b222222222223", "c222222222222"}
	seen := map[uint64]string{}
	for _, k := range keys {
		v, err := c.RKey(k, true)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if other, ok := seen[v]; ok {
			t.Fatalf("%s and %s share the field %x", k, other, v)
		}
		seen[v] = k
		back, err := c.RenderRKey(v)
		if err != nil || back != k {
			t.Fatalf("%s -> %x -> %q %v", k, v, back, err)
		}
		_, tid := TIDValue(k)
		if want := k[0] >= '2' && k[0] <= 'b'; tid != want {
			t.Fatalf("%s: TID %v, want %v", k, tid, want)
		}
	}
}

func TestRecordEncodingOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	rid := func() RecordID {
		return RecordID{RKey: r.Uint64() % 5, Collection: r.Uint64() % 5, DID: r.Uint64() % 5}
	}
	var ls []Backlink
	for i := 0; i < 2000; i++ {
		ls = append(ls, Backlink{Target: rid(), Source: rid(), Location: Location(r.Uint64() % 3), SourceRev: r.Uint64() % 3})
	}
	for i := 1; i < len(ls); i++ {
		a, b := &ls[i-1], &ls[i]
		var ea, eb [BacklinkSize]byte
		a.Put(ea[:])
		b.Put(eb[:])
		if got, want := a.Compare(b), bytes.Compare(ea[:], eb[:]); got != want {
			t.Fatalf("Compare %v vs bytes %v for %+v %+v", got, want, a, b)
		}
		if GetBacklink(ea[:]) != *a {
			t.Fatalf("round trip %+v", a)
		}
	}
	v := Revocation{Source: RecordID{1, 2, 3}, Rev: 9}
	var ev [RevocationSize]byte
	v.Put(ev[:])
	if GetRevocation(ev[:]) != v {
		t.Fatal("revocation round trip")
	}
	// One target's links are contiguous in byte order.
	sort.Slice(ls, func(i, j int) bool { return ls[i].Compare(&ls[j]) < 0 })
	seen := map[RecordID]bool{}
	for i := range ls {
		if i > 0 && ls[i].Target != ls[i-1].Target {
			if seen[ls[i].Target] {
				t.Fatalf("target %v not contiguous", ls[i].Target)
			}
		}
		seen[ls[i].Target] = true
	}
}

type mapPLC map[string]uint64

func (m mapPLC) Seq(did string) (uint64, bool) { v, ok := m[did]; return v, ok }
func (m mapPLC) DID(seq uint64) (string, bool) {
	for k, v := range m {
		if v == seq {
			return k, true
		}
	}
	return "", false
}

func TestCodec(t *testing.T) {
	// The examples of seed 000.
	plc := mapPLC{"did:plc:7x6rtuenkuvxq3zsvffp2ide": 14997067, "did:plc:ia76kvnndjutgedggx2ibrem": 1726575}
	c := Codec{Outlines: NewMemOutlines(), PLC: plc}
	for did, want := range map[string]uint64{
		"did:plc:7x6rtuenkuvxq3zsvffp2ide": 14997067,
		"did:plc:ia76kvnndjutgedggx2ibrem": 1726575,
	} {
		got, err := c.DID(did, true)
		if err != nil || got != want {
			t.Fatalf("%s: %d %v", did, got, err)
		}
	}
	web, err := c.DID("did:web:example.com", true)
	if err != nil || web != 9223372036854775809 {
		t.Fatalf("did:web: %d %v", web, err)
	}
	if v, err := c.RKey("3jzfcijpj2z2a", true); err != nil || v != 1728652679052295174 {
		t.Fatalf("tid rkey: %d %v", v, err)
	}
	if v, err := c.RKey("self", true); err != nil || v != 9223372036854775809 {
		t.Fatalf("self rkey: %d %v", v, err)
	}
	if v, err := c.RKey("for-you", true); err != nil || v != 9223372036854775810 {
		t.Fatalf("for-you rkey: %d %v", v, err)
	}
	// An unknown did:plc is outlined, and stays outlined once the PLC map
	// learns it.
	late, err := c.DID("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", true)
	if err != nil || late&OutlinedBit == 0 {
		t.Fatalf("late plc: %x %v", late, err)
	}
	plc["did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"] = 42
	if again, _ := c.DID("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", false); again != late {
		t.Fatalf("encoding of a DID changed: %x -> %x", late, again)
	}
	// Read-only lookups of unknown components fail with ErrUnknown.
	if _, err := c.Record("did:web:nobody.example", "app.bsky.feed.post", "3jzfcijpj2z2a", false); err == nil {
		t.Fatal("unknown DID encoded without assign")
	}
	// Sources render back.
	uri := "at://did:web:example.com/app.bsky.feed.post/3jzfcijpj2z2a"
	tg, err := ParseTarget(uri)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Record(tg.DID, tg.Collection, tg.RKey, true)
	if err != nil {
		t.Fatal(err)
	}
	if id.Collection < CollectionFirst {
		t.Fatalf("collection %d reserved", id.Collection)
	}
	if s, err := c.RenderRecord(id); err != nil || s != uri {
		t.Fatalf("render %q %v", s, err)
	}
	// A target whose parts are all known is written in its encoding and
	// read under it and under its hash.
	if k := c.TargetKey(&tg); k != id {
		t.Fatalf("known target written as %v, want %v", k, id)
	}
	if keys, err := c.TargetKeys(&tg); err != nil || len(keys) != 2 || keys[0] != id || !keys[1].IsHashed() {
		t.Fatalf("known target's keys %v %v", keys, err)
	}
	// Bare DIDs: did:x and at://did:x are the same repository target.
	t1, _ := ParseTarget("did:plc:7x6rtuenkuvxq3zsvffp2ide")
	t2, _ := ParseTarget("at://did:plc:7x6rtuenkuvxq3zsvffp2ide")
	r1, r2 := c.TargetKey(&t1), c.TargetKey(&t2)
	if r1 != r2 || r1 != RepoID(14997067) || !r1.IsRepo() {
		t.Fatalf("repo targets %v %v", r1, r2)
	}
	// Hashed targets: URLs and handle at-uris; equal after normalisation.
	h1, _ := ParseTarget("HTTPS://Example.com:443/a/./b")
	h2, _ := ParseTarget("https://example.com/a/b")
	x1, x2 := c.TargetKey(&h1), c.TargetKey(&h2)
	if x1 != x2 || !x1.IsHashed() {
		t.Fatalf("url targets %v %v", x1, x2)
	}
	if keys, err := c.TargetKeys(&h1); err != nil || len(keys) != 1 || keys[0] != x1 {
		t.Fatalf("url target's keys %v %v", keys, err)
	}
	hh, _ := ParseTarget("at://Alice.Example.COM/app.bsky.feed.post/3jzfcijpj2z2a")
	if hh.Norm != "at://alice.example.com/app.bsky.feed.post/3jzfcijpj2z2a" || !hh.IsHashed() {
		t.Fatalf("handle at-uri %+v", hh)
	}
	if x := c.TargetKey(&hh); x == x1 || !x.IsHashed() {
		t.Fatalf("handle target %v", x)
	}
	// Locations render in both conventions.
	loc, err := c.Location(".reply.parent.uri", true, true)
	if err != nil {
		t.Fatal(err)
	}
	for style, want := range map[PathStyle]string{StyleConstellation: ".reply.parent.uri", StyleDollar: "$.reply.parent"} {
		if got, err := c.RenderLocation(loc, style); err != nil || got != want {
			t.Fatalf("style %d: %q %v", style, got, err)
		}
	}
}

func TestNormalizeURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"https://example.com", "https://example.com"},
		{"HTTPS://example.com/../", "https://example.com/"},
		{"https://EXAMPLE.com:443/", "https://example.com/"},
		{"http://example.com:80/x", "http://example.com/x"},
		{"http://example.com:8080/x", "http://example.com:8080/x"},
		{"https://example.com/%7euser/%3a%2F", "https://example.com/~user/%3A%2F"},
		{"https://example.com/a/b/../c/./d?q=%61#Frag", "https://example.com/a/c/d?q=a#Frag"},
		{"https://ja.wikipedia.org/wiki/日本", "https://ja.wikipedia.org/wiki/%E6%97%A5%E6%9C%AC"},
		{"https://bücher.example/", "https://xn--bcher-kva.example/"},
		{"https://youtu.be/oKXm4szEP1Q?si=_0n_uPu4qNKokMnq", "https://youtu.be/oKXm4szEP1Q?si=_0n_uPu4qNKokMnq"},
		{"https://[2001:DB8::1]:443/", "https://[2001:db8::1]/"},
		// The user part is normalised as a path is.
		{"https://us%65r@x.com/", "https://user@x.com/"},
		{"https://a%7cb@x.com/", "https://a%7Cb@x.com/"},
		{"https://a|b@x.com/", "https://a%7Cb@x.com/"},
		{"https://ä@x.com/", "https://%C3%A4@x.com/"},
		{"https://a@b@x.com/", "https://a%40b@x.com/"},
		{"https://u:p@x.com/", "https://u:p@x.com/"},
	}
	for _, c := range cases {
		got, err := NormalizeURL(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %q %v, want %q", c.in, got, err, c.want)
		}
		// Normalisation is idempotent.
		if again, err := NormalizeURL(got); err != nil || again != got {
			t.Errorf("%q not idempotent: %q %v", got, again, err)
		}
	}
	for _, bad := range []string{
		"https:\\bad-example.com", "https://", "https://exa mple.com", "https://example.com/%", "https://example.com/%zz",
		"https://example.com/a b", "https://ex\\ample.com", "ftp://example.com", "https://ex%41mple.com", "https://example.com:99999999/",
	} {
		if got, err := NormalizeURL(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}

func TestMemOutlines(t *testing.T) {
	m := NewMemOutlines()
	a, _ := m.Assign(OutlinePath, ".a")
	b, _ := m.Assign(OutlinePath, ".b")
	a2, _ := m.Assign(OutlinePath, ".a")
	if a != 1 || b != 2 || a2 != 1 {
		t.Fatalf("%d %d %d", a, b, a2)
	}
	if s, ok := m.Name(OutlinePath, 2); !ok || s != ".b" {
		t.Fatal(s, ok)
	}
	if _, ok := m.Name(OutlinePath, 3); ok {
		t.Fatal("name past end")
	}
	if _, ok := m.Lookup(OutlineDID, ".a"); ok {
		t.Fatal("kinds share a table")
	}
	if _, err := m.Assign(OutlinePath, ""); err == nil {
		t.Fatal("empty outline assigned")
	}
}

// TestTargetsAssignNoOutlines: a target is anyone's string, so writing
// links to unknown ones adds no outline (with the PLC map on); each is
// written under its hash, which its read keys include, and once a source
// makes its parts known the target is written in its encoding, read under
// both.
func TestTargetsAssignNoOutlines(t *testing.T) {
	out := NewMemOutlines()
	c := Codec{Outlines: out, PLC: mapPLC{"did:plc:7x6rtuenkuvxq3zsvffp2ide": 7}}
	for _, s := range []string{
		"did:web:stranger.example",
		"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", // not in the PLC map
		"at://did:plc:7x6rtuenkuvxq3zsvffp2ide/com.example.made.up/3jzfcijpj2z2a",
		"at://did:plc:7x6rtuenkuvxq3zsvffp2ide/app.bsky.feed.generator/for-you",
		"at://did:web:stranger.example/app.bsky.feed.post/3jzfcijpj2z2a",
	} {
		tg, err := ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		k := c.TargetKey(&tg)
		if !k.IsHashed() {
			t.Errorf("%s: written as %v, want its hash", s, k)
		}
		keys, err := c.TargetKeys(&tg)
		if err != nil || len(keys) != 1 || keys[0] != k {
			t.Errorf("%s: read keys %v %v, want [%v]", s, keys, err, k)
		}
		for _, kind := range OutlineKinds {
			if n := out.Len(kind); n != 0 {
				t.Fatalf("%s: %d %s outlines assigned", s, n, kind)
			}
		}
	}
	// The feed generator becomes a source: its target form is now its
	// encoding, and reads find the links written under the hash before.
	tg, _ := ParseTarget("at://did:plc:7x6rtuenkuvxq3zsvffp2ide/app.bsky.feed.generator/for-you")
	before := c.TargetKey(&tg)
	src, err := c.Record(tg.DID, tg.Collection, tg.RKey, true)
	if err != nil {
		t.Fatal(err)
	}
	if k := c.TargetKey(&tg); k != src {
		t.Fatalf("known generator written as %v, want %v", k, src)
	}
	if keys, err := c.TargetKeys(&tg); err != nil || len(keys) != 2 || keys[0] != src || keys[1] != before {
		t.Fatalf("keys %v %v, want [%v %v]", keys, err, src, before)
	}
	// With the PLC map off every DID is an outline: a target's DID is
	// outlined (so links to accounts render), its other parts are not.
	off := NewMemOutlines()
	c = Codec{Outlines: off}
	acct, _ := ParseTarget("did:web:stranger.example")
	if k := c.TargetKey(&acct); !k.IsRepo() || k.DID&OutlinedBit == 0 || off.Len(OutlineDID) != 1 {
		t.Fatalf("plc off: account target %v, %d DID outlines", k, off.Len(OutlineDID))
	}
	rec, _ := ParseTarget("at://did:web:other.example/com.example.made.up/some-key")
	if k := c.TargetKey(&rec); !k.IsHashed() || off.Len(OutlineCollection)+off.Len(OutlineRKey) != 0 || off.Len(OutlineDID) != 1 {
		t.Fatalf("plc off: record target %v, outlines: %d DIDs, %d collections, %d rkeys", k, off.Len(OutlineDID), off.Len(OutlineCollection), off.Len(OutlineRKey))
	}
	// A node without a PLC directory has an empty PLC map, not a nil one:
	// TargetDIDOutlines says the same.
	off = NewMemOutlines()
	c = Codec{Outlines: off, PLC: mapPLC{}, TargetDIDOutlines: true}
	if k := c.TargetKey(&acct); !k.IsRepo() || off.Len(OutlineDID) != 1 {
		t.Fatalf("empty PLC map: account target %v, %d DID outlines", k, off.Len(OutlineDID))
	}
}

// memNames is a Names in memory.
type memNames map[uint64]string

func (n memNames) Name(_ NameKind, v uint64) (string, bool, error) { s, ok := n[v]; return s, ok, nil }
func (n memNames) AddName(_ NameKind, v uint64, s string) string {
	if have, ok := n[v]; ok {
		return have
	}
	n[v] = s
	return s
}

// A did:plc that is not well formed is never in the PLC map: it is named,
// as a DID of another method, not outlined into every node's replicated
// state (a lax upstream could send any number of them; found by review).
// A well-formed one the map does not know is outlined, as before, and a
// malformed one outlined before keeps its outline.
func TestMalformedPLCNamed(t *testing.T) {
	out := NewMemOutlines()
	c := Codec{Outlines: out, PLC: mapPLC{}, Names: memNames{}}
	kept, err := out.Assign(OutlineDID, "did:plc:x0")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"did:plc:x1", "did:plc:AAAAAAAAAAAAAAAAAAAAAAAA", "did:plc:aaaaaaaaaaaaaaaaaaaaaaa1", "did:web:x.example"} {
		v, err := c.DID(d, true)
		if err != nil || v&NamedBit == 0 {
			t.Errorf("%s: %#x %v, want named", d, v, err)
		}
	}
	if v, err := c.DID("did:plc:x0", true); err != nil || v != OutlinedBit|kept {
		t.Errorf("did:plc:x0, outlined before: %#x %v, want its outline %d", v, err, kept)
	}
	if v, err := c.DID("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", true); err != nil || v&OutlinedBit == 0 || v&NamedBit != 0 {
		t.Errorf("a well-formed did:plc the map does not know: %#x %v, want an outline", v, err)
	}
	if n := out.Len(OutlineDID); n != 2 {
		t.Errorf("%d DID outlines, want 2", n)
	}
}
