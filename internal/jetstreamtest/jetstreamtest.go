// Package jetstreamtest runs the real Jetstream v2 server
// (github.com/bluesky-social/jetstream v0.2.0, cmd/jetstream; `make
// jetstream`, scripts/install-jetstream.sh) for tests and benchmarks: on
// a relay and PLC directory (the simulated network's), until it has
// crawled every repository and sealed its archive. The server verifies
// every commit (Sync 1.1), so a simulated world must be
// simnet.Config.Verifiable, and without did:web (the server resolves
// did:web over https at the host itself). Test support: the node never
// imports it.
package jetstreamtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// EnvBin names the server binary (default GOPATH/bin/jetstream-v0.2.0).
	EnvBin = "EDDY_JETSTREAM_BIN"
	// EnvRequire set to 1 (make test) makes a missing binary fail tests
	// (as does CI) instead of skipping them.
	EnvRequire = "EDDY_REQUIRE_JETSTREAM"

	// sealTimeout bounds the wait for the crawl and the sealed archive.
	sealTimeout = 5 * time.Minute
	// logTailBytes: the server log shown when a test fails.
	logTailBytes = 8000
)

// Server is a running Jetstream v2 server.
type Server struct {
	Addr string // 127.0.0.1:port: /subscribe, /xrpc/network.bsky.jetstream.*
	Log  string // its log file
}

// Segment is a sealed archive segment as listSegments describes it.
type Segment struct {
	Name       string `json:"name"`
	EventCount int64  `json:"eventCount"`
	MinSeq     int64  `json:"minSeq"`
	MaxSeq     int64  `json:"maxSeq"`
}

// Binary finds the server ($EDDY_JETSTREAM_BIN, else
// GOPATH/bin/jetstream-v0.2.0); missing, it skips tb, or fails it under
// EDDY_REQUIRE_JETSTREAM=1 or CI.
func Binary(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv(EnvBin)
	if p == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			p = filepath.Join(filepath.SplitList(strings.TrimSpace(string(out)))[0], "bin", "jetstream-v0.2.0")
		}
	}
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		msg := fmt.Sprintf("no Jetstream v2 server at %q (make jetstream builds one)", p)
		if os.Getenv(EnvRequire) == "1" || os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return p
}

// Start runs the server on relay and plc (base URLs) and waits until its
// archive is sealed; it stops when tb ends, showing its log's tail if tb
// failed.
func Start(tb testing.TB, relay, plc string) *Server {
	tb.Helper()
	bin := Binary(tb)
	dir := tb.TempDir()
	addr, debug := freeAddr(tb), freeAddr(tb)
	logPath := filepath.Join(dir, "jetstream.log")
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "--log-format", "text", "serve",
		"--addr", addr, "--debug-addr", debug, "--data-dir", filepath.Join(dir, "data"),
		"--relay-url", relay, "--plc-url", plc, "--shutdown-timeout", "5s")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: addr, Log: logPath}
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if tb.Failed() {
			tb.Logf("--- jetstream log tail:\n%s", s.logTail())
		}
	})
	deadline := time.Now().Add(sealTimeout)
	for {
		segs, err := s.ListSegments()
		if err == nil && len(segs) > 0 {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("jetstream not serving its archive after %v (%v):\n%s", sealTimeout, err, s.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Server) logTail() []byte {
	b, _ := os.ReadFile(s.Log)
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return b
}

// ListSegments lists the server's sealed archive segments (one page: a
// test archive has a few).
func (s *Server) ListSegments() ([]Segment, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.Addr + "/xrpc/network.bsky.jetstream.listSegments")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listSegments: %s: %s", resp.Status, b)
	}
	var out struct {
		Segments []Segment `json:"segments"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out.Segments, nil
}

// Tip is the sealed archive's last seq.
func (s *Server) Tip(tb testing.TB) int64 {
	tb.Helper()
	segs, err := s.ListSegments()
	if err != nil || len(segs) == 0 {
		tb.Fatalf("listSegments: %v (%d segments)", err, len(segs))
	}
	return segs[len(segs)-1].MaxSeq
}

// env is the environment without JETSTREAM_* variables: the server
// refuses to start with one it does not know.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETSTREAM_") {
			out = append(out, kv)
		}
	}
	return out
}

func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
