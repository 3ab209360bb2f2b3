package lsm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/objstoretest"
)

// A node's maps take a context: link.Codec.WithContext binds them to a
// query's.
var (
	_ link.PLCContext   = (*PLCMap)(nil)
	_ link.NamesContext = (*NameMap)(nil)
)

// TestCodecWithContext: a codec bound to a context reads the PLC map and
// the names tree within it: on a bucket that stopped answering, encoding
// and rendering a did:plc and a named record key fail (ErrLookup) when the
// context ends, not after the maps' own 30 s; unbound, with the bucket
// answering, the same codec answers; a cached value needs no read.
func TestCodecWithContext(t *testing.T) {
	ctx := context.Background()
	base, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := objstoretest.NewStalling(base, "", 0)
	f := &plcFixture{t: t, ctx: ctx, store: store, cat: NewCatalog(t.TempDir(), store)}
	if f.view, err = OpenView(ctx, f.cat, &Manifest{}); err != nil {
		t.Fatal(err)
	}
	id := randomPLC(t)
	plc := NewPLCMap(NewReader(store, nil), Views(f.current), 0)
	plc.Add(id, 42)
	pb := plc.Seal()
	plc.Published(pb, f.publish(pb))
	names := NewNameMap(NewReader(store, nil), Views(f.current), 0)
	names.Add(link.NameRKey, link.OutlinedBit|link.NamedBit|5, "self")
	b := names.Seal()
	names.Published(b, f.publishNames(b))
	fresh := func() *link.Codec {
		return &link.Codec{Outlines: link.NewMemOutlines(),
			PLC:   NewPLCMap(NewReader(store, nil), Views(f.current), 0),
			Names: NewNameMap(NewReader(store, nil), Views(f.current), 0)}
	}
	type step struct {
		what string
		do   func(c *link.Codec) error
	}
	steps := []step{
		{"encode the did:plc", func(c *link.Codec) error { _, err := c.DID(id.String(), false); return err }},
		{"render the did:plc", func(c *link.Codec) error { _, err := c.RenderDID(42); return err }},
		{"render the named key", func(c *link.Codec) error {
			_, err := c.RenderRKey(link.OutlinedBit | link.NamedBit | 5)
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(fresh().WithContext(ctx)); err != nil {
			t.Fatalf("%s, the bucket answering: %v", s.what, err)
		}
	}
	store.Stall(true)
	for _, s := range steps {
		c := fresh()
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start := time.Now()
		err := s.do(c.WithContext(dctx))
		took := time.Since(start)
		cancel()
		if !errors.Is(err, link.ErrLookup) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s, the bucket stalled: %v; want a failed lookup (link.ErrLookup) at the context's deadline", s.what, err)
		}
		if took > PLCLookupTimeout/2 {
			t.Fatalf("%s took %v: the maps' own bound, not the context's", s.what, took)
		}
		// What a map read once (here unbound, the bucket answering) is
		// cached: a bound codec answers it past its context's end.
		if s.what == "encode the did:plc" {
			c2 := fresh()
			store.Stall(false)
			if err := s.do(c2); err != nil {
				t.Fatal(err)
			}
			store.Stall(true)
			dctx, cancel := context.WithTimeout(ctx, time.Millisecond)
			<-dctx.Done()
			if err := s.do(c2.WithContext(dctx)); err != nil {
				t.Fatalf("%s, cached, past the context's end: %v", s.what, err)
			}
			cancel()
		}
	}
}
