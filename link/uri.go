package link

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// ErrNotURI: a string that begins like a URI of another scheme (a scheme,
// then a colon) but is not one. Such strings are everywhere in records
// ("Note: …" in a post's text), so the extractor does not count them as
// invalid links.
var ErrNotURI = errors.New("not a URI")

// uriScheme returns the length of s's scheme when s begins with one and a
// colon (RFC 3986: a letter, then letters, digits, '+', '-' or '.'), or 0.
func uriScheme(s string) int {
	if s == "" || !isAlpha(s[0]) {
		return 0
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ':':
			return i
		case isAlnum(c), c == '+', c == '-', c == '.':
		default:
			return 0
		}
	}
	return 0
}

// otherScheme reports whether s begins with a scheme that is not one of
// the schemes with rules of their own (at, did, http, https: a string of
// those that fails their rules is not a link under another name) or
// "hash", which many-to-many answers use to name a subject stored only as
// a hash (hash:<32 hex digits>), so that such a name is never also a
// target.
func otherScheme(s string) bool {
	n := uriScheme(s)
	if n == 0 {
		return false
	}
	for _, own := range [...]string{"at", "did", "http", "https", "hash"} {
		if strings.EqualFold(s[:n], own) {
			return false
		}
	}
	return true
}

// NormalizeURI checks and normalises a URI of a scheme other than at, did,
// http and https, as Constellation's parser does (RFC 3986, ASCII only,
// then its normalisation): the scheme is lowercased; so is a registered
// name's host, an IPv6 address takes its canonical text (RFC 5952, an
// IPv4-mapped one in dotted form); in every part, percent-encoded
// unreserved characters are decoded and other percent-encodings get
// upper-case hex; dot segments are removed from a path that begins with
// '/'; an empty port is dropped, any other kept. Nothing else changes.
//
// A path without an authority that would begin with "//" once its dot
// segments are gone keeps a "/." before it ("foo:/..//x" is "foo:/.//x"),
// or it would read as an authority.
func NormalizeURI(s string) (string, error) {
	u, ok := splitURI(s)
	if !ok {
		return "", ErrNotURI
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteString(strings.ToLower(u.scheme))
	b.WriteByte(':')
	if u.hasAuthority {
		b.WriteString("//")
		if u.hasUserinfo {
			b.WriteString(pctCanonical(u.userinfo, false))
			b.WriteByte('@')
		}
		if u.ipLiteral != "" {
			b.WriteString(u.ipLiteral)
		} else {
			b.WriteString(pctCanonical(u.host, true))
		}
		if u.port != ":" {
			b.WriteString(u.port)
		}
	}
	hasQuery, hasFragment := u.hasQuery, u.hasFragment
	path, query, fragment := u.path, u.query, u.fragment
	p := pctCanonical(path, false)
	if strings.HasPrefix(p, "/") {
		p = removeDotSegments(p)
	}
	if !u.hasAuthority && strings.HasPrefix(p, "//") {
		// Without this the path would read as an authority.
		b.WriteString("/.")
	}
	b.WriteString(p)
	if hasQuery {
		b.WriteByte('?')
		b.WriteString(pctCanonical(query, false))
	}
	if hasFragment {
		b.WriteByte('#')
		b.WriteString(pctCanonical(fragment, false))
	}
	return b.String(), nil
}

// uriParts are a valid URI's parts, as written (but an IP literal's,
// canonical).
type uriParts struct {
	scheme                          string
	hasAuthority, hasUserinfo       bool
	userinfo, host, ipLiteral, port string // port: "" or ":" and its digits
	path, query, fragment           string
	hasQuery, hasFragment           bool
}

// validURI reports whether s is a URI of another scheme, reading it once
// and building nothing: what ParseTarget asks of a string too long to be
// a link, which may be a whole post's text.
func validURI(s string) bool {
	_, ok := splitURI(s)
	return ok
}

// splitURI checks s against RFC 3986's URI grammar (ASCII only) and splits
// it into its parts.
func splitURI(s string) (uriParts, bool) {
	var u uriParts
	n := uriScheme(s)
	if n == 0 {
		return u, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return u, false
		}
	}
	u.scheme = s[:n]
	rest := s[n+1:]
	if strings.HasPrefix(rest, "//") {
		u.hasAuthority = true
		rest = rest[2:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if !u.splitAuthority(rest[:end]) {
			return u, false
		}
		rest = rest[end:]
	}
	u.path = rest
	if i := strings.IndexByte(u.path, '#'); i >= 0 {
		u.path, u.fragment, u.hasFragment = u.path[:i], u.path[i+1:], true
	}
	if i := strings.IndexByte(u.path, '?'); i >= 0 {
		u.path, u.query, u.hasQuery = u.path[:i], u.path[i+1:], true
	}
	ok := validURIPart(u.path, pathChar) && validURIPart(u.query, queryChar) && validURIPart(u.fragment, queryChar)
	return u, ok
}

// splitAuthority checks and splits an authority (what lies between "//"
// and the path): [userinfo "@"] host [":" port].
func (u *uriParts) splitAuthority(a string) bool {
	if i := strings.IndexByte(a, '@'); i >= 0 {
		if !validURIPart(a[:i], userinfoChar) {
			return false
		}
		u.hasUserinfo, u.userinfo, a = true, a[:i], a[i+1:]
	}
	if strings.HasPrefix(a, "[") {
		i := strings.IndexByte(a, ']')
		if i < 0 {
			return false
		}
		h, ok := ipLiteral(a[1:i])
		if !ok {
			return false
		}
		u.ipLiteral, u.port = "["+h+"]", a[i+1:]
	} else {
		u.host = a
		if i := strings.IndexByte(a, ':'); i >= 0 {
			u.host, u.port = a[:i], a[i:]
		}
		if !validURIPart(u.host, regNameChar) {
			return false
		}
	}
	if u.port != "" {
		if u.port[0] != ':' {
			return false
		}
		for i := 1; i < len(u.port); i++ {
			if u.port[i] < '0' || u.port[i] > '9' {
				return false
			}
		}
	}
	return true
}

// ipLiteral checks what lies between an IP literal's brackets and returns
// its canonical form: an IPv6 address (RFC 3986's grammar: no zone) as
// RFC 5952 writes it, or an IPvFuture ("v" hex "." …) lowercased.
func ipLiteral(s string) (string, bool) {
	if s != "" && s[0]|0x20 == 'v' {
		dot := strings.IndexByte(s, '.')
		if dot < 2 || dot == len(s)-1 {
			return "", false
		}
		for i := 1; i < dot; i++ {
			if !isHex(s[i]) {
				return "", false
			}
		}
		for i := dot + 1; i < len(s); i++ {
			if c := s[i]; !isUnreserved(c) && !isSubDelim(c) && c != ':' {
				return "", false
			}
		}
		return strings.ToLower(s), true
	}
	if strings.IndexByte(s, '%') >= 0 || strings.IndexByte(s, ':') < 0 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isHex(c) && c != ':' && c != '.' {
			return "", false
		}
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || !ip.Is6() {
		return "", false
	}
	return ipv6Text(ip.As16()), true
}

// ipv6Text writes an IPv6 address as RFC 5952 does: lower-case hex without
// leading zeros, the first longest run of two or more zero groups as "::",
// and an IPv4-mapped address's last 32 bits in dotted form.
func ipv6Text(a [16]byte) string {
	var g [8]uint16
	for i := range g {
		g[i] = uint16(a[2*i])<<8 | uint16(a[2*i+1])
	}
	if g == [8]uint16{5: 0xffff, 6: g[6], 7: g[7]} {
		return "::ffff:" + strconv.Itoa(int(a[12])) + "." + strconv.Itoa(int(a[13])) + "." + strconv.Itoa(int(a[14])) + "." + strconv.Itoa(int(a[15]))
	}
	zs, zl := 0, 0
	for i := 0; i < 8; {
		if g[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && g[j] == 0 {
			j++
		}
		if j-i > zl {
			zs, zl = i, j-i
		}
		i = j
	}
	hexes := func(gs []uint16) string {
		parts := make([]string, len(gs))
		for i, x := range gs {
			parts[i] = strconv.FormatUint(uint64(x), 16)
		}
		return strings.Join(parts, ":")
	}
	if zl < 2 {
		return hexes(g[:])
	}
	return hexes(g[:zs]) + "::" + hexes(g[zs+zl:])
}

func isSubDelim(c byte) bool {
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=':
		return true
	}
	return false
}

// The characters each part of a URI may hold literally, besides
// percent-encodings (RFC 3986 §3).
func regNameChar(c byte) bool  { return isUnreserved(c) || isSubDelim(c) }
func userinfoChar(c byte) bool { return regNameChar(c) || c == ':' }
func pathChar(c byte) bool     { return userinfoChar(c) || c == '@' || c == '/' }
func queryChar(c byte) bool    { return pathChar(c) || c == '?' }

// validURIPart reports whether s holds only chars that ok allows and
// well-formed percent-encodings.
func validURIPart(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
			continue
		}
		if !ok(c) {
			return false
		}
	}
	return true
}

// pctCanonical decodes the percent-encoded unreserved characters of a
// valid part and writes other percent-encodings with upper-case hex;
// lower also lowercases its letters (a host's).
func pctCanonical(s string, lower bool) string {
	if strings.IndexByte(s, '%') < 0 && (!lower || strings.ToLower(s) == s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			d := unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
			if !isUnreserved(d) {
				b.WriteByte('%')
				b.WriteByte(upperHex[d>>4])
				b.WriteByte(upperHex[d&15])
				continue
			}
			c = d
		}
		if lower && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}
