package link

import "strings"

// Hand-written checks of the atproto identifier syntaxes. They accept
// exactly what indigo's atproto/syntax regular expressions accept (a
// differential fuzz test holds them to it) at a fraction of the cost: the
// extractor runs them on every link-like string of every record.

const (
	didBytesMax    = 2048
	handleBytesMax = 253
	nsidBytesMax   = 317
	rkeyBytesMax   = 512
	atURIBytesMax  = 8192
)

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool { return isAlpha(c) || isDigit(c) }

// isDID: ^did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]$, at most 2048 bytes.
func isDID(s string) bool {
	if len(s) > didBytesMax || !strings.HasPrefix(s, "did:") {
		return false
	}
	i := 4
	for i < len(s) && isLower(s[i]) {
		i++
	}
	if i == 4 || i >= len(s) || s[i] != ':' {
		return false
	}
	i++
	if i >= len(s) {
		return false
	}
	for ; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || c == '.' || c == '_' || c == ':' || c == '%' || c == '-') {
			return false
		}
	}
	last := s[len(s)-1]
	return last != ':' && last != '%'
}

// label checks one DNS-style label: 1..63 bytes of [a-zA-Z0-9-], not
// starting or ending with '-'.
func label(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(isAlnum(s[i]) || s[i] == '-') {
			return false
		}
	}
	return true
}

// isHandle: two or more labels, the last starting with a letter; at most
// 253 bytes.
func isHandle(s string) bool {
	if len(s) == 0 || len(s) > handleBytesMax {
		return false
	}
	n := 0
	for rest := s; ; {
		i := strings.IndexByte(rest, '.')
		part := rest
		if i >= 0 {
			part = rest[:i]
		}
		if !label(part) {
			return false
		}
		n++
		if i < 0 {
			return n >= 2 && isAlpha(part[0])
		}
		rest = rest[i+1:]
	}
}

// isNSID: a first segment starting with a letter, one or more middle
// segments (labels starting and ending alphanumeric), and a name segment of
// a letter then letters and digits; at most 317 bytes.
func isNSID(s string) bool {
	if len(s) == 0 || len(s) > nsidBytesMax {
		return false
	}
	segs := 0
	for rest := s; ; {
		i := strings.IndexByte(rest, '.')
		part := rest
		if i >= 0 {
			part = rest[:i]
		}
		if i < 0 { // the name segment
			if len(part) == 0 || len(part) > 63 || !isAlpha(part[0]) {
				return false
			}
			for j := 1; j < len(part); j++ {
				if !isAlnum(part[j]) {
					return false
				}
			}
			return segs >= 2
		}
		if !label(part) || (segs == 0 && !isAlpha(part[0])) {
			return false
		}
		segs++
		rest = rest[i+1:]
	}
}

// isRKey: 1..512 bytes of [a-zA-Z0-9_~.:-], not "." or "..".
func isRKey(s string) bool {
	if len(s) == 0 || len(s) > rkeyBytesMax || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || c == '_' || c == '~' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// tidValue decodes a TID: 13 characters of the base32-sortable alphabet,
// the first in 2-7ab, so that the integer's top bit is 0, as the TID spec
// says it always is. atproto's TID syntax lets the first character go up
// to j (the top bit set), and such a string is a valid record key anyone
// can use; but a record key's field keeps its top bit for OutlinedBit, so
// those are not TIDs here: they are named as other record keys are.
func tidValue(s string) (uint64, bool) {
	if len(s) != 13 {
		return 0, false
	}
	var v uint64
	for i := 0; i < 13; i++ {
		c := s[i]
		var d byte
		switch {
		case c >= '2' && c <= '7':
			d = c - '2'
		case c >= 'a' && c <= 'z':
			d = c - 'a' + 6
		default:
			return 0, false
		}
		if i == 0 && d > 7 {
			return 0, false
		}
		v = v<<5 | uint64(d)
	}
	return v, true
}

// atURI is a parsed at-uri.
type atURI struct {
	authority, collection, rkey string
}

// parseATURIStrict parses atproto's strict at-uri syntax: at://authority
// (a DID or a handle), optionally /collection (an NSID), optionally /rkey;
// no query, fragment or trailing slash; at most 8192 bytes.
func parseATURIStrict(s string) (atURI, bool) {
	if len(s) > atURIBytesMax || !strings.HasPrefix(s, "at://") {
		return atURI{}, false
	}
	rest := s[5:]
	var u atURI
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		u.authority = rest
	} else {
		u.authority, rest = rest[:i], rest[i+1:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			u.collection = rest
			if rest == "" {
				return atURI{}, false
			}
		} else {
			u.collection, u.rkey = rest[:j], rest[j+1:]
			if u.rkey == "" || !isRKey(u.rkey) {
				return atURI{}, false
			}
		}
		if !isNSID(u.collection) {
			return atURI{}, false
		}
	}
	if strings.HasPrefix(u.authority, "did:") {
		if !isDID(u.authority) {
			return atURI{}, false
		}
	} else if !isHandle(u.authority) {
		return atURI{}, false
	}
	return u, true
}
