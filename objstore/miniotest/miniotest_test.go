package miniotest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeT records how StartMinIO ends a test without a binary.
type fakeT struct {
	testing.TB
	skipped, failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeT) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func runFake(f *fakeT) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartMinIO(f)
	}()
	<-done
}

func TestMissingBinary(t *testing.T) {
	t.Setenv(EnvBin, filepath.Join(t.TempDir(), "no-minio-here"))

	t.Setenv("CI", "")
	t.Setenv(EnvRequire, "")
	f := &fakeT{}
	runFake(f)
	if f.failed != "" || !strings.Contains(f.skipped, "make minio") {
		t.Fatalf("without CI: skipped %q, failed %q; want a skip naming `make minio`", f.skipped, f.failed)
	}

	t.Setenv(EnvRequire, "1")
	f = &fakeT{}
	runFake(f)
	if f.skipped != "" || !strings.Contains(f.failed, "make minio") {
		t.Fatalf("with %s=1: skipped %q, failed %q; want a failure naming `make minio`", EnvRequire, f.skipped, f.failed)
	}

	t.Setenv(EnvRequire, "")
	t.Setenv("CI", "true")
	f = &fakeT{}
	runFake(f)
	if f.skipped != "" || !strings.Contains(f.failed, "make minio") {
		t.Fatalf("with CI=true: skipped %q, failed %q; want a failure", f.skipped, f.failed)
	}
}

func TestFindBinaryEnv(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "minio")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExe := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBin, exe)
	if p, err := FindBinary(); err != nil || p != exe {
		t.Fatalf("FindBinary with %s=%s: %q, %v", EnvBin, exe, p, err)
	}
	for _, p := range []string{notExe, dir, filepath.Join(dir, "missing")} {
		t.Setenv(EnvBin, p)
		if got, err := FindBinary(); err == nil {
			t.Fatalf("FindBinary with %s=%s = %q, want an error", EnvBin, p, got)
		}
	}
}

// StartMinIO gives a live server with the bucket made (skipped without a
// binary, unless CI requires one).
func TestStartMinIO(t *testing.T) {
	endpoint, ak, sk := StartMinIO(t)
	if ak != AccessKey || sk != SecretKey || !strings.HasPrefix(endpoint, "127.0.0.1:") {
		t.Fatalf("StartMinIO = %q, %q, %q", endpoint, ak, sk)
	}
	c, tr, err := NewClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	ok, err := c.BucketExists(t.Context(), Bucket)
	if err != nil || !ok {
		t.Fatalf("BucketExists(%s) = %v, %v", Bucket, ok, err)
	}
}

// Start (outside of tests) gives a live server with the bucket made, and
// Stop ends it; without a binary its error points to `make minio`.
func TestStart(t *testing.T) {
	if _, err := FindBinary(); err != nil {
		t.Setenv(EnvBin, filepath.Join(t.TempDir(), "no-minio-here"))
		if _, err := Start(t.Context(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "make minio") {
			t.Fatalf("Start without a binary: %v; want an error naming `make minio`", err)
		}
		if required() {
			t.Fatal("no MinIO binary")
		}
		t.Skip("no MinIO binary")
	}
	srv, err := Start(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, tr, err := NewClient(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	ok, err := c.BucketExists(t.Context(), Bucket)
	if err != nil || !ok {
		t.Fatalf("BucketExists(%s) = %v, %v", Bucket, ok, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	_ = srv.Stop() // a second Stop does nothing
	hc := &http.Client{Timeout: 2 * time.Second}
	if resp, err := hc.Get("http://" + srv.Endpoint() + "/minio/health/live"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Stop")
	}
}
