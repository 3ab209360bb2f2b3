package link

import "fmt"

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

// PLCPeek is a PLC map that can also be asked without waiting: a
// writer's, whose lookup of a DID it does not know waits for the
// directory's next poll (an author's DID, which must get its number). A
// target's DID is looked up with PeekSeq: a target the map does not know
// yet is written under its hash, which queries read too, and a record
// could name hundreds of made-up DIDs, each holding the writer for the
// wait.
type PLCPeek interface {
	PeekSeq(did string) (uint64, bool, error)
}

// IsPLCID reports whether did is a did:plc the PLC map can hold: "did:plc:"
// and 24 characters of base32 (lowercase letters, digits 2 to 7).
func IsPLCID(did string) bool {
	const prefix = "did:plc:"
	if len(did) != len(prefix)+24 || did[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(did); i++ {
		if c := did[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
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

// NameKind says which field a named value is of.
type NameKind uint8

const (
	NameRKey NameKind = 1 // a record key's (the rkey field)
	NameDID  NameKind = 2 // a DID's (the did field)
	// NameTarget is a hashed target's (Codec.NameTarget): its string
	// under the high half of its hash (the key's rkey field).
	NameTarget NameKind = 3
	// NamePath is a link path's met once the path outlines were full
	// (Codec.PathOutlinesMax): its string under the location's path value.
	NamePath NameKind = 4
	// NameCollection is a collection's met once the collection outlines
	// were full (Codec.CollectionOutlinesMax): its string under the
	// collection field's value.
	NameCollection NameKind = 5
)

func (k NameKind) String() string {
	switch k {
	case NameRKey:
		return "rkey"
	case NameDID:
		return "did"
	case NameTarget:
		return "target"
	case NamePath:
		return "path"
	case NameCollection:
		return "collection"
	}
	return fmt.Sprintf("name-kind-%d", uint8(k))
}

// Names stores the strings of named field values (Codec.RKey, Codec.DID),
// the names tree of package lsm on a node.
type Names interface {
	// Name returns the string stored under the value v of a kind's
	// field; false if v holds none. An error is a failed read.
	Name(kind NameKind, v uint64) (string, bool, error)
	// AddName gives v to s, to be stored with the next flush, unless v
	// was given to another string meanwhile; it returns the string v
	// holds then. Only the writer calls it, for a v Name found free.
	AddName(kind NameKind, v uint64, s string) string
}
