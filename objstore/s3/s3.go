// Package s3 implements objstore.Store on S3 or an S3-compatible server such
// as MinIO, through github.com/minio/minio-go/v7.
//
// Keys are stored under an optional prefix ("prefix/key"). Every request
// is one S3 call, retried by minio-go on transient failures. Put is a single
// PUT (no multipart) carrying Content-MD5 and a signed SHA-256 of the body,
// so the server rejects a body corrupted in transit, and If-None-Match: *,
// so an existing object is never
// replaced; when the key exists, Put reads it back and succeeds only if it
// holds the same bytes. GetRange is one ranged GET. A server that ignores
// If-None-Match (older S3 clones) would let Put replace objects; AWS S3 and
// MinIO honour it.
package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/eddy-backlinks/eddy/objstore/internal/rules"
)

// DefaultEndpoint is the endpoint used when Config.Endpoint is empty.
const DefaultEndpoint = "s3.amazonaws.com"

// Config configures a Store.
type Config struct {
	// Endpoint is the server's host[:port]; DefaultEndpoint if empty.
	Endpoint string
	// Region is the bucket's region. If empty, minio-go asks the server
	// once (GetBucketLocation).
	Region string
	// Bucket is the bucket name; required.
	Bucket string
	// Prefix, if not empty, is put before every key, joined by '/'.
	// Leading and trailing '/' are ignored. At most rules.MaxPrefixLen
	// (511) bytes, so that every valid key fits S3's 1024-byte limit.
	Prefix string
	// Insecure uses plain HTTP instead of HTTPS.
	Insecure bool
	// PathStyle addresses the bucket as endpoint/bucket rather than
	// bucket.endpoint. ConfigFromURL sets it for every endpoint but AWS's.
	PathStyle bool
	// MaxRetries bounds the client's retries of a request that failed
	// (0: minio-go's default, 10, with backoff: seconds before a request
	// to an unreachable server fails).
	MaxRetries int
	// HedgeAfter is how long a GET may go unanswered before the same GET
	// is sent again, the first answer winning (0: DefaultHedgeAfter; < 0:
	// never).
	HedgeAfter time.Duration
	// AccessKey and SecretKey are required; SessionToken is optional.
	AccessKey, SecretKey, SessionToken string
	// Transport, if not nil, carries the HTTP requests; by default a new
	// minio.DefaultTransport, whose idle connections Close releases.
	Transport http.RoundTripper
	// OnAttempt, if not nil, is told of every HTTP request sent (each
	// retry and hedge among them): its method and outcome (AttemptOK ...).
	OnAttempt func(method, result string)
}

// String describes the configuration without its secrets.
func (c Config) String() string {
	scheme := "https"
	if c.Insecure {
		scheme = "http"
	}
	return fmt.Sprintf("s3://%s/%s (endpoint %s://%s, region %q)", c.Bucket, c.prefix(), scheme, c.endpoint(), c.Region)
}

func (c Config) endpoint() string {
	if c.Endpoint == "" {
		return DefaultEndpoint
	}
	return c.Endpoint
}

func (c Config) prefix() string { return strings.Trim(c.Prefix, "/") }

// Store is an objstore.Store in an S3 bucket. Make one with New.
type Store struct {
	core   minio.Core
	bucket string
	prefix string // "" or ending in '/'
	cfg    Config
	idle   interface{ CloseIdleConnections() }
}

// New returns a Store for cfg. It sends no request: a wrong endpoint,
// bucket or credential shows at the first call.
func New(cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: no bucket")
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("s3: no credentials: set %s and %s (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", EnvAccessKey, EnvSecretKey)
	}
	prefix := cfg.prefix()
	if prefix != "" {
		if len(prefix) > rules.MaxPrefixLen {
			return nil, fmt.Errorf("s3: prefix is %d bytes, longer than %d", len(prefix), rules.MaxPrefixLen)
		}
		if err := rules.ValidateKey(prefix); err != nil {
			return nil, fmt.Errorf("s3: prefix: %w", err)
		}
		prefix += "/"
	}
	tr := cfg.Transport
	if tr == nil {
		t, err := minio.DefaultTransport(!cfg.Insecure)
		if err != nil {
			return nil, fmt.Errorf("s3: %w", err)
		}
		tr = t
	}
	idle, _ := tr.(interface{ CloseIdleConnections() })
	if cfg.OnAttempt != nil {
		tr = countingTransport{next: tr, on: cfg.OnAttempt}
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(cfg.endpoint(), &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:       !cfg.Insecure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    tr,
		MaxRetries:   cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	return &Store{core: minio.Core{Client: client}, bucket: cfg.Bucket, prefix: prefix, cfg: cfg, idle: idle}, nil
}

// Client returns the underlying minio-go client.
func (s *Store) Client() *minio.Client { return s.core.Client }

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Prefix returns the prefix put before keys: "" or ending in '/'.
func (s *Store) Prefix() string { return s.prefix }

// String describes the store for logs, without secrets.
func (s *Store) String() string { return s.cfg.String() }

// Close releases idle HTTP connections. The Store stays usable.
func (s *Store) Close() error {
	if s.idle != nil {
		s.idle.CloseIdleConnections()
	}
	return nil
}

func (s *Store) object(key string) string { return s.prefix + key }

// errCode returns the S3 error code of err, or "".
func errCode(err error) string {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.Code
	}
	return ""
}

// wrap turns a minio-go error into the store's, mapping missing objects to
// ErrNotFound and unsatisfiable ranges to ErrRange.
func (s *Store) wrap(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("s3: %s %q: %w (%w)", op, key, cerr, err)
	}
	switch errCode(err) {
	case minio.NoSuchKey:
		return fmt.Errorf("s3: %s %q: %w", op, key, rules.ErrNotFound)
	case minio.InvalidRange:
		return fmt.Errorf("s3: %s %q: %w: %w", op, key, rules.ErrRange, err)
	}
	if unavailable(err) {
		return fmt.Errorf("s3: %s %q: %w: %w", op, key, rules.ErrUnavailable, err)
	}
	return fmt.Errorf("s3: %s %q: %w", op, key, err)
}

// unavailable reports whether err is the server's not answering (a
// network error) or answering with a server error (5xx).
func unavailable(err error) bool {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.StatusCode >= 500 || er.Code == "SlowDown" || er.Code == "ServiceUnavailable" || er.Code == "InternalError"
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := rules.ValidateKey(key); err != nil {
		return fmt.Errorf("s3: put: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: put %q: %w", key, err)
	}
	opts := minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		// Sign the payload's SHA-256 given below rather than streaming
		// aws-chunked signatures: the server checks it and Content-MD5.
		DisableContentSha256: true,
	}
	opts.SetMatchETagExcept("*") // If-None-Match: *
	md5sum, sha := checksums(data)
	_, err := s.core.PutObject(ctx, s.bucket, s.object(key), bytes.NewReader(data), int64(len(data)), md5sum, sha, opts)
	if err == nil {
		return nil
	}
	if errCode(err) != minio.PreconditionFailed {
		return s.wrap(ctx, "put", key, err)
	}
	// The key exists (perhaps from an earlier try of this same Put).
	return s.sameContent(ctx, key, data)
}

// sameContent handles a Put to an existing key: nil if the object holds
// data, else an error wrapping ErrExists.
func (s *Store) sameContent(ctx context.Context, key string, data []byte) error {
	body, info, _, err := s.core.GetObject(ctx, s.bucket, s.object(key), minio.GetObjectOptions{})
	if errCode(err) == minio.NoSuchKey {
		// Deleted since the PUT failed: report the conflict rather than
		// loop; the caller may retry.
		return fmt.Errorf("s3: put %q: object existed, then vanished: %w", key, rules.ErrExists)
	}
	if err != nil {
		return s.wrap(ctx, "put", key, err)
	}
	defer body.Close()
	if info.Size != int64(len(data)) {
		return fmt.Errorf("s3: put %q: existing object has %d bytes, not %d: %w", key, info.Size, len(data), rules.ErrExists)
	}
	old, err := readExactly(body, info.Size)
	if err != nil {
		return s.wrap(ctx, "put", key, err)
	}
	if !bytes.Equal(old, data) {
		return fmt.Errorf("s3: put %q: %w", key, rules.ErrExists)
	}
	return nil
}

// readExactly reads n bytes and checks that the body ends there.
func readExactly(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("short body: %w", err)
	}
	var one [1]byte
	if m, _ := r.Read(one[:]); m != 0 {
		return nil, errors.New("body longer than its Content-Length")
	}
	return buf, nil
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := rules.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("s3: get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("s3: get %q: %w", key, err)
	}
	return s.read(ctx, func(ctx context.Context) ([]byte, error) { return s.getOnce(ctx, key) })
}

func (s *Store) getOnce(ctx context.Context, key string) ([]byte, error) {
	body, info, _, err := s.core.GetObject(ctx, s.bucket, s.object(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap(ctx, "get", key, err)
	}
	defer body.Close()
	if info.Size < 0 {
		return nil, fmt.Errorf("s3: get %q: response has no Content-Length", key)
	}
	data, err := readExactly(body, info.Size)
	if err != nil {
		return nil, bodyLost{s.wrap(ctx, "get", key, err)}
	}
	return data, nil
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := rules.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("s3: get range: %w", err)
	}
	if err := rules.CheckRangeArgs(key, off, n); err != nil {
		return nil, fmt.Errorf("s3: get range: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("s3: get range %q: %w", key, err)
	}
	if n == 0 {
		// HTTP cannot ask for zero bytes; check existence and bounds.
		size, err := s.size(ctx, "get range", key)
		if err != nil {
			return nil, err
		}
		if err := rules.CheckRange(key, off, n, size); err != nil {
			return nil, fmt.Errorf("s3: get range: %w", err)
		}
		return []byte{}, nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, fmt.Errorf("s3: get range %q: %w", key, err)
	}
	return s.read(ctx, func(ctx context.Context) ([]byte, error) { return s.getRangeOnce(ctx, key, off, n, opts) })
}

func (s *Store) getRangeOnce(ctx context.Context, key string, off, n int64, opts minio.GetObjectOptions) ([]byte, error) {
	body, info, hdr, err := s.core.GetObject(ctx, s.bucket, s.object(key), opts)
	if err != nil {
		return nil, s.wrap(ctx, "get range", key, err)
	}
	defer body.Close()
	if hdr.Get("Content-Range") == "" {
		return nil, fmt.Errorf("s3: get range %q: server ignored the Range header", key)
	}
	if info.Size < n {
		// The range started inside the object but ends past it; S3
		// answers with the bytes up to the end.
		return nil, fmt.Errorf("s3: get range %q: %w: bytes [%d, %d) asked, %d available (%s)",
			key, rules.ErrRange, off, off+n, info.Size, hdr.Get("Content-Range"))
	}
	if info.Size != n {
		return nil, fmt.Errorf("s3: get range %q: asked %d bytes, response has %d", key, n, info.Size)
	}
	data, err := readExactly(body, n)
	if err != nil {
		return nil, bodyLost{s.wrap(ctx, "get range", key, err)}
	}
	return data, nil
}

// readAttempts bounds the GETs of one read: the first, and a retry or a
// hedge each.
const readAttempts = 3

// DefaultHedgeAfter is Config.HedgeAfter's default: well past a GET's
// usual latency (a few to a hundred milliseconds), so that few reads are
// asked twice, and well short of the second-long stalls an object store
// has now and then.
const DefaultHedgeAfter = 250 * time.Millisecond

func (s *Store) hedgeAfter() time.Duration {
	if s.cfg.HedgeAfter == 0 {
		return DefaultHedgeAfter
	}
	return s.cfg.HedgeAfter
}

// bodyLost is a GET's error once its answer had begun: the body cut short
// or its connection reset, which the client does not retry.
type bodyLost struct{ error }

func (e bodyLost) Unwrap() error { return e.error }

// read runs a GET (do) so that one lost answer does not fail it and one
// stalled answer does not hold it: a GET whose body was lost (bodyLost:
// cut short, its connection reset; the client retried whatever failed
// before the body) is asked again at once, and one not answered within
// HedgeAfter is asked a second time (and after twice that a third), the
// first good answer winning; at most readAttempts GETs in all. An answer
// that settles it (the object is missing, the range is past its end) ends
// the read at once.
func (s *Store) read(ctx context.Context, do func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the GETs still running lose
	type result struct {
		data []byte
		err  error
	}
	results := make(chan result, readAttempts)
	launched, pending := 0, 0
	launch := func() {
		launched++
		pending++
		go func() {
			data, err := do(ctx)
			results <- result{data, err}
		}()
	}
	launch()
	d := s.hedgeAfter()
	var hedge <-chan time.Time
	var t *time.Timer
	if d > 0 {
		t = time.NewTimer(d)
		defer t.Stop()
		hedge = t.C
	}
	var last error
	for {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				return r.data, nil
			}
			last = r.err
			var lost bodyLost
			if !errors.As(r.err, &lost) || !errors.Is(r.err, rules.ErrUnavailable) || ctx.Err() != nil {
				if pending > 0 && errors.Is(r.err, rules.ErrUnavailable) && ctx.Err() == nil {
					continue // a hedge is still out: its answer may yet come
				}
				return nil, r.err
			}
			if launched < readAttempts {
				launch()
			} else if pending == 0 {
				return nil, last
			}
		case <-hedge:
			if launched < readAttempts { // retries may have used them up
				launch()
			}
			if launched == readAttempts {
				hedge = nil // none left
				continue
			}
			// The next hedge waits twice as long.
			d *= 2
			t.Reset(d)
		}
	}
}

// Size implements objstore.Store.
func (s *Store) Size(ctx context.Context, key string) (int64, error) {
	if err := rules.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("s3: size: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("s3: size %q: %w", key, err)
	}
	return s.size(ctx, "size", key)
}

func (s *Store) size(ctx context.Context, op, key string) (int64, error) {
	info, err := s.core.StatObject(ctx, s.bucket, s.object(key), minio.StatObjectOptions{})
	if err != nil {
		return 0, s.wrap(ctx, op, key, err)
	}
	return info.Size, nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := rules.ValidateKey(key); err != nil {
		return fmt.Errorf("s3: delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: delete %q: %w", key, err)
	}
	err := s.core.RemoveObject(ctx, s.bucket, s.object(key), minio.RemoveObjectOptions{})
	if err != nil && errCode(err) != minio.NoSuchKey {
		return s.wrap(ctx, "delete", key, err)
	}
	return nil
}

// List implements objstore.Store with ListObjectsV2, whose order is the
// byte order of keys.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	if err := rules.ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("s3: list: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: list %q: %w", prefix, err)
	}
	// Cancel the listing when fn stops it early.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	noOwner := false
	objects := s.core.ListObjectsIter(lctx, s.bucket, minio.ListObjectsOptions{
		Prefix:     s.prefix + prefix,
		Recursive:  true,
		FetchOwner: &noOwner,
	})
	last := ""
	for obj := range objects {
		if obj.Err != nil {
			return s.wrap(ctx, "list", prefix, obj.Err)
		}
		key, ok := strings.CutPrefix(obj.Key, s.prefix)
		if !ok {
			return fmt.Errorf("s3: list %q: server returned key %q outside prefix %q", prefix, obj.Key, s.prefix)
		}
		if key <= last && last != "" {
			return fmt.Errorf("s3: list %q: server returned keys out of order (%q after %q)", prefix, key, last)
		}
		last = key
		if err := fn(key, obj.Size); err != nil {
			return err
		}
	}
	// minio-go ends the listing silently when the context is canceled.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: list %q: %w", prefix, err)
	}
	return nil
}

// checksums returns data's MD5 in base64, for Content-MD5, and its SHA-256
// in hex, for X-Amz-Content-Sha256.
func checksums(data []byte) (md5Base64, sha256Hex string) {
	m := md5.Sum(data)
	h := sha256.Sum256(data)
	return base64.StdEncoding.EncodeToString(m[:]), hex.EncodeToString(h[:])
}
