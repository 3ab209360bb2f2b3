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

// Names stores the strings of named field values (named record keys: see
// Codec.RKey), the names tree of package lsm on a node.
type Names interface {
	// RKeyName returns the record key stored under the rkey field value
	// v; false if v holds none. An error is a failed read.
	RKeyName(v uint64) (string, bool, error)
	// AddRKeyName gives v to rkey, to be stored with the next flush,
	// unless v was given to another key meanwhile; it returns the key v
	// holds then. Only the writer calls it, for a v RKeyName found free.
	AddRKeyName(v uint64, rkey string) string
}
