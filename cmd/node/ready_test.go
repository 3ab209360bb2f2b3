package main

import (
	"context"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/query"
	"github.com/hashicorp/go-hclog"
)

// One readiness decides both /readyz and the query gate. On a one-node
// cluster (real Raft over mutual TLS on loopback): before the node knows
// a leader both say so; once it leads and serves what it applied both
// open, and run opens the gate by itself, for good.
func TestReadinessOneNode(t *testing.T) {
	dir := t.TempDir()
	if err := cluster.MakeCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MakeNodeCert(dir, "n1", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	node, err := cluster.Open(cluster.Config{ID: "n1", Dir: filepath.Join(dir, "raft"), RaftBind: addr, Certs: cluster.Files(dir, "n1"), Bootstrap: true,
		Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close(context.Background())
	store, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	views := query.NewViews(node.FSM, lsm.NewCatalog(t.TempDir(), store), hclog.NewNullLogger())
	r := newReadiness(node, views, 5*time.Second, "token")

	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		r.handler(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if id, _ := node.Leader(); id == "" {
		if err := r.caughtUp(); err == nil || !strings.Contains(err.Error(), "no leader known") {
			t.Errorf("query gate before any leader: %v", err)
		}
		if code, body := readyz(); code != 503 || !strings.Contains(body, "no leader known") {
			t.Errorf("/readyz before any leader: %d %q", code, body)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { views.Run(ctx); close(done) }()
	runDone := make(chan struct{})
	go func() { r.run(ctx); close(runDone) }()
	defer func() { cancel(); <-done; <-runDone }()

	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := readyz()
		if code == 200 && r.caught.Load() {
			if !strings.HasPrefix(body, "ready: generation ") {
				t.Fatalf("/readyz: %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: /readyz %d %q, gate open %v", code, body, r.caught.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.caughtUp(); err != nil {
		t.Fatalf("query gate after catching up: %v", err)
	}
}
