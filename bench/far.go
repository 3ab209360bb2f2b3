package bench

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

// A bucket far away: toxiproxy (Shopify/toxiproxy v2.5.0, a test service
// run as its own process, installed by scripts/install-toxiproxy.sh)
// between the engine and MinIO, adding a fixed delay to every response,
// so that each request to the bucket costs at least one round trip of
// the delay asked. Connections are kept alive by the S3 client, as to a
// real bucket; the proxy's own hop is loopback.

// toxiproxyAPITimeout bounds each request to toxiproxy's HTTP API.
const toxiproxyAPITimeout = 10 * time.Second

var toxiproxyClient = &http.Client{Timeout: toxiproxyAPITimeout}

// toxiproxy is a running toxiproxy-server.
type toxiproxy struct {
	cmd *exec.Cmd
	api string // http://127.0.0.1:port
}

// findToxiproxy returns the toxiproxy-server binary: $EDDY_TOXIPROXY_BIN,
// else $(go env GOPATH)/bin, else PATH.
func findToxiproxy() (string, error) {
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

// startToxiproxy runs a toxiproxy server on a free loopback port.
func startToxiproxy(ctx context.Context) (*toxiproxy, error) {
	bin, err := findToxiproxy()
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
	t := &toxiproxy{cmd: cmd, api: fmt.Sprintf("http://127.0.0.1:%d", port)}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := toxiproxyClient.Get(t.api + "/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return t, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.stop()
			return nil, fmt.Errorf("toxiproxy at %s did not answer: %v", t.api, err)
		}
	}
}

func (t *toxiproxy) stop() {
	_ = t.cmd.Process.Kill()
	_ = t.cmd.Wait()
}

func (t *toxiproxy) post(path string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := toxiproxyClient.Post(t.api+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("toxiproxy %s: %s: %s", path, resp.Status, msg)
	}
	return nil
}

// proxy makes a proxy to upstream (host:port) whose responses are
// delayed by rtt, and returns its address.
func (t *toxiproxy) proxy(name, upstream string, rtt time.Duration) (string, error) {
	port, err := miniotest.FreePort()
	if err != nil {
		return "", err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	if err := t.post("/proxies", map[string]any{"name": name, "listen": listen, "upstream": upstream, "enabled": true}); err != nil {
		return "", err
	}
	if rtt > 0 {
		if err := t.post("/proxies/"+name+"/toxics", map[string]any{
			"name": name + "-latency", "type": "latency", "stream": "downstream", "toxicity": 1.0,
			"attributes": map[string]any{"latency": rtt.Milliseconds(), "jitter": 0},
		}); err != nil {
			return "", err
		}
	}
	return listen, nil
}
