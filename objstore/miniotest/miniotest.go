// Package miniotest starts a real MinIO server for tests.
//
// StartMinIO runs the minio binary found through $EDDY_MINIO_BIN, else
// $(go env GOPATH)/bin/minio, else $PATH, on free 127.0.0.1 ports with a
// temporary data directory, and creates the bucket Bucket in it. Without a
// binary the test is skipped, or fails when $CI is set or
// EDDY_REQUIRE_MINIO=1; `make minio` (scripts/install-minio.sh) installs
// one.
package miniotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	// Bucket is the bucket StartMinIO creates.
	Bucket = "eddy-test"
	// AccessKey and SecretKey are the root credentials StartMinIO gives
	// the server.
	AccessKey = "eddytestroot"
	SecretKey = "eddytestsecret-not-a-real-secret"

	// EnvBin names the binary to run, overriding the search.
	EnvBin = "EDDY_MINIO_BIN"
	// EnvRequire set to 1 makes a missing binary fail tests (as does CI).
	EnvRequire = "EDDY_REQUIRE_MINIO"

	startTimeout = 60 * time.Second
)

// FindBinary returns the path of the minio binary, or an error saying
// where it looked. See the package comment.
func FindBinary() (string, error) {
	if p := os.Getenv(EnvBin); p != "" {
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBin, p, err)
		}
		return p, nil
	}
	tried := []string{}
	if gp := goPath(); gp != "" {
		// GOPATH may be a list; go install writes to the first entry.
		first := filepath.SplitList(gp)[0]
		p := filepath.Join(first, "bin", "minio")
		if isExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	tried = append(tried, "minio in $PATH")
	return "", fmt.Errorf("no MinIO binary (tried $%s, %s)", EnvBin, strings.Join(tried, ", "))
}

func goPath() string {
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		if s := strings.TrimSpace(string(out)); s != "" {
			return s
		}
	}
	return build.Default.GOPATH
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file: %w", p, fs.ErrPermission)
	}
	return nil
}

// required reports whether a missing binary must fail the test.
func required() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvRequire) == "1"
}

// StartMinIO starts a MinIO server that lives until the test ends and
// returns its endpoint (127.0.0.1:port, plain HTTP) and root credentials.
// The bucket Bucket exists in it. Without a MinIO binary it skips the test,
// or fails it when $CI is set or EDDY_REQUIRE_MINIO=1.
func StartMinIO(t testing.TB) (endpoint, accessKey, secretKey string) {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		msg := fmt.Sprintf("%v; run `make minio` to install it", err)
		if required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// Ports are picked free then released, so another process may take
	// one before MinIO binds it: try a few times.
	var lastErr error
	for range 3 {
		endpoint, lastErr = start(t, bin)
		if lastErr == nil {
			break
		}
		t.Logf("miniotest: %v; retrying", lastErr)
	}
	if lastErr != nil {
		t.Fatalf("miniotest: %v", lastErr)
	}
	if err := makeBucket(endpoint); err != nil {
		t.Fatalf("miniotest: create bucket %s: %v", Bucket, err)
	}
	return endpoint, AccessKey, SecretKey
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs one server and waits until it is live. On success the server
// is stopped at the test's cleanup.
func start(t testing.TB, bin string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	consolePort, err := freePort()
	if err != nil {
		return "", err
	}
	if consolePort == port {
		return "", errors.New("got the same free port twice")
	}
	endpoint := "127.0.0.1:" + strconv.Itoa(port)
	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	certsDir := filepath.Join(base, "certs")
	logPath := filepath.Join(base, "minio.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close() // the child keeps its own descriptor

	cmd := exec.Command(bin, "server",
		"--address", endpoint,
		"--console-address", "127.0.0.1:"+strconv.Itoa(consolePort),
		"--certs-dir", certsDir,
		"--quiet",
		dataDir)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+AccessKey,
		"MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CALLHOME_ENABLE=off",
	)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	logTail := func() string {
		b, _ := os.ReadFile(logPath)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return string(bytes.TrimSpace(b))
	}

	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-exited:
			exited <- err // for stop
			return "", fmt.Errorf("minio exited before it was ready (%v); its log:\n%s", err, logTail())
		default:
		}
		resp, err := client.Get("http://" + endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("minio not live at %s after %v; its log:\n%s", endpoint, startTimeout, logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(stop)
	return endpoint, nil
}

// NewClient returns a minio-go client for a server StartMinIO started.
// Close its transport's idle connections with CloseIdleConnections on the
// returned *http.Transport when done.
func NewClient(endpoint string) (*minio.Client, *http.Transport, error) {
	tr, err := minio.DefaultTransport(false)
	if err != nil {
		return nil, nil, err
	}
	c, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(AccessKey, SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		Transport:    tr,
	})
	if err != nil {
		return nil, nil, err
	}
	return c, tr, nil
}

// MakeBucket creates bucket in the server at endpoint, retrying while the
// server is still initializing.
func MakeBucket(endpoint, bucket string) error {
	c, tr, err := NewClient(endpoint)
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		err = c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func makeBucket(endpoint string) error { return MakeBucket(endpoint, Bucket) }
