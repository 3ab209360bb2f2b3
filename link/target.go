package link

import (
	"errors"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// TargetBytesMax bounds the length of a link target (and of any string the
// extractor considers): longer strings are never links. It is far above
// real at-uris (a record key is at most 512 bytes) and above the URL length
// browsers and crawlers keep in practice.
const TargetBytesMax = 2048

// NormBytesMax bounds the normalised form (Target.Norm) of a target of at
// most TargetBytesMax bytes whose host, if it has one, is ASCII:
// NormalizeURL writes a byte a URL may not hold literally (a non-ASCII
// byte, a '"') as three, "%XX", and lengthens nothing else. An
// internationalised host's ASCII form (IDNA: punycode, after mapping
// compatibility characters to what they stand for) can grow more than
// threefold: "http://㍿" (10 bytes; U+337F stands for "株式会社") is
// "http://xn--6oqv20b1zgzxr" (24).
const NormBytesMax = 3 * TargetBytesMax

// TargetKind says which syntax a target matched.
type TargetKind uint8

const (
	TargetUnknown TargetKind = iota
	TargetATURI              // an at:// URI
	TargetDID                // a bare DID
	TargetURL                // an http(s) URL, or a URI of another scheme
)

func (k TargetKind) String() string {
	switch k {
	case TargetATURI:
		return "at-uri"
	case TargetDID:
		return "did"
	case TargetURL:
		return "uri"
	}
	return "unknown"
}

// Errors of target parsing.
var (
	ErrNotLink    = errors.New("not a link")
	ErrTooLong    = errors.New("target too long")
	ErrInvalidURL = errors.New("invalid URL")
)

// Target is a parsed, normalised link target.
type Target struct {
	Kind TargetKind
	// Norm is the normalised target string; equal targets have equal Norm.
	Norm string
	// DID, Collection and RKey are set for targets that name a record or a
	// repository by DID: a bare DID or at://did (DID only), a DID-authority
	// at-uri with collection and record key (all three).
	DID        string
	Collection string
	RKey       string
}

// IsRecord reports whether t names one record by DID, collection and rkey.
func (t *Target) IsRecord() bool { return t.DID != "" && t.Collection != "" && t.RKey != "" }

// IsRepo reports whether t names a whole repository (a bare DID, at://did).
func (t *Target) IsRepo() bool { return t.DID != "" && t.Collection == "" }

// IsHashed reports whether t is stored under its hash (CollectionHashed).
func (t *Target) IsHashed() bool { return t.DID == "" || (t.Collection != "" && t.RKey == "") }

// hashName is what a repository or record target is hashed as when a part
// of it is unknown (Codec.TargetKey): the DID, or "at://did/collection/rkey".
// Neither is the Norm of a target that is always hashed (URLs, at-uris
// without a DID authority or a record key), so the keys never meet.
func (t *Target) hashName() string {
	if t.IsRepo() {
		return t.DID
	}
	return "at://" + t.DID + "/" + t.Collection + "/" + t.RKey
}

// LooksLikeLink is the cheap test the extractor runs on every string before
// parsing: only strings that begin with a scheme (a letter, then letters,
// digits, '+', '-' or '.') and a colon can be links.
func LooksLikeLink(s string) bool {
	if len(s) >= 5 {
		switch s[0] {
		case 'a':
			if strings.HasPrefix(s, "at://") {
				return true
			}
		case 'd':
			if strings.HasPrefix(s, "did:") {
				return true
			}
		case 'h', 'H':
			if hasPrefixFold(s, "http://") || hasPrefixFold(s, "https://") {
				return true
			}
		}
	}
	return otherScheme(s)
}

func hasPrefixFold(s, p string) bool {
	return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p)
}

// ParseTarget parses s as a link target: the whole string must be an at-uri
// (atproto's strict syntax: no query or fragment), a DID, an http(s) URL
// or a URI of another scheme (NormalizeURI).
// The returned target is normalised (see docs/links.md): a handle authority
// is lowercased; a URL's scheme and host are lowercased, its default port
// and dot segments removed, and its percent-encoding made canonical.
func ParseTarget(s string) (Target, error) {
	if len(s) > TargetBytesMax {
		if otherScheme(s) && !validURI(s) {
			// A long text that begins "Note:" is not a URI, and not a
			// link dropped for its length.
			return Target{}, ErrNotURI
		}
		return Target{}, ErrTooLong
	}
	return parseTarget(s)
}

// ParseNormalTarget is ParseTarget for a question about a target, which
// may name it by its normalised form: a string longer than TargetBytesMax
// (up to NormBytesMax) is taken when it is its own normalised form, so
// that what ParseTarget makes of a string it takes can be asked about
// (but for the internationalised hosts NormBytesMax leaves out). A longer
// string, or one that is not normalised, is ErrTooLong.
func ParseNormalTarget(s string) (Target, error) {
	if len(s) <= TargetBytesMax {
		return ParseTarget(s)
	}
	if len(s) > NormBytesMax {
		return Target{}, ErrTooLong
	}
	t, err := parseTarget(s)
	if err == nil && t.Norm != s {
		err = ErrTooLong
	}
	if err != nil {
		return Target{}, err
	}
	return t, nil
}

func parseTarget(s string) (Target, error) {
	if !LooksLikeLink(s) {
		return Target{}, ErrNotLink
	}
	switch {
	case otherScheme(s):
		n, err := NormalizeURI(s)
		if err != nil {
			return Target{}, err
		}
		return Target{Kind: TargetURL, Norm: n}, nil
	case s[0] == 'a':
		return parseATURI(s)
	case s[0] == 'd':
		if !isDID(s) {
			return Target{}, ErrNotLink
		}
		return Target{Kind: TargetDID, Norm: s, DID: s}, nil
	default:
		n, err := NormalizeURL(s)
		if err != nil {
			return Target{}, err
		}
		return Target{Kind: TargetURL, Norm: n}, nil
	}
}

func parseATURI(s string) (Target, error) {
	u, ok := parseATURIStrict(s)
	if !ok {
		return Target{}, ErrNotLink
	}
	t := Target{Kind: TargetATURI}
	if strings.HasPrefix(u.authority, "did:") {
		t.DID, t.Collection, t.RKey = u.authority, u.collection, u.rkey
		t.Norm = s
		return t, nil
	}
	// A handle authority: handles are case-insensitive, so lowercase it.
	t.Norm = "at://" + strings.ToLower(u.authority)
	if u.collection != "" {
		t.Norm += "/" + u.collection
		if u.rkey != "" {
			t.Norm += "/" + u.rkey
		}
	}
	return t, nil
}

// NormalizeURL checks and normalises an http(s) URL:
//   - the scheme and host are lowercased, an internationalised host becomes
//     its ASCII (punycode) form, a default port (:80, :443) or empty port is
//     dropped;
//   - in path, query and fragment, percent-encoded unreserved characters are
//     decoded, other percent-encodings get upper-case hex, and bytes that may
//     not appear in a URI (non-ASCII, spaces are rejected) are
//     percent-encoded as UTF-8;
//   - dot segments are removed from the path (RFC 3986 §5.2.4); an empty
//     path stays empty and the query is not reordered.
//
// A URL with a backslash, whitespace or a control character, an empty or
// malformed host, or a malformed percent-encoding is rejected.
func NormalizeURL(s string) (string, error) {
	var scheme string
	switch {
	case hasPrefixFold(s, "https://"):
		scheme, s = "https", s[len("https://"):]
	case hasPrefixFold(s, "http://"):
		scheme, s = "http", s[len("http://"):]
	default:
		return "", ErrNotLink
	}
	if !utf8.ValidString(s) {
		return "", ErrInvalidURL
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f || c == '\\' {
			return "", ErrInvalidURL
		}
	}
	end := strings.IndexAny(s, "/?#")
	if end < 0 {
		end = len(s)
	}
	authority, rest := s[:end], s[end:]
	host, err := normalizeAuthority(scheme, authority)
	if err != nil {
		return "", err
	}
	path, query, fragment := rest, "", ""
	hasQuery, hasFragment := false, false
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path, fragment, hasFragment = path[:i], path[i+1:], true
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query, hasQuery = path[:i], path[i+1:], true
	}
	var b strings.Builder
	b.Grow(len(scheme) + 3 + len(s) + 8)
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(host)
	p, err := normalizePct(path, false)
	if err != nil {
		return "", err
	}
	b.WriteString(removeDotSegments(p))
	if hasQuery {
		q, err := normalizePct(query, true)
		if err != nil {
			return "", err
		}
		b.WriteByte('?')
		b.WriteString(q)
	}
	if hasFragment {
		f, err := normalizePct(fragment, true)
		if err != nil {
			return "", err
		}
		b.WriteByte('#')
		b.WriteString(f)
	}
	return b.String(), nil
}

func normalizeAuthority(scheme, a string) (string, error) {
	userinfo := ""
	if i := strings.LastIndexByte(a, '@'); i >= 0 {
		// Normalised as a path is (an '@' before the last one escaped,
		// as it cannot stand in the user part), so that equal URLs are
		// equal strings: https://us%65r@x.com/ is https://user@x.com/.
		u, err := normalizePct(a[:i], false)
		if err != nil {
			return "", err
		}
		userinfo, a = strings.ReplaceAll(u, "@", "%40")+"@", a[i+1:]
	}
	host, port := a, ""
	if strings.HasPrefix(a, "[") { // IP literal
		i := strings.IndexByte(a, ']')
		if i < 0 {
			return "", ErrInvalidURL
		}
		host, port = a[:i+1], a[i+1:]
		for j := 1; j < i; j++ {
			c := host[j]
			if !(isHex(c) || c == ':' || c == '.') {
				return "", ErrInvalidURL
			}
		}
		host = strings.ToLower(host)
	} else {
		if i := strings.LastIndexByte(a, ':'); i >= 0 {
			host, port = a[:i], a[i:]
		}
		if host == "" {
			return "", ErrInvalidURL
		}
		ascii := true
		for i := 0; i < len(host); i++ {
			if host[i] >= 0x80 {
				ascii = false
				break
			}
		}
		if !ascii {
			h, err := idna.Lookup.ToASCII(host)
			if err != nil || h == "" {
				// IDNA maps some characters (a soft hyphen) to nothing.
				return "", ErrInvalidURL
			}
			host = h
		}
		host = strings.ToLower(host)
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
				return "", ErrInvalidURL
			}
		}
	}
	if port != "" {
		if port[0] != ':' {
			return "", ErrInvalidURL
		}
		digits := port[1:]
		for i := 0; i < len(digits); i++ {
			if digits[i] < '0' || digits[i] > '9' {
				return "", ErrInvalidURL
			}
		}
		if len(digits) > 5 {
			return "", ErrInvalidURL
		}
		if digits == "" || (scheme == "http" && digits == "80") || (scheme == "https" && digits == "443") {
			port = ""
		}
	}
	return userinfo + host + port, nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// allowed reports whether c may appear literally in a path (or, with
// queryish, a query or fragment) of a URI: unreserved, sub-delims, ':' '@'
// '/' and, in a query or fragment, '?'.
func allowed(c byte, queryish bool) bool {
	if isUnreserved(c) {
		return true
	}
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/':
		return true
	case '?':
		return queryish
	}
	return false
}

const upperHex = "0123456789ABCDEF"

func normalizePct(s string, queryish bool) (string, error) {
	clean := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || !allowed(c, queryish) {
			clean = false
			break
		}
	}
	if clean {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", ErrInvalidURL
			}
			d := unhex(s[i+1])<<4 | unhex(s[i+2])
			if isUnreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex[d>>4])
				b.WriteByte(upperHex[d&15])
			}
			i += 2
		case allowed(c, queryish):
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return b.String(), nil
}

// removeDotSegments implements RFC 3986 §5.2.4.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	in := p
	var out []string // output segments, each starting with "/" (or the first may not)
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "/..":
			in = "/"
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "." || in == "..":
			in = ""
		default:
			start := 0
			if in[0] == '/' {
				start = 1
			}
			j := strings.IndexByte(in[start:], '/')
			if j < 0 {
				out = append(out, in)
				in = ""
			} else {
				out = append(out, in[:start+j])
				in = in[start+j:]
			}
		}
	}
	return strings.Join(out, "")
}

// ValidCollection reports whether s is a valid NSID (a record collection).
func ValidCollection(s string) bool { return isNSID(s) }

// ValidRKey reports whether s is a valid record key.
func ValidRKey(s string) bool { return isRKey(s) }

// ValidDID reports whether s is a valid DID.
func ValidDID(s string) bool { return isDID(s) }
