// Package miniotest starts a real MinIO server for tests and benchmarks.
//
// StartMinIO runs the minio binary found through $EDDY_MINIO_BIN, else
// $(go env GOPATH)/bin/minio, else $PATH, on free 127.0.0.1 ports with a
// temporary data directory, and creates the bucket Bucket in it. Without a
// binary the test is skipped, or fails when $CI is set or
// EDDY_REQUIRE_MINIO=1; `make minio` (scripts/install-minio.sh) installs
// one. Start does the same outside of tests (for `eddy-ctl bench`): it
// returns a Server to Stop, or an error when there is no binary.
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
	"sync"
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
	if gp := GoPath(); gp != "" {
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

// GoPath is the first directory of `go env GOPATH` (where the project's
// scripts install the test services: MinIO, toxiproxy).
func GoPath() string {
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
	srv, err := startWith(context.Background(), bin, t.TempDir(), t.Logf)
	if err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv.Endpoint(), AccessKey, SecretKey
}

// Server is a running MinIO server started by Start.
type Server struct {
	endpoint string
	cmd      *exec.Cmd
	exited   chan error
	stopOnce sync.Once
}

// Start starts a MinIO server outside of tests (the bench command uses
// it): the binary FindBinary finds, data and log under dir (which must
// exist and should be empty; it is not removed), root credentials
// AccessKey and SecretKey, and the bucket Bucket created. Without a binary
// the error says so and points to `make minio`. Stop the server with Stop.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := FindBinary()
	if err != nil {
		return nil, fmt.Errorf("%w; run `make minio` to install it", err)
	}
	return startWith(ctx, bin, dir, nil)
}

// Endpoint is the server's address: 127.0.0.1:port, plain HTTP.
func (s *Server) Endpoint() string { return s.endpoint }

// Stop kills the server and waits for it to exit. Calling it again does
// nothing.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		err := <-s.exited
		s.exited <- err
	})
	return nil
}

// startWith starts a server with bin under dir and creates Bucket. Ports
// are picked free then released, so another process may take one before
// MinIO binds it: it tries a few times, each in its own subdirectory.
func startWith(ctx context.Context, bin, dir string, logf func(format string, args ...any)) (*Server, error) {
	var lastErr error
	for try := range 3 {
		base := filepath.Join(dir, fmt.Sprintf("minio-%d", try))
		if err := os.MkdirAll(base, 0o755); err != nil {
			return nil, err
		}
		srv, err := start(ctx, bin, base)
		if err == nil {
			if err := makeBucket(srv.endpoint); err != nil {
				_ = srv.Stop()
				return nil, fmt.Errorf("create bucket %s: %w", Bucket, err)
			}
			return srv, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		if logf != nil {
			logf("miniotest: %v; retrying", err)
		}
	}
	return nil, lastErr
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs one server with its files under base and waits until it is
// live.
func start(ctx context.Context, bin, base string) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	consolePort, err := FreePort()
	if err != nil {
		return nil, err
	}
	if consolePort == port {
		return nil, errors.New("got the same free port twice")
	}
	endpoint := "127.0.0.1:" + strconv.Itoa(port)
	dataDir := filepath.Join(base, "data")
	certsDir := filepath.Join(base, "certs")
	logPath := filepath.Join(base, "minio.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	srv := &Server{endpoint: endpoint, cmd: cmd, exited: make(chan error, 1)}
	go func() { srv.exited <- cmd.Wait() }()
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
		case err := <-srv.exited:
			srv.exited <- err // for Stop
			return nil, fmt.Errorf("minio exited before it was ready (%v); its log:\n%s", err, logTail())
		default:
		}
		resp, err := client.Get("http://" + endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return srv, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = srv.Stop()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("minio not live at %s after %v; its log:\n%s", endpoint, startTimeout, logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
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
