package link

// PLCLookup is a PLC map whose lookups can fail: one read from object
// storage. Codec uses these methods when its PLC has them, so that a read
// error is an error, never "unknown": encoding a did:plc the map knows as
// an outline because a read failed would split its links between two
// encodings, and a query would answer "no links" instead of failing.
type PLCLookup interface {
	PLC
	LookupSeq(did string) (uint64, bool, error)
	LookupDID(seq uint64) (string, bool, error)
}

func plcSeq(p PLC, did string) (uint64, bool, error) {
	if l, ok := p.(PLCLookup); ok {
		return l.LookupSeq(did)
	}
	s, ok := p.Seq(did)
	return s, ok, nil
}

func plcDID(p PLC, seq uint64) (string, bool, error) {
	if l, ok := p.(PLCLookup); ok {
		return l.LookupDID(seq)
	}
	s, ok := p.DID(seq)
	return s, ok, nil
}
