// Package rules holds the parts of the objstore contract that every Store
// implementation shares: the sentinel errors and the key, prefix and range
// checks. It exists so that objstore (which opens stores by URL) and the
// implementations (which report objstore's errors) do not import each other;
// package objstore re-exports everything here.
package rules

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Implementations wrap them with fmt.Errorf("...: %w") so
// that callers can test with errors.Is.
var (
	ErrNotFound   = errors.New("objstore: object not found")
	ErrInvalidKey = errors.New("objstore: invalid key")
	ErrRange      = errors.New("objstore: range not satisfiable")
	ErrExists     = errors.New("objstore: object exists with different content")
	// ErrUnavailable: the store did not answer (no connection, a timeout)
	// or answered with a server error; the request may succeed later.
	ErrUnavailable = errors.New("objstore: store unavailable")
)

const (
	// MaxKeyLen is the longest key, in bytes. It leaves room below S3's
	// 1024-byte limit for a store prefix of up to MaxPrefixLen bytes.
	MaxKeyLen = 512
	// MaxSegmentLen is the longest '/'-separated segment of a key, in bytes
	// (the usual file-name limit, NAME_MAX).
	MaxSegmentLen = 255
	// MaxPrefixLen is the longest prefix an S3 store may put before its keys
	// (not counting the joining '/').
	MaxPrefixLen = 1024 - MaxKeyLen - 1
)

// ValidateKey reports whether key is a valid object key, returning an error
// wrapping ErrInvalidKey if it is not. See objstore.ValidateKey for the rules.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	if err := checkChars(key); err != nil {
		return err
	}
	if key[0] == '/' {
		return fmt.Errorf("%w: %s starts with '/'", ErrInvalidKey, quote(key))
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %s has an empty segment (trailing or doubled '/')", ErrInvalidKey, quote(key))
		case seg[0] == '.':
			// Covers "." and "..", and reserves dot-names for the
			// implementations' temporary files.
			return fmt.Errorf("%w: %s has a segment starting with '.'", ErrInvalidKey, quote(key))
		case len(seg) > MaxSegmentLen:
			return fmt.Errorf("%w: %s has a segment longer than %d bytes", ErrInvalidKey, quote(key), MaxSegmentLen)
		}
	}
	return nil
}

// ValidatePrefix reports whether prefix may be passed to List: it is empty, or
// at most MaxKeyLen bytes of the characters allowed in keys and does not start
// with '/'. A valid prefix that no valid key can have simply lists nothing.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxKeyLen {
		return fmt.Errorf("%w: prefix is %d bytes, longer than %d", ErrInvalidKey, len(prefix), MaxKeyLen)
	}
	if err := checkChars(prefix); err != nil {
		return err
	}
	if prefix[0] == '/' {
		return fmt.Errorf("%w: prefix %s starts with '/'", ErrInvalidKey, quote(prefix))
	}
	return nil
}

// quote quotes s for an error message, cutting it short if long.
func quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q…", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

func checkChars(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '\\' {
			return fmt.Errorf("%w: %s has byte 0x%02x at %d (allowed: printable ASCII except '\\')", ErrInvalidKey, quote(s), c, i)
		}
	}
	return nil
}

// CheckRange validates the arguments of GetRange against an object of the
// given size, returning an error wrapping ErrRange unless 0 <= off,
// 0 <= n and off+n <= size.
func CheckRange(key string, off, n, size int64) error {
	if err := CheckRangeArgs(key, off, n); err != nil {
		return err
	}
	if off > size || n > size-off {
		return fmt.Errorf("%w: %s: bytes [%d, %d) of a %d-byte object", ErrRange, quote(key), off, off+n, size)
	}
	return nil
}

// CheckRangeArgs rejects a negative offset or length, or one whose end
// overflows int64, with an error wrapping ErrRange.
func CheckRangeArgs(key string, off, n int64) error {
	if off < 0 || n < 0 || off > (1<<63-1)-n {
		return fmt.Errorf("%w: %s: offset %d, length %d", ErrRange, quote(key), off, n)
	}
	return nil
}
