package link

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// URIs of other schemes are normalised as Constellation's parser does:
// fluent_uri_vectors.json holds that parser's answers (fluent-uri 0.3.2,
// parse then normalise) for hand-picked inputs and a sample of generated
// ones, valid and not (docs/links.md says how they were made).
func TestNormalizeURIMatchesFluentURI(t *testing.T) {
	b, err := os.ReadFile("../testdata/constellation/fluent_uri_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Cases []struct {
			In  string  `json:"in"`
			Out *string `json:"out"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	valid := 0
	for _, c := range v.Cases {
		tg, err := ParseTarget(c.In)
		if c.Out == nil {
			if err == nil {
				t.Errorf("%q: a link (%s %q), Constellation's parser refuses it", c.In, tg.Kind, tg.Norm)
			}
			continue
		}
		valid++
		if err != nil || tg.Kind != TargetURL || tg.Norm != *c.Out {
			t.Errorf("%q: %s %q %v, want uri %q", c.In, tg.Kind, tg.Norm, err, *c.Out)
		}
		// A normal form is its own normal form, so it can be asked about.
		if again, err := ParseNormalTarget(tg.Norm); err != nil || again.Norm != tg.Norm {
			t.Errorf("%q: its normal form %q parses to %q %v", c.In, tg.Norm, again.Norm, err)
		}
	}
	if valid < 300 || len(v.Cases)-valid < 150 {
		t.Fatalf("%d cases, %d valid: the vectors are not the ones checked in", len(v.Cases), valid)
	}
}

// The schemes with rules of their own never fall back to the generic URI
// rules, and text that merely begins like a scheme is ErrNotURI (which the
// extractor does not count as an invalid link), also past TargetBytesMax.
func TestOtherSchemes(t *testing.T) {
	for _, s := range []string{"AT://bad-example.com", "at://bad-example.com?q=z", "did::x", "DID:plc:abc", "http:foo", "https:/x", "HTTP:x"} {
		if tg, err := ParseTarget(s); err == nil {
			t.Errorf("%q: a link %s %q", s, tg.Kind, tg.Norm)
		} else if errors.Is(err, ErrNotURI) {
			t.Errorf("%q: taken as a URI of another scheme", s)
		}
	}
	for _, s := range []string{"Note: hi", "Update:" + strings.Repeat(" word", 1000), "foo:é"} {
		if _, err := ParseTarget(s); err != ErrNotURI {
			t.Errorf("%.20q: %v, want ErrNotURI", s, err)
		}
	}
	if _, err := ParseTarget("wss://x/" + strings.Repeat("a", TargetBytesMax)); err != ErrTooLong {
		t.Errorf("a long wss URL: %v, want ErrTooLong", err)
	}
	// A string past TargetBytesMax is only checked, never normalised (a
	// 1 MB one of dot segments took 47 MB and 226 ms to normalise).
	long := "foo:" + strings.Repeat("/a", 1<<19) + "/."
	for _, s := range []string{long, long + " text"} {
		if n := testing.AllocsPerRun(3, func() { ParseTarget(s) }); n != 0 {
			t.Errorf("a %d-byte string past the bound: %v allocations", len(s), n)
		}
	}
	// Many-to-many names a subject stored only as a hash "hash:<hex>":
	// such a name is never a target.
	for _, s := range []string{"hash:0123456789abcdef0123456789abcdef", "HASH:x"} {
		if tg, err := ParseTarget(s); err == nil {
			t.Errorf("%q: a link %s %q", s, tg.Kind, tg.Norm)
		}
	}
	for _, s := range []string{"wss://stream.place/x", "a:", "Re:"} {
		if !LooksLikeLink(s) {
			t.Errorf("%q: LooksLikeLink false", s)
		}
	}
	for _, s := range []string{"", ":", "1a:b", "hello", "a b:c", "-x:y"} {
		if LooksLikeLink(s) {
			t.Errorf("%q: LooksLikeLink true", s)
		}
	}
}
