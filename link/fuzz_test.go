package link

import "testing"

// FuzzParseTarget: parsing never panics, normalisation is idempotent, and
// equal normal forms give equal RecordIDs.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"https://example.com", "HTTPS://example.com/../", "https:\\bad-example.com",
		"at://did:plc:44ybard66vv44zksje25o7dz/app.bsky.feed.post/3jwdwj2ctlk26",
		"at://Alice.example.com/app.bsky.feed.post/3jwdwj2ctlk26", "did:web:example.com",
		"https://ja.wikipedia.org/wiki/日本?q=%7e#f", "https://[::1]:443/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		again, err := ParseTarget(tg.Norm)
		if err != nil {
			t.Fatalf("%q normalised to %q, which does not parse: %v", s, tg.Norm, err)
		}
		if again.Norm != tg.Norm || again.Kind != tg.Kind || again.DID != tg.DID || again.Collection != tg.Collection || again.RKey != tg.RKey {
			t.Fatalf("%q: %+v then %+v", s, tg, again)
		}
		c := Codec{Outlines: NewMemOutlines()}
		a, err1 := c.Target(&tg, true)
		b, err2 := c.Target(&again, false)
		if err1 != nil || err2 != nil || a != b {
			t.Fatalf("%q: ids %v %v (%v %v)", s, a, b, err1, err2)
		}
	})
}
