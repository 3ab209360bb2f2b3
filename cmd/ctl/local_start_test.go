package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets this test binary stand in for eddy-node: with
// EDDY_CTL_TEST_FAKE_NODE set, it listens on its --admin-addr until killed,
// or fails as eddy-node does when the address is taken.
func TestMain(m *testing.M) {
	if os.Getenv("EDDY_CTL_TEST_FAKE_NODE") != "" {
		fakeNode(os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

func fakeNode(args []string) {
	addr := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--admin-addr" {
			addr = args[i+1]
		}
	}
	if os.Getenv("EDDY_CTL_TEST_FAKE_NODE") == "crash" {
		fmt.Fprintln(os.Stderr, "fake node: a bad flag")
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "listen %s: %v\n", addr, err)
		os.Exit(1)
	}
	defer ln.Close()
	fmt.Fprintln(os.Stderr, nodeStartedLine)
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Close()
	}
}

// A node whose chosen port was taken before it bound it is configured
// again, over an empty data directory, and started on fresh ports; a node
// that exits for another reason is reported with its log, not retried.
func TestStartLocalNodeRetriesTakenPort(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	n := LocalNode{ID: "n1", Bin: bin, Log: filepath.Join(dir, "n1.log")}
	var retries []bool
	configure := func(retry bool) error {
		retries = append(retries, retry)
		n.Admin = taken.Addr().String() // the first choice: taken meanwhile
		if retry {
			a, err := freePort()
			if err != nil {
				return err
			}
			n.Admin = a
		}
		n.Args = []string{"--id", "n1", "--admin-addr", n.Admin}
		return nil
	}
	t.Setenv("EDDY_CTL_TEST_FAKE_NODE", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = startLocalNodeFresh(ctx, &n, configure)
	t.Cleanup(func() { localKill(LocalCluster{Nodes: []LocalNode{n}}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(retries) != 2 || retries[0] || !retries[1] {
		t.Fatalf("configured %d times (retry flags %v), want twice: the taken port, then fresh ones", len(retries), retries)
	}
	if !alive(n.PID) || n.Admin == taken.Addr().String() {
		t.Fatalf("node %+v: want it running on a fresh port", n)
	}
	if b, _ := os.ReadFile(n.Log); !strings.Contains(string(b), "address already in use") {
		t.Fatalf("the first start did not fail on the taken port; log:\n%s", b)
	}

	// Another failure: reported with the log's tail, configured once.
	t.Setenv("EDDY_CTL_TEST_FAKE_NODE", "crash")
	m := LocalNode{ID: "n2", Bin: bin, Log: filepath.Join(dir, "n2.log")}
	tries := 0
	err = startLocalNodeFresh(ctx, &m, func(bool) error {
		tries++
		a, err := freePort()
		m.Admin, m.Args = a, []string{"--id", "n2", "--admin-addr", a}
		return err
	})
	if err == nil || tries != 1 || !strings.Contains(err.Error(), "a bad flag") {
		t.Fatalf("crashing node: %d tries, error %v", tries, err)
	}
}
