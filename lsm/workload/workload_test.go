package workload

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

func digest(w *Workload) [32]byte {
	h := sha256.New()
	var b [link.BacklinkSize]byte
	for i := range w.Links {
		w.Links[i].Put(b[:])
		h.Write(b[:])
	}
	var r [link.RevocationSize]byte
	for _, v := range w.Revocations {
		v.Put(r[:])
		h.Write(r[:])
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}

func TestDeterministic(t *testing.T) {
	a, err := Generate(Config{Links: 20000, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(Config{Links: 20000, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Generate(Config{Links: 20000, Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	if digest(a) != digest(b) {
		t.Fatal("same seed, different workloads")
	}
	if digest(a) == digest(c) {
		t.Fatal("different seeds, same workload")
	}
}

func TestShape(t *testing.T) {
	const n = 50000
	w, err := Generate(Config{Links: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Links) != n || len(w.LinkTarget) != n {
		t.Fatalf("%d links, want %d", len(w.Links), n)
	}
	if got := w.WrittenCount(w.Mega); got != n/2 {
		t.Fatalf("mega target has %d links, want %d", got, n/2)
	}
	// Stamps increase; every source is written once, with all its links
	// together.
	var last uint64
	sources := map[link.RecordID]uint64{}
	for i, l := range w.Links {
		if l.SourceRev < last {
			t.Fatalf("link %d: rev %d after %d", i, l.SourceRev, last)
		}
		last = l.SourceRev
		if r, ok := sources[l.Source]; ok && r != l.SourceRev {
			t.Fatalf("link %d: source %v written at %d and %d", i, l.Source, r, l.SourceRev)
		}
		sources[l.Source] = l.SourceRev
	}
	// Revocations come later than their links, in stamp order, and
	// revoke exactly their record's links.
	lastAt, lastRev := 0, uint64(0)
	for _, v := range w.Revocations {
		if v.At < lastAt || v.Rev <= lastRev || v.At > n {
			t.Fatalf("revocation out of order: %+v", v)
		}
		lastAt, lastRev = v.At, v.Rev
		if v.First+v.Count > v.At {
			t.Fatalf("revocation %+v before its links", v)
		}
		for i := v.First; i < v.First+v.Count; i++ {
			if w.Links[i].Source != v.Source || w.Links[i].SourceRev >= v.Rev || w.Live(i) {
				t.Fatalf("revocation %+v vs link %d %+v", v, i, w.Links[i])
			}
		}
	}
	frac := float64(w.RevokedLinks()) / n
	if frac < 0.08 || frac > 0.12 {
		t.Fatalf("%.3f of links revoked", frac)
	}
	// No two links share target, source and location.
	type key struct {
		t, s link.RecordID
		l    link.Location
	}
	dup := map[key]bool{}
	for _, l := range w.Links {
		k := key{l.Target, l.Source, l.Location}
		if dup[k] {
			t.Fatalf("duplicate link %+v", l)
		}
		dup[k] = true
	}
	st := w.Stats()
	t.Logf("stats: %+v", st)
	for _, k := range []string{"record", "account", "url"} {
		if st.ByKind[k] == 0 {
			t.Fatalf("no links to %s targets", k)
		}
	}
	if len(st.ByCollection) < 20 {
		t.Fatalf("only %d collections", len(st.ByCollection))
	}
	live := 0
	for ti := range w.Targets {
		live += w.LiveCount(int32(ti))
		if got := len(w.Expected(int32(ti), 0)); got != w.LiveCount(int32(ti)) {
			t.Fatalf("target %d: %d expected, %d live", ti, got, w.LiveCount(int32(ti)))
		}
	}
	if live != w.LiveLinks() {
		t.Fatalf("live %d != %d", live, w.LiveLinks())
	}
}

// Every rendered key parses back, through the link package, to the link.
func TestKeysRoundTrip(t *testing.T) {
	w, err := Generate(Config{Links: 20000, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var plcInline, outlined int
	var buf []byte
	for i := range w.Links {
		l := &w.Links[i]
		buf, err = w.Key(buf[:0], i)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(buf, []byte(w.Targets[w.LinkTarget[i]].Text+"\x00")) {
			t.Fatalf("key %q does not start with target %q", buf, w.Targets[w.LinkTarget[i]].Text)
		}
		parts := strings.Split(string(buf), "\x00")
		if len(parts) != 5 {
			t.Fatalf("key %q", buf)
		}
		tg, err := link.ParseTarget(parts[0])
		if err != nil {
			t.Fatalf("target %q: %v", parts[0], err)
		}
		keys, err := w.Codec.TargetKeys(&tg)
		if err != nil || keys[0] != l.Target {
			t.Fatalf("target %q encodes to %v (%v), link has %v", parts[0], keys, err, l.Target)
		}
		src, err := w.Codec.Record(parts[3], parts[1], parts[4], false)
		if err != nil || src != l.Source {
			t.Fatalf("source %q encodes to %v (%v), link has %v", parts, src, err, l.Source)
		}
		loc, err := w.Codec.Location(parts[2], l.Location.StrongRef(), false)
		if err != nil || loc != l.Location || !strings.HasPrefix(parts[2], ".") {
			t.Fatalf("path %q: %v %v", parts[2], loc, err)
		}
		if l.Source.DID&link.OutlinedBit == 0 {
			plcInline++
		} else {
			outlined++
		}
	}
	if plcInline == 0 || outlined == 0 || outlined > plcInline/10 {
		t.Fatalf("%d inline did:plc sources, %d outlined", plcInline, outlined)
	}
}
