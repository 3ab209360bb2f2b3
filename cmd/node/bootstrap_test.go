package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// A node whose data directory was lost, started again with --bootstrap
// (the settings of the cluster's first start) over a bucket that holds the
// cluster's tables and state backups, refuses to start: it formed a second
// cluster over the bucket, whose garbage collection deleted the first
// one's newer state backups and, after its grace, every table. A node with
// Raft state of its own ignores --bootstrap, as before.
func TestBootstrapRefusedOverAClustersBucket(t *testing.T) {
	dir := t.TempDir()
	certs, storeDir := filepath.Join(dir, "certs"), filepath.Join(dir, "store")
	if err := cluster.MakeCA(certs); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MakeNodeCert(certs, "n1", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := local.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Put(ctx, "tables/links/0001.data", []byte("a table of the cluster")); err != nil {
		t.Fatal(err)
	}
	if key, err := clusterObjects(ctx, store); err != nil || key != "tables/links/0001.data" {
		t.Fatalf("clusterObjects: %q, %v", key, err)
	}
	port := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	args := []string{"--id", "n1", "--data-dir", filepath.Join(dir, "data"), "--certs-dir", certs, "--admin-token-file", token,
		"--store", "file://" + storeDir, "--raft-addr", port(), "--admin-addr", port(), "--http-addr", port(), "--bootstrap"}
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, &bytes.Buffer{}, &stderr) }()
	select {
	case rc := <-done:
		if rc == 0 || !strings.Contains(stderr.String(), "--bootstrap refused") || !strings.Contains(stderr.String(), "tables/links/0001.data") {
			t.Fatalf("exit %d, log:\n%s", rc, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a node without Raft state started with --bootstrap over a cluster's bucket, and is running; log:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "raft", "raft.db")); err == nil {
		t.Fatal("the refused node made Raft state")
	}

	// With Raft state of its own, --bootstrap is ignored: no refusal.
	raftDir := filepath.Join(dir, "member", "raft")
	n, err := cluster.Open(cluster.Config{ID: "n1", Dir: raftDir, RaftBind: port(), Certs: cluster.Files(certs, "n1"), Bootstrap: true})
	if err != nil {
		t.Fatal(err)
	}
	n.Close(ctx)
	if err := checkBootstrap(ctx, store, raftDir); err != nil {
		t.Fatalf("a member with Raft state: %v", err)
	}
	if err := checkBootstrap(ctx, store, filepath.Join(dir, "empty", "raft")); err == nil {
		t.Fatal("no Raft state over a cluster's bucket: not refused")
	}
	empty, err := local.New(filepath.Join(dir, "empty-store"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkBootstrap(ctx, empty, filepath.Join(dir, "empty", "raft")); err != nil {
		t.Fatalf("a first start over an empty bucket: %v", err)
	}
}
