package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"

	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/objstoretest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

var _ objstore.Store = (*s3.Store)(nil)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var seq atomic.Int64

// newStore returns a Store on the server at endpoint, in the test bucket
// under a prefix of its own, closed at the test's end.
func newStore(t *testing.T, endpoint, prefix string) *s3.Store {
	t.Helper()
	s, err := s3.New(s3.Config{
		Endpoint:  endpoint,
		Region:    "us-east-1",
		Bucket:    miniotest.Bucket,
		Prefix:    prefix,
		Insecure:  true,
		PathStyle: true,
		AccessKey: miniotest.AccessKey,
		SecretKey: miniotest.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func uniquePrefix(name string) string {
	return fmt.Sprintf("t%03d-%s", seq.Add(1), strings.NewReplacer("/", "-", " ", "_").Replace(name))
}

func TestS3(t *testing.T) {
	endpoint, _, _ := miniotest.StartMinIO(t)

	t.Run("Conformance", func(t *testing.T) {
		objstoretest.Run(t, func(t *testing.T) objstore.Store {
			return newStore(t, endpoint, "suite/"+uniquePrefix(t.Name()))
		})
	})

	// A store at the bucket's root, in a bucket of its own.
	t.Run("ConformanceBucketRoot", func(t *testing.T) {
		objstoretest.Run(t, func(t *testing.T) objstore.Store {
			bucket := fmt.Sprintf("root-%03d", seq.Add(1))
			if err := miniotest.MakeBucket(endpoint, bucket); err != nil {
				t.Fatal(err)
			}
			s, err := s3.New(s3.Config{
				Endpoint: endpoint, Region: "us-east-1", Bucket: bucket,
				Insecure: true, PathStyle: true,
				AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})

	t.Run("PrefixIsolation", func(t *testing.T) { testPrefixIsolation(t, endpoint) })
	t.Run("RawLayout", func(t *testing.T) { testRawLayout(t, endpoint) })
	t.Run("ImmutableAgainstOtherWriters", func(t *testing.T) { testImmutableAgainstOtherWriters(t, endpoint) })
	t.Run("BadCredentials", func(t *testing.T) { testBadCredentials(t, endpoint) })
	t.Run("MissingBucket", func(t *testing.T) { testMissingBucket(t, endpoint) })
	t.Run("OpenURL", func(t *testing.T) { testOpenURL(t, endpoint) })
	t.Run("CorruptedPutRejected", func(t *testing.T) { testCorruptedPut(t, endpoint) })
}

// corruptingTransport flips one bit of every PUT body after minio-go has
// computed its checksums, as a faulty network or proxy might.
type corruptingTransport struct {
	inner *http.Transport
	puts  atomic.Int64
}

func (c *corruptingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || req.Body == nil || req.ContentLength <= 0 {
		return c.inner.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	body[len(body)/2] ^= 0x01
	c.puts.Add(1)
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	return c.inner.RoundTrip(req)
}

// The server checks a Put's content: a body corrupted in transit is
// refused and nothing is stored.
func testCorruptedPut(t *testing.T, endpoint string) {
	ctx := context.Background()
	ct := &corruptingTransport{inner: &http.Transport{}}
	defer ct.inner.CloseIdleConnections()
	prefix := uniquePrefix("corrupt")
	s, err := s3.New(s3.Config{
		Endpoint: endpoint, Region: "us-east-1", Bucket: miniotest.Bucket, Prefix: prefix,
		Insecure: true, PathStyle: true, Transport: ct,
		AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Put(ctx, "k", []byte("some bytes that will not arrive intact"))
	if err == nil {
		t.Fatal("Put with a corrupted body succeeded")
	}
	if ct.puts.Load() == 0 {
		t.Fatal("the transport saw no PUT")
	}
	t.Logf("Put with a corrupted body: %v", err)
	clean := newStore(t, endpoint, prefix)
	if _, err := clean.Get(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get after the refused Put: %v, want ErrNotFound", err)
	}
}

// Stores whose prefixes are prefixes of each other as strings ("p" and
// "p2") do not see each other's keys.
func testPrefixIsolation(t *testing.T, endpoint string) {
	ctx := context.Background()
	base := uniquePrefix("iso")
	p := newStore(t, endpoint, base+"/p")
	p2 := newStore(t, endpoint, base+"/p2")
	parent := newStore(t, endpoint, base)
	if err := p.Put(ctx, "k", []byte("in p")); err != nil {
		t.Fatal(err)
	}
	if err := p2.Put(ctx, "k", []byte("in p2")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    *s3.Store
		want []string
	}{{p, []string{"k"}}, {p2, []string{"k"}}, {parent, []string{"p/k", "p2/k"}}} {
		var keys []string
		if err := c.s.List(ctx, "", func(k string, _ int64) error { keys = append(keys, k); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keys, c.want) {
			t.Errorf("List in %s = %v, want %v", c.s.Prefix(), keys, c.want)
		}
	}
	b, err := p.Get(ctx, "k")
	if err != nil || string(b) != "in p" {
		t.Fatalf("Get(k) in p = %q, %v", b, err)
	}
	if err := p.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if b, err := p2.Get(ctx, "k"); err != nil || string(b) != "in p2" {
		t.Fatalf("Delete in p touched p2: Get = %q, %v", b, err)
	}
}

// Keys are stored as prefix/key, with the bytes and a Content-MD5-checked
// ETag, as plain S3 tools see them.
func testRawLayout(t *testing.T, endpoint string) {
	ctx := context.Background()
	prefix := uniquePrefix("raw")
	s := newStore(t, endpoint, "/"+prefix+"/") // surrounding slashes ignored
	if s.Prefix() != prefix+"/" {
		t.Fatalf("Prefix() = %q", s.Prefix())
	}
	if err := s.Put(ctx, "dir/obj", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	info, err := s.Client().StatObject(ctx, miniotest.Bucket, prefix+"/dir/obj", minio.StatObjectOptions{})
	if err != nil {
		t.Fatalf("raw stat: %v", err)
	}
	// MD5("hello"); MinIO's ETag of a single-part object is its MD5.
	if info.Size != 5 || info.ETag != "5d41402abc4b2a76b9719d911017c592" {
		t.Fatalf("raw object: size %d, ETag %q", info.Size, info.ETag)
	}
}

// An object written by something else (bypassing Put) is still protected:
// Put with other content fails, with equal content succeeds.
func testImmutableAgainstOtherWriters(t *testing.T, endpoint string) {
	ctx := context.Background()
	s := newStore(t, endpoint, uniquePrefix("other"))
	_, err := s.Client().PutObject(ctx, miniotest.Bucket, s.Prefix()+"k", bytes.NewReader([]byte("theirs")), 6, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "k", []byte("mine!!")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("Put over a foreign object: %v, want ErrExists", err)
	}
	if err := s.Put(ctx, "k", []byte("theirs")); err != nil {
		t.Fatalf("Put of equal content over a foreign object: %v", err)
	}
}

func testBadCredentials(t *testing.T, endpoint string) {
	ctx := context.Background()
	s, err := s3.New(s3.Config{
		Endpoint: endpoint, Region: "us-east-1", Bucket: miniotest.Bucket,
		Insecure: true, PathStyle: true,
		AccessKey: miniotest.AccessKey, SecretKey: "wrong-secret-key",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Get(ctx, "anything")
	if err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get with a wrong secret: %v, want an authentication error", err)
	}
	if err := s.Put(ctx, "anything", []byte("x")); err == nil || errors.Is(err, objstore.ErrExists) {
		t.Fatalf("Put with a wrong secret: %v, want an authentication error", err)
	}
}

func testMissingBucket(t *testing.T, endpoint string) {
	ctx := context.Background()
	s, err := s3.New(s3.Config{
		Endpoint: endpoint, Region: "us-east-1", Bucket: "no-such-bucket",
		Insecure: true, PathStyle: true,
		AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A missing bucket is a configuration error, not a missing object.
	if _, err := s.Get(ctx, "k"); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get in a missing bucket: %v", err)
	}
	if err := s.List(ctx, "", func(string, int64) error { return nil }); err == nil {
		t.Fatal("List of a missing bucket succeeded")
	}
}

// objstore.Open builds a working S3 store from a URL, with credentials
// from the environment or from files.
func testOpenURL(t *testing.T, endpoint string) {
	ctx := context.Background()
	prefix := uniquePrefix("open")
	base := fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1&insecure=true", miniotest.Bucket, prefix, endpoint)

	roundTrip := func(t *testing.T, rawURL, key string) {
		t.Helper()
		st, err := objstore.Open(rawURL)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer st.(interface{ Close() error }).Close()
		if err := st.Put(ctx, key, []byte(key)); err != nil {
			t.Fatal(err)
		}
		b, err := st.Get(ctx, key)
		if err != nil || string(b) != key {
			t.Fatalf("Get = %q, %v", b, err)
		}
	}

	t.Run("EnvEddy", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		t.Setenv(objstore.EnvS3AccessKey, miniotest.AccessKey)
		t.Setenv(objstore.EnvS3SecretKey, miniotest.SecretKey)
		roundTrip(t, base, "env-eddy")
	})
	t.Run("EnvAWS", func(t *testing.T) {
		t.Setenv(objstore.EnvS3AccessKey, "")
		t.Setenv(objstore.EnvS3SecretKey, "")
		t.Setenv("AWS_ACCESS_KEY_ID", miniotest.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", miniotest.SecretKey)
		t.Setenv("AWS_SESSION_TOKEN", "")
		roundTrip(t, base, "env-aws")
	})
	t.Run("Files", func(t *testing.T) {
		// Wrong credentials in the environment: the files win.
		t.Setenv(objstore.EnvS3AccessKey, "wrong")
		t.Setenv(objstore.EnvS3SecretKey, "wrong-wrong")
		dir := t.TempDir()
		ak, sk := filepath.Join(dir, "ak"), filepath.Join(dir, "sk")
		if err := os.WriteFile(ak, []byte(miniotest.AccessKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sk, []byte("  "+miniotest.SecretKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		roundTrip(t, base+"&access_key_file="+url.QueryEscape(ak)+"&secret_key_file="+url.QueryEscape(sk), "files")
	})
}
