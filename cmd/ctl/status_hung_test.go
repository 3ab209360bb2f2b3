package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
)

// hungListener accepts connections and never answers on them (a process
// stopped with SIGSTOP, a host that drops packets after the handshake).
func hungListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// A member that does not answer (here a non-voter whose addresses accept
// and hang) neither holds status for a whole call timeout nor makes it
// fail: the node asked waits PeerStatusTimeout for it, and an address
// that hangs, given first, is not waited for once another answers.
// Before, the node waited 25 s for the member and eddy-ctl tried the
// addresses in turn, so `status --addr HUNG,n1` failed after its 30 s.
func TestStatusWithAHungMember(t *testing.T) {
	noTokenEnv(t)
	certDir, tokenFile, tok := newCerts(t, t.TempDir(), "n1")
	n1 := startNode(t, certDir, tok, "n1", true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n1.srv.Close()
		n1.node.Close(ctx)
	})
	auth := []string{"--token-file", tokenFile}
	hung := hungListener(t)
	if code, out, errs := ctl(t, append([]string{"join", "--addr", n1.admin, "--id", "h1", "--raft", hungListener(t), "--admin", hung, "--http", "127.0.0.1:1", "--nonvoter"}, auth...)...); code != 0 {
		t.Fatalf("join of the hung member: exit %d: %s%s", code, out, errs)
	}
	start := time.Now()
	code, out, errs := ctl(t, append([]string{"status", "--addr", hung + "," + n1.admin, "--timeout", "12s"}, auth...)...)
	took := time.Since(start)
	t.Logf("after %v:\n%s%s", took, out, errs)
	if code != 0 || !strings.Contains(out, "h1: no answer within "+cluster.PeerStatusTimeout.String()) || !strings.Contains(out, "Leader") || took > 11*time.Second {
		t.Fatalf("status with a hung member: exit %d after %v", code, took)
	}
}

// A leader whose own answer is missing, named by the followers that
// answered, is said to be there, not a lost majority.
func TestStatusNamesALeaderThatDidNotAnswer(t *testing.T) {
	for _, c := range []struct {
		nodes []cluster.NodeStatus
		want  string
	}{
		{[]cluster.NodeStatus{{ID: "n1", Error: "401"}, {ID: "n2", State: "Follower", Leader: "n1"}, {ID: "n3", State: "Follower", Leader: "n1"}},
			"the leader, n1 as the nodes that answered name it, did not answer"},
		{[]cluster.NodeStatus{{ID: "n1", Error: "timeout"}, {ID: "n2", State: "Candidate"}, {ID: "n3", State: "Follower", Leader: "n1"}},
			"no node is leader"},
		{[]cluster.NodeStatus{{ID: "n1", Error: "timeout"}, {ID: "n2", State: "Follower", Leader: "n3"}, {ID: "n3", State: "Follower", Leader: "n1"}},
			"no node is leader"},
	} {
		var b bytes.Buffer
		printStatus(&b, c.nodes)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%+v: want %q in\n%s", c.nodes, c.want, b.String())
		}
	}
}

// With no leader (a lost majority), a member's answer is printed once
// status has waited statusGrace for one showing a leader: a hung address
// does not hold it for its whole --timeout.
func TestStatusWithoutALeaderAndAHungAddress(t *testing.T) {
	noTokenEnv(t)
	t.Setenv(envToken, "0123456789abcdef0123456789abcdef")
	candidate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"id":"n1","state":"Candidate","last_contact_ms":-1},{"id":"n2","error":"no answer within 5s","last_contact_ms":-1}]`)
	}))
	defer candidate.Close()
	start := time.Now()
	hung := hungListener(t)
	code, out, errs := ctl(t, "status", "--addr", hung+","+strings.TrimPrefix(candidate.URL, "http://"), "--timeout", "20s")
	took := time.Since(start)
	t.Logf("after %v:\n%s%s", took, out, errs)
	if code != 0 || !strings.Contains(out, "no node is leader") || !strings.Contains(errs, hung+": no answer within") || took < statusGrace || took > statusGrace+3*time.Second {
		t.Fatalf("status without a leader: exit %d after %v, want 0 after about %v", code, took, statusGrace)
	}
}
