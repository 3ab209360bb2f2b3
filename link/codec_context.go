package link

import "context"

// PLCContext is a PLC map whose lookups take a context (package lsm's
// PLCMap): a caller with a deadline of its own (a query's) bounds them by
// it instead of the map's default.
type PLCContext interface {
	SeqOf(ctx context.Context, did string) (uint64, bool, error)
	DIDOf(ctx context.Context, seq uint64) (string, bool, error)
}

// NamesContext is a Names whose lookups take a context (package lsm's
// NameMap).
type NamesContext interface {
	Lookup(ctx context.Context, kind NameKind, v uint64) (string, bool, error)
}

// WithContext returns a copy of c whose reads of the PLC map and of the
// names tree are bounded by ctx, where they take a context (PLCContext,
// NamesContext): a query's renderings then end with the query, at its
// deadline or when its client goes, instead of each read waiting out the
// maps' own bound (30 s) on an object store that does not answer. The copy
// shares c's outlines and maps.
func (c *Codec) WithContext(ctx context.Context) *Codec {
	cc := *c
	if p, ok := c.PLC.(PLCContext); ok {
		cc.PLC = ctxPLC{PLC: c.PLC, ctx: ctx, p: p}
	}
	if n, ok := c.Names.(NamesContext); ok {
		cc.Names = ctxNames{Names: c.Names, ctx: ctx, n: n}
	}
	return &cc
}

// ctxPLC is a PLCLookup whose lookups take ctx.
type ctxPLC struct {
	PLC
	ctx context.Context
	p   PLCContext
}

func (c ctxPLC) LookupSeq(did string) (uint64, bool, error) { return c.p.SeqOf(c.ctx, did) }
func (c ctxPLC) LookupDID(seq uint64) (string, bool, error) { return c.p.DIDOf(c.ctx, seq) }

func (c ctxPLC) Seq(did string) (uint64, bool) {
	s, ok, err := c.LookupSeq(did)
	return s, ok && err == nil
}

func (c ctxPLC) DID(seq uint64) (string, bool) {
	d, ok, err := c.LookupDID(seq)
	return d, ok && err == nil
}

// ctxNames is a Names whose lookups take ctx.
type ctxNames struct {
	Names
	ctx context.Context
	n   NamesContext
}

func (c ctxNames) Name(kind NameKind, v uint64) (string, bool, error) {
	return c.n.Lookup(c.ctx, kind, v)
}
