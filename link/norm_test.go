package link

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// A target's normalised form may be longer than TargetBytesMax (a URL's
// non-ASCII bytes percent-encoded), up to NormBytesMax when its host is
// ASCII; ParseNormalTarget takes such a form, and only a normalised one.
func TestNormBytesMax(t *testing.T) {
	// The longest: every byte after "http://a/" written as three.
	worst := "http://a/" + strings.Repeat("é", (TargetBytesMax-len("http://a/"))/2)
	tg, err := ParseTarget(worst)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tg.Norm); n <= TargetBytesMax || n > NormBytesMax {
		t.Fatalf("normal form of %d bytes from %d", n, len(worst))
	}
	if _, err := ParseTarget(tg.Norm); err != ErrTooLong {
		t.Fatalf("ParseTarget of a %d-byte normal form: %v, want ErrTooLong", len(tg.Norm), err)
	}
	again, err := ParseNormalTarget(tg.Norm)
	if err != nil || again != tg {
		t.Fatalf("ParseNormalTarget of the normal form: %+v %v", again, err)
	}
	for _, bad := range []string{
		strings.ToUpper(tg.Norm[:8]) + tg.Norm[8:],                                   // not normalised
		"http://a/" + strings.Repeat("é", TargetBytesMax),                            // not normalised
		"http://a/" + strings.Repeat("%C3%A9", NormBytesMax/6),                       // past NormBytesMax
		"at://did:plc:abc/app.bsky.feed.post/" + strings.Repeat("a", TargetBytesMax), // an at-uri past TargetBytesMax (its own normal form, but no rkey is that long)
	} {
		if _, err := ParseNormalTarget(bad); err == nil {
			t.Errorf("ParseNormalTarget of %.40q… (%d bytes): no error", bad, len(bad))
		}
	}
	if _, err := ParseNormalTarget("not a link"); err != ErrNotLink {
		t.Errorf("ParseNormalTarget of a short string that is no link: %v", err)
	}

	// Any URL with an ASCII host grows at most threefold.
	pieces := []string{"é", "日", "😀", "\"", "<", "%41", "%e2%82%ac", "a", "/", "?", "#", "..", "./", "@", " "}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var b strings.Builder
		b.WriteString([]string{"http://", "https://", "HTTPS://u@", "http://x%41@"}[i%4])
		b.WriteString([]string{"example.com", "EXAMPLE.com:443", "[::1]", "a"}[i/4%4])
		b.WriteByte('/')
		for b.Len() < TargetBytesMax-8 && rng.IntN(200) != 0 {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		tg, err := ParseTarget(s)
		if err != nil {
			continue
		}
		if len(tg.Norm) > 3*len(s) || len(tg.Norm) > NormBytesMax {
			t.Fatalf("%q: normal form of %d bytes from %d", s, len(tg.Norm), len(s))
		}
		if again, err := ParseNormalTarget(tg.Norm); err != nil || again != tg {
			t.Fatalf("%q: its normal form parses to %+v %v", s, again, err)
		}
	}

	// An internationalised host can grow more (NormBytesMax leaves it
	// out): each "㍿." of 4 bytes is "xn--6oqv20b1zgzxr." of 18.
	s := "http://" + strings.Repeat("㍿.", 20) + "example/"
	idn, err := ParseTarget(s)
	if err != nil || len(idn.Norm) <= 3*len(s) {
		t.Fatalf("%s: %q %v", s, idn.Norm, err)
	}
}
