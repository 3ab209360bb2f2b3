// Package toxiproxytest runs toxiproxy (Shopify/toxiproxy v2.5.0, a test
// service installed by scripts/install-toxiproxy.sh into GOPATH/bin and
// never linked into Eddy) for tests and benchmarks that need real TCP
// connections made slow: a bucket far away (the peers bench) and slow
// links between the nodes of a cluster (the chaos schedules). This kernel
// has no netem qdisc, so delay comes from a proxy in the path.
package toxiproxytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// apiTimeout bounds each request to toxiproxy's HTTP API.
const apiTimeout = 10 * time.Second

var apiClient = &http.Client{Timeout: apiTimeout}

// Server is a running toxiproxy-server.
type Server struct {
	cmd *exec.Cmd
	api string // http://127.0.0.1:port
}

// Find returns the toxiproxy-server binary: $EDDY_TOXIPROXY_BIN, else
// $(go env GOPATH)/bin, else PATH.
func Find() (string, error) {
	if p := os.Getenv("EDDY_TOXIPROXY_BIN"); p != "" {
		return p, nil
	}
	if gp := miniotest.GoPath(); gp != "" {
		p := filepath.Join(gp, "bin", "toxiproxy-server")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("toxiproxy-server"); err == nil {
		return p, nil
	}
	return "", errors.New("toxiproxy-server not found in $EDDY_TOXIPROXY_BIN, GOPATH/bin or PATH (bash scripts/install-toxiproxy.sh installs it)")
}

// Start runs a toxiproxy server whose API listens on a free loopback port.
func Start(ctx context.Context) (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	port, err := miniotest.FreePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-host", "127.0.0.1", "-port", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, api: fmt.Sprintf("http://127.0.0.1:%d", port)}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := apiClient.Get(s.api + "/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("toxiproxy at %s did not answer: %v", s.api, err)
		}
	}
}

// Stop kills the server.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func (s *Server) do(method, path string, body any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.api+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := apiClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("toxiproxy %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// Create makes a proxy named name listening on listen (host:port) and
// forwarding to upstream (host:port).
func (s *Server) Create(name, listen, upstream string) error {
	return s.do(http.MethodPost, "/proxies", map[string]any{"name": name, "listen": listen, "upstream": upstream, "enabled": true})
}

// Delete removes a proxy and closes its connections.
func (s *Server) Delete(name string) error {
	return s.do(http.MethodDelete, "/proxies/"+name, nil)
}

// Stream is the direction a toxic acts on: Downstream is what the
// upstream server sends back to the client, Upstream what the client
// sends.
type Stream string

const (
	Downstream Stream = "downstream"
	Upstream   Stream = "upstream"
)

// AddLatency delays every chunk of data on one stream of proxy by
// latency, plus or minus up to jitter, under the toxic name toxic.
func (s *Server) AddLatency(proxy, toxic string, stream Stream, latency, jitter time.Duration) error {
	return s.do(http.MethodPost, "/proxies/"+proxy+"/toxics", map[string]any{
		"name": toxic, "type": "latency", "stream": string(stream), "toxicity": 1.0,
		"attributes": map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()},
	})
}

// RemoveToxic removes a toxic from proxy.
func (s *Server) RemoveToxic(proxy, toxic string) error {
	return s.do(http.MethodDelete, "/proxies/"+proxy+"/toxics/"+toxic, nil)
}

// Far makes a proxy to upstream on a free loopback port whose responses
// are delayed by rtt (so that each request costs at least one round trip
// of it) and returns its address.
func (s *Server) Far(name, upstream string, rtt time.Duration) (string, error) {
	port, err := miniotest.FreePort()
	if err != nil {
		return "", err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	if err := s.Create(name, listen, upstream); err != nil {
		return "", err
	}
	if rtt > 0 {
		if err := s.AddLatency(name, name+"-latency", Downstream, rtt, 0); err != nil {
			return "", err
		}
	}
	return listen, nil
}
