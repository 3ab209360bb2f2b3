package link

import (
	"slices"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// FuzzParseTarget: parsing never panics, normalisation is idempotent (a
// normal form past TargetBytesMax is taken by ParseNormalTarget), and
// equal normal forms give equal RecordIDs.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"https://example.com", "HTTPS://example.com/../", "https:\\bad-example.com",
		"at://did:plc:44ybard66vv44zksje25o7dz/app.bsky.feed.post/3jwdwj2ctlk26",
		"at://Alice.example.com/app.bsky.feed.post/3jwdwj2ctlk26", "did:web:example.com",
		"https://ja.wikipedia.org/wiki/日本?q=%7e#f", "https://[::1]:443/x",
		"https://example.com/" + strings.Repeat("日", 600),
		"wss://Stream.Place:443/a/./b/../c?%7e=%2f#Frag", "foo:/.//x", "foo://[0:0:0:0:0:0:0:1]:80", "foo://u%41@H%41st/%7E%2f/", "Note: hi",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		if len(tg.Norm) > NormBytesMax {
			return // an internationalised host's (NormBytesMax)
		}
		again, err := ParseNormalTarget(tg.Norm)
		if err != nil {
			t.Fatalf("%q normalised to %q, which does not parse: %v", s, tg.Norm, err)
		}
		if again.Norm != tg.Norm || again.Kind != tg.Kind || again.DID != tg.DID || again.Collection != tg.Collection || again.RKey != tg.RKey {
			t.Fatalf("%q: %+v then %+v", s, tg, again)
		}
		c := Codec{Outlines: NewMemOutlines()}
		a := c.TargetKey(&tg)
		keys, err := c.TargetKeys(&again)
		if err != nil || !slices.Contains(keys, a) {
			t.Fatalf("%q: written as %v, read as %v (%v)", s, a, keys, err)
		}
	})
}

// FuzzSyntaxMatchesIndigo holds the hand-written syntax checks to indigo's
// atproto/syntax parsers: both accept exactly the same strings.
func FuzzSyntaxMatchesIndigo(f *testing.F) {
	for _, s := range []string{
		"did:plc:44ybard66vv44zksje25o7dz", "did:web:example.com", "did:m:v:", "did:method::::val", "did:a:%", "did:a:b%",
		"at://did:plc:44ybard66vv44zksje25o7dz/app.bsky.feed.post/3jwdwj2ctlk26", "at://user.bsky.social", "at://a.b/c.d.e",
		"at://did:abc:123/io.nsid.someFunc/self.", "at://a.b/c.d.e/", "app.bsky.feed.post", "a-b.c.d", "a.b.c-d", "com.example.fooBar",
		"3jwdwj2ctlk26", "self", ".", "..", "a~b", "7777777777777", "k222222222222", "handle.invalid", "xn--ls8h.test",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := syntax.ParseDID(s)
		if isDID(s) != (err == nil) {
			t.Fatalf("did %q: ours %v, indigo %v", s, isDID(s), err)
		}
		_, err = syntax.ParseNSID(s)
		if isNSID(s) != (err == nil) {
			t.Fatalf("nsid %q: ours %v, indigo %v", s, isNSID(s), err)
		}
		_, err = syntax.ParseRecordKey(s)
		if isRKey(s) != (err == nil) {
			t.Fatalf("rkey %q: ours %v, indigo %v", s, isRKey(s), err)
		}
		_, err = syntax.ParseHandle(s)
		if isHandle(s) != (err == nil) {
			t.Fatalf("handle %q: ours %v, indigo %v", s, isHandle(s), err)
		}
		tid, err := syntax.ParseTID(s)
		v, ok := tidValue(s)
		if ok != (err == nil) || (ok && v != tid.Integer()) {
			t.Fatalf("tid %q: ours %d %v, indigo %v", s, v, ok, err)
		}
		_, err = syntax.ParseATURI(s)
		_, ok = parseATURIStrict(s)
		if ok != (err == nil) {
			t.Fatalf("at-uri %q: ours %v, indigo %v", s, ok, err)
		}
	})
}
