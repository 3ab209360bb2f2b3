// Package objstore is eddy's object-store layer: a small interface, Store,
// over immutable objects addressed by string keys, in the style of
// litestream's ReplicaClient. The LSM tables live in such a store.
//
// Implementations are in the subpackages local (a directory on a local
// file system) and s3 (S3 or MinIO through minio-go); Open picks one from a
// URL. Counting wraps any Store to count its requests and bytes. The
// conformance suite in objstoretest checks an implementation against every
// rule documented on Store.
package objstore

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/eddy-backlinks/eddy/objstore/internal/rules"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// Sentinel errors. Store methods return errors that wrap them, so test with
// errors.Is, never ==.
var (
	// ErrNotFound: no object has the key.
	ErrNotFound = rules.ErrNotFound
	// ErrInvalidKey: the key or list prefix breaks the rules of ValidateKey
	// or ValidatePrefix.
	ErrInvalidKey = rules.ErrInvalidKey
	// ErrRange: a GetRange whose range is negative or ends past the object.
	ErrRange = rules.ErrRange
	// ErrExists: a Put of a key that already holds different bytes.
	ErrExists = rules.ErrExists
	// ErrUnavailable: the store did not answer, or answered with a server
	// error (S3's 5xx: InternalError, ServiceUnavailable, SlowDown), after
	// the client's own retries; the request may succeed later.
	ErrUnavailable = rules.ErrUnavailable
)

// Key limits; see ValidateKey.
const (
	MaxKeyLen     = rules.MaxKeyLen
	MaxSegmentLen = rules.MaxSegmentLen
)

// ValidateKey returns nil if key is a valid object key, else an error
// wrapping ErrInvalidKey. A valid key
//   - is 1 to MaxKeyLen bytes long;
//   - is printable ASCII (0x20 to 0x7e) other than '\';
//   - does not start or end with '/', and has no "//";
//   - has no '/'-separated segment that starts with '.' (so no "." or ".."
//     segments; dot-names are reserved for the stores' temporary files);
//   - has no segment longer than MaxSegmentLen bytes.
//
// Keys are compared as byte strings. A key must not also be a directory of
// another key: storing both "a" and "a/b" is not supported (a local store
// cannot represent it, and Put fails for the second one).
func ValidateKey(key string) error { return rules.ValidateKey(key) }

// ValidatePrefix returns nil if prefix may be given to List, else an error
// wrapping ErrInvalidKey: it must be empty, or printable ASCII other than '\'
// of at most MaxKeyLen bytes not starting with '/'. Unlike a key it need not
// end at a segment boundary: "tables/00" lists "tables/0012.sst".
func ValidatePrefix(prefix string) error { return rules.ValidatePrefix(prefix) }

// Store is a flat namespace of immutable objects. Every method is safe for
// concurrent use. Every method first validates its key (or prefix) and fails
// with an error wrapping ErrInvalidKey, before any I/O, if it is invalid.
// A call whose context is already canceled fails with an error wrapping the
// context's error.
type Store interface {
	// Put stores data under key. Objects are immutable: if key already
	// holds exactly data, Put succeeds without changing anything (so a
	// retried Put is harmless); if it holds different bytes, Put fails
	// with an error wrapping ErrExists and the object is unchanged. Of
	// concurrent Puts of different data to a new key exactly one succeeds.
	// The object appears atomically: a reader sees all of data or
	// ErrNotFound, never a part. When Put returns nil the object is
	// durable. Put does not keep data after it returns; data may be empty.
	Put(ctx context.Context, key string, data []byte) error

	// Get returns the whole object, in a slice the caller owns. A missing
	// key fails with an error wrapping ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)

	// GetRange returns exactly n bytes of the object starting at byte off,
	// or an error. A missing key fails with an error wrapping ErrNotFound.
	// Negative off or n, or a range that ends past the object (off+n >
	// size), fails with an error wrapping ErrRange; n == 0 with
	// off <= size returns an empty slice.
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, error)

	// Size returns the object's length in bytes (an S3 HEAD). A missing
	// key fails with an error wrapping ErrNotFound.
	Size(ctx context.Context, key string) (int64, error)

	// List calls fn with the key and size of every object whose key starts
	// with prefix ("" lists all), in increasing byte-wise lexicographic
	// order of key, each key once. If fn returns an error, List stops and
	// returns that error (wrapped or as is; errors.Is holds). fn may call
	// the Store's other methods; objects Put or Deleted during a List may
	// or may not be seen. An invalid prefix (see ValidatePrefix) fails with
	// ErrInvalidKey.
	List(ctx context.Context, prefix string, fn func(key string, size int64) error) error

	// Delete removes the object. Deleting a missing key is not an error.
	// After Delete returns nil, Get fails with ErrNotFound, List does not
	// show the key, and a Put may store new content under it.
	Delete(ctx context.Context, key string) error
}

// Environment variables read by Open for S3 credentials.
const (
	EnvS3AccessKey = s3.EnvAccessKey // EDDY_S3_ACCESS_KEY
	EnvS3SecretKey = s3.EnvSecretKey // EDDY_S3_SECRET_KEY
)

// Open returns the Store that rawURL names:
//
//   - file:///abs/dir, or a plain path (relative paths are made absolute):
//     a local.Store in that directory, created if missing.
//   - s3://bucket/prefix?endpoint=host:port&region=us-east-1&insecure=true:
//     an s3.Store for the bucket, with keys under the optional prefix. The
//     endpoint defaults to AWS (s3.amazonaws.com); insecure=true uses
//     plain HTTP. Any other endpoint is addressed path-style, as MinIO
//     wants. Credentials come from the query parameters
//     access_key_file and secret_key_file (files holding the key, surrounding
//     space trimmed), else from the environment: EDDY_S3_ACCESS_KEY and
//     EDDY_S3_SECRET_KEY, else AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
//     and AWS_SESSION_TOKEN. Credentials in the URL itself
//     (s3://key:secret@bucket) are refused, as is any unknown parameter.
//
// The s3.Store holds idle HTTP connections; it implements io.Closer to let
// them go.
func Open(rawURL string) (Store, error) { return open(rawURL, nil) }

// OpenCounted opens the store at rawURL as Open does, and counts every
// call made through it in m (Instrument), and for an S3 store every HTTP
// request its client sends too (m.Attempts: retries and hedges).
func OpenCounted(rawURL string, m *Metrics) (Store, error) {
	s, err := open(rawURL, func(method, result string) { m.Attempts.WithLabelValues(method, result).Inc() })
	if err != nil {
		return nil, err
	}
	return Instrument(s, m), nil
}

func open(rawURL string, onAttempt func(method, result string)) (Store, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("objstore: open: empty URL")
	}
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok && strings.HasPrefix(rawURL, "file:") {
		return nil, fmt.Errorf("objstore: open %q: want file:///abs/dir or a plain path", rawURL)
	}
	if !ok {
		// A plain path.
		abs, err := filepath.Abs(rawURL)
		if err != nil {
			return nil, fmt.Errorf("objstore: open %q: %w", rawURL, err)
		}
		return local.New(abs)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Do not echo the URL: it might hold a secret.
		return nil, fmt.Errorf("objstore: open: cannot parse URL with scheme %q", scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("objstore: open: credentials are not accepted in the URL; use %s/%s or access_key_file/secret_key_file", EnvS3AccessKey, EnvS3SecretKey)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("objstore: open %q: file URL must have an empty host (file:///abs/dir)", rawURL)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("objstore: open %q: file URL takes no query or fragment", rawURL)
		}
		if !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("objstore: open %q: file URL path must be absolute", rawURL)
		}
		return local.New(filepath.FromSlash(u.Path))
	case "s3":
		cfg, err := s3.ConfigFromURL(u, nil)
		if err != nil {
			return nil, err
		}
		cfg.OnAttempt = onAttempt
		return s3.New(cfg)
	default:
		return nil, fmt.Errorf("objstore: open %q: unsupported scheme %q (want file or s3)", rawURL, u.Scheme)
	}
}
