package objstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/objstoretest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateKey(t *testing.T) {
	for _, k := range objstoretest.InvalidKeys {
		if err := objstore.ValidateKey(k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
	for _, k := range []string{"a", "a/b", "tables/000001.sst", "a..b", "x.", "with space", "~!@#$%^&*()_+{}|:\"<>?`-=[];',",
		strings.Repeat("s", objstore.MaxSegmentLen), strings.Repeat("a/", objstore.MaxKeyLen/2-1) + "zz"} {
		if err := objstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for p, ok := range map[string]bool{"": true, "a": true, "a/": true, "a/b/c/": true, "a/.": true, "/a": false, "a\\b": false, "\n": false} {
		if err := objstore.ValidatePrefix(p); (err == nil) != ok {
			t.Errorf("ValidatePrefix(%q) = %v", p, err)
		}
	}
}

func TestOpenLocal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	abs := filepath.Join(dir, "by-url")
	s, err := objstore.Open("file://" + filepath.ToSlash(abs))
	if err != nil {
		t.Fatal(err)
	}
	if ls, ok := s.(*local.Store); !ok || ls.Dir() != abs {
		t.Fatalf("Open(file://%s) = %#v", abs, s)
	}
	if err := s.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(abs, "k")); err != nil || string(b) != "v" {
		t.Fatalf("file behind key k: %q, %v", b, err)
	}

	// A plain path, absolute or relative.
	s, err = objstore.Open(abs)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.Get(ctx, "k"); err != nil || string(b) != "v" {
		t.Fatalf("Get via plain path: %q, %v", b, err)
	}
	t.Chdir(dir)
	s, err = objstore.Open("by-url")
	if err != nil {
		t.Fatal(err)
	}
	if ls := s.(*local.Store); ls.Dir() != abs {
		// Compare without symlinks in the temp dir path.
		got, _ := filepath.EvalSymlinks(ls.Dir())
		want, _ := filepath.EvalSymlinks(abs)
		if got != want {
			t.Fatalf("Open(relative) dir = %s, want %s", ls.Dir(), abs)
		}
	}
	if _, err := objstore.Open("file://localhost" + filepath.ToSlash(abs)); err != nil {
		t.Fatalf("file://localhost/...: %v", err)
	}
}

func TestOpenS3(t *testing.T) {
	t.Setenv(objstore.EnvS3AccessKey, "ak")
	t.Setenv(objstore.EnvS3SecretKey, "sk")
	s, err := objstore.Open("s3://bkt/some/prefix?endpoint=127.0.0.1:9000&region=us-east-1&insecure=true")
	if err != nil {
		t.Fatal(err)
	}
	ss, ok := s.(*s3.Store)
	if !ok {
		t.Fatalf("Open(s3://...) = %T", s)
	}
	defer ss.Close()
	if ss.Bucket() != "bkt" || ss.Prefix() != "some/prefix/" {
		t.Fatalf("bucket %q, prefix %q", ss.Bucket(), ss.Prefix())
	}
	if u := ss.Client().EndpointURL(); u.Scheme != "http" || u.Host != "127.0.0.1:9000" {
		t.Fatalf("endpoint %v", u)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Setenv(objstore.EnvS3AccessKey, "")
	t.Setenv(objstore.EnvS3SecretKey, "")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	for u, want := range map[string]string{
		"":                             "empty URL",
		"file://host/dir":              "empty host",
		"file:///dir?x=1":              "no query",
		"s3://key:SECRETVALUE@bkt/pfx": "not accepted in the URL",
		"s3://bkt/pfx":                 "no credentials",
		"gs://bkt/pfx":                 "unsupported scheme",
		"s3://bkt?secret=SECRETVALUE":  "unknown URL parameter",
		"http://example.com/objects":   "unsupported scheme",
		"s3://bkt/%zz":                 "cannot parse",
		"s3://bkt/ok?endpoint=a/b/c":   "without scheme",
		"file:relative/dir":            "want file:///abs/dir",
	} {
		_, err := objstore.Open(u)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) error = %v, want one containing %q", u, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRETVALUE") {
			t.Errorf("Open(%q) error leaks the secret: %v", u, err)
		}
	}
	// A path naming a regular file cannot be a store.
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := objstore.Open(f); err == nil {
		t.Errorf("Open(%s) of a regular file succeeded", f)
	}
}

func TestCounting(t *testing.T) {
	ctx := context.Background()
	inner, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := objstore.Counting(inner)
	if c.Unwrap() != objstore.Store(inner) {
		t.Fatal("Unwrap does not return the inner store")
	}
	if (c.Snapshot() != objstore.Stats{}) {
		t.Fatalf("fresh snapshot = %+v", c.Snapshot())
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Put(ctx, "a", make([]byte, 100)))
	must(c.Put(ctx, "b/c", make([]byte, 50)))
	before := c.Snapshot()
	_, err = c.Get(ctx, "a")
	must(err)
	_, err = c.Get(ctx, "missing")
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	_, err = c.GetRange(ctx, "a", 10, 20)
	must(err)
	_, err = c.GetRange(ctx, "a", 90, 20) // past the end
	if !errors.Is(err, objstore.ErrRange) {
		t.Fatal(err)
	}
	_, err = c.Size(ctx, "b/c")
	must(err)
	must(c.List(ctx, "", func(string, int64) error { return nil }))
	must(c.Delete(ctx, "b/c"))
	if err := c.Put(ctx, "a", []byte("different")); !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}

	want := objstore.Stats{
		Get:      objstore.OpStats{Requests: 2, Errors: 1, Bytes: 100},
		GetRange: objstore.OpStats{Requests: 2, Errors: 1, Bytes: 20},
		Put:      objstore.OpStats{Requests: 1, Errors: 1},
		List:     objstore.OpStats{Requests: 1},
		Delete:   objstore.OpStats{Requests: 1},
		Head:     objstore.OpStats{Requests: 1},
	}
	if got := c.Snapshot().Sub(before); got != want {
		t.Fatalf("counts =\n  %+v\nwant\n  %+v", got, want)
	}
	if got := before; got.Put != (objstore.OpStats{Requests: 2, Bytes: 150}) {
		t.Fatalf("put counts before = %+v", got.Put)
	}
	if tot := c.Snapshot().Total(); tot.Requests != 10 || tot.Errors != 3 || tot.Bytes != 270 {
		t.Fatalf("Total = %+v", tot)
	}
	names := []string{}
	for _, k := range objstore.Kinds() {
		names = append(names, k.String())
	}
	if got := strings.Join(names, ","); got != "get,get_range,put,list,delete,head" {
		t.Fatalf("kind names = %s", got)
	}
}

// Counters are exact under concurrent use.
func TestCountingConcurrent(t *testing.T) {
	ctx := context.Background()
	inner, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := objstore.Counting(inner)
	if err := c.Put(ctx, "k", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	const goroutines, reads = 8, 200
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range reads {
				if _, err := c.GetRange(ctx, "k", 2, 3); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := c.Snapshot().GetRange; got != (objstore.OpStats{Requests: goroutines * reads, Bytes: goroutines * reads * 3}) {
		t.Fatalf("GetRange counts = %+v", got)
	}
}
