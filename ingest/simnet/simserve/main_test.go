package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestServe: simserve prints its URLs, serves the world there (the relay
// lists every account, the PLC directory answers a DID document) and
// returns once its standard input ends.
func TestServe(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--seed", "7", "--accounts", "30", "--steps", "300", "--exit-on-stdin-eof"}, inR, outW)
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("ready line: %v (run: %v)", err, <-done)
	}
	var ready Ready
	if err := json.Unmarshal([]byte(line), &ready); err != nil {
		t.Fatalf("ready line %q: %v", line, err)
	}
	if ready.Accounts != 30 || ready.Steps != 300 || ready.Records <= 0 || len(ready.PDS) == 0 || ready.Firehose == "" || ready.Jetstream == "" {
		t.Fatalf("ready line %q", line)
	}
	var list struct {
		Repos []struct {
			DID string `json:"did"`
		} `json:"repos"`
	}
	getJSON(t, ready.Relay+"/xrpc/com.atproto.sync.listRepos?limit=1000", &list)
	if len(list.Repos) != 30 {
		t.Fatalf("listRepos: %d repositories, want 30", len(list.Repos))
	}
	var doc struct {
		ID string `json:"id"`
	}
	getJSON(t, ready.PLC+"/"+list.Repos[0].DID, &doc)
	if doc.ID != list.Repos[0].DID {
		t.Fatalf("DID document of %s names %q", list.Repos[0].DID, doc.ID)
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("simserve still serving 10 s after its stdin ended")
	}
}

// TestBadFlags: bad flags are an error, not a server.
func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--accounts", "0"}, {"--steps", "-1"}, {"extra"}, {"--nope"}} {
		if err := run(args, nil, io.Discard); err == nil {
			t.Fatalf("%q: no error", args)
		}
	}
}

func getJSON(t *testing.T, u string, out any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}
