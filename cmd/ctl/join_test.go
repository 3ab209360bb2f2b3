package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
)

// serverSuffrage is id's suffrage in the configuration nodes report.
func serverSuffrage(nodes []cluster.NodeStatus, id string) string {
	for _, n := range nodes {
		if n.State != "Leader" {
			continue
		}
		for _, s := range n.Servers {
			if s.ID == id {
				return s.Suffrage
			}
		}
	}
	return ""
}

// join --nonvoter adds a query node; status shows it as a Nonvoter; a plain
// re-join keeps it one; --voter promotes it and --nonvoter demotes it back;
// the leader is not demoted; the two flags exclude each other.
func TestJoinNonvoter(t *testing.T) {
	noTokenEnv(t)
	certDir, tokenFile, tok := newCerts(t, t.TempDir(), "n1,q1")
	n1 := startNode(t, certDir, tok, "n1", true)
	q1 := startNode(t, certDir, tok, "q1", false)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range []*testNode{q1, n1} {
			n.srv.Close()
			n.node.Close(ctx)
		}
	})
	auth := []string{"--token-file", tokenFile}
	join := func(n *testNode, extra ...string) (int, string, string) {
		args := append([]string{"join", "--addr", n1.admin, "--id", n.id, "--raft", n.raft, "--admin", n.admin, "--http", "127.0.0.1:1"}, auth...)
		return ctl(t, append(args, extra...)...)
	}
	suffrageIs := func(want string) func([]cluster.NodeStatus) bool {
		return func(nodes []cluster.NodeStatus) bool {
			return settled(2)(nodes) && serverSuffrage(nodes, "q1") == want
		}
	}
	status := append([]string{"--addr", n1.admin + "," + q1.admin}, auth...)

	if code, out, errs := join(q1, "--nonvoter"); code != 0 || !strings.Contains(out, "q1 is a member (non-voter;") {
		t.Fatalf("join --nonvoter: exit %d: %s%s", code, out, errs)
	}
	st := statusJSON(t, "q1 a non-voter", suffrageIs(cluster.SuffrageNonvoter), status...)
	for _, n := range st {
		if n.ID == "q1" && (n.Suffrage != cluster.SuffrageNonvoter || n.State != "Follower") {
			t.Fatalf("q1's own status: suffrage %q, state %q", n.Suffrage, n.State)
		}
	}
	out := mustCtl(t, append([]string{"status"}, status...)...)
	if !strings.Contains(out, "Nonvoter") {
		t.Fatalf("status does not show the non-voter:\n%s", out)
	}

	// A plain re-join keeps it a non-voter.
	if code, out, errs := join(q1); code != 0 || !strings.Contains(out, "non-voter") {
		t.Fatalf("re-join: exit %d: %s%s", code, out, errs)
	}
	statusJSON(t, "q1 still a non-voter", suffrageIs(cluster.SuffrageNonvoter), status...)
	// Promoted, then demoted.
	if code, out, errs := join(q1, "--voter", "--json"); code != 0 || !strings.Contains(out, `"suffrage": "Voter"`) {
		t.Fatalf("join --voter: exit %d: %s%s", code, out, errs)
	}
	statusJSON(t, "q1 a voter", suffrageIs(cluster.SuffrageVoter), status...)
	if code, out, errs := join(q1, "--nonvoter"); code != 0 {
		t.Fatalf("join --nonvoter (demote): exit %d: %s%s", code, out, errs)
	}
	statusJSON(t, "q1 a non-voter again", suffrageIs(cluster.SuffrageNonvoter), status...)

	// The leader is not demoted.
	if code, _, errs := join(n1, "--nonvoter"); code == 0 || !strings.Contains(errs, "transfer leadership") {
		t.Fatalf("demoting the leader: exit %d: %s", code, errs)
	}
	if code, _, errs := join(q1, "--nonvoter", "--voter"); code != 2 || !strings.Contains(errs, "exclude") {
		t.Fatalf("--nonvoter --voter: exit %d: %s", code, errs)
	}
}
