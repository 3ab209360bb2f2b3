package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/hashicorp/raft"
)

// joinReq asks via to apply req for n (its addresses filled in), retrying
// while no leader is known, as eddy-ctl join does.
func (c *tcluster) joinReq(via, n *tnode, req JoinRequest) (map[string]string, error) {
	req.ID, req.Raft, req.Admin, req.HTTP = n.id, n.raftAddr, n.adminAddr, "127.0.0.1:1"
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	cl := AdminClient{Addrs: []string{via.adminAddr}, Token: testToken}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var resp map[string]string
		err := cl.Call(context.Background(), http.MethodPost, "/admin/join", body, &resp)
		var ce *CallError
		if err == nil || !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return resp, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// suffrages returns each server's suffrage in n's configuration.
func suffrages(t *testing.T, n *tnode) map[string]string {
	t.Helper()
	servers, err := n.node.Servers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range servers {
		out[string(s.ID)] = s.Suffrage.String()
	}
	return out
}

func wantSuffrages(t *testing.T, n *tnode, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		have := suffrages(t, n)
		same := len(have) == len(want)
		for id, s := range want {
			same = same && have[id] == s
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's configuration: %v, want %v", n.id, have, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A non-voter applies every entry and serves status like a follower, but
// never votes, never leads and never counts for quorum: with three voters
// and one non-voter, two voters down is no quorum although two of four
// nodes are up. A re-join keeps its suffrage; a change must be asked for.
// (Over 120 lines: one scenario: join, replicate, lose quorum, promote, demote, move, remove.)
func TestNonvoter(t *testing.T) {
	c := newTCluster(t)
	n1 := c.start("n1", true)
	c.leader(5 * time.Second)
	n2, n3, q1 := c.start("n2", false), c.start("n3", false), c.start("q1", false)
	for _, n := range []*tnode{n2, n3} {
		if err := c.join(n1, n); err != nil {
			t.Fatal(err)
		}
	}
	// Through a follower: forwarded to the leader.
	resp, err := c.joinReq(n2, q1, JoinRequest{Suffrage: "nonvoter"})
	if err != nil {
		t.Fatal(err)
	}
	if resp["joined"] != "q1" || resp["suffrage"] != SuffrageNonvoter {
		t.Fatalf("join answered %v", resp)
	}
	all := map[string]string{"n1": SuffrageVoter, "n2": SuffrageVoter, "n3": SuffrageVoter, "q1": SuffrageNonvoter}
	wantSuffrages(t, n1, all)

	l := c.leader(5 * time.Second)
	gen := c.publish(l, "a")
	c.waitGen(gen, 5*time.Second) // q1 included
	if ni, ok := l.node.FSM.Node("q1"); !ok || ni.Admin != q1.adminAddr {
		t.Fatalf("q1's addresses not recorded: %+v", ni)
	}
	wantSuffrages(t, q1, all) // it applied the configuration too
	st := q1.admin.Status()
	if st.Suffrage != SuffrageNonvoter || st.State != raft.Follower.String() || st.Leader != l.id {
		t.Fatalf("q1 status: suffrage %q, state %q, leader %q", st.Suffrage, st.State, st.Leader)
	}
	if st := l.admin.Status(); st.Suffrage != SuffrageVoter {
		t.Fatalf("leader suffrage %q", st.Suffrage)
	}

	// Re-joins keep the suffrage: plain (as a node restarted with --join
	// does), and asking for voter without change_suffrage.
	for _, req := range []JoinRequest{{}, {Suffrage: "voter"}, {Suffrage: "nonvoter"}} {
		if _, err := c.joinReq(n3, q1, req); err != nil {
			t.Fatalf("re-join %+v: %v", req, err)
		}
		wantSuffrages(t, l, all)
	}
	// The leader is never demoted by a join; bad suffrages are refused.
	var ce *CallError
	if _, err := c.joinReq(n1, l, JoinRequest{Suffrage: "nonvoter", ChangeSuffrage: true}); !errors.As(err, &ce) || ce.Status != http.StatusConflict {
		t.Fatalf("demoting the leader: %v", err)
	}
	if _, err := c.joinReq(n1, q1, JoinRequest{Suffrage: "observer"}); !errors.As(err, &ce) || ce.Status != http.StatusBadRequest {
		t.Fatalf("suffrage observer: %v", err)
	}
	if _, err := c.joinReq(n1, q1, JoinRequest{ChangeSuffrage: true}); !errors.As(err, &ce) || ce.Status != http.StatusBadRequest {
		t.Fatalf("change_suffrage without suffrage: %v", err)
	}

	t.Run("two voters down is no quorum", func(t *testing.T) {
		l := c.leader(5 * time.Second)
		var down []*tnode
		for _, n := range []*tnode{n1, n2, n3} {
			if n != l {
				down = append(down, n)
			}
		}
		for _, n := range down {
			c.crash(n)
		}
		// The leader still reaches q1, but q1 does not count: the leader
		// steps down, nothing commits, and no node leads.
		deadline := time.Now().Add(5 * time.Second)
		for l.node.IsLeader() {
			if time.Now().After(deadline) {
				t.Fatal("the leader kept leading with one voter and one non-voter")
			}
			time.Sleep(20 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := l.node.Propose(ctx, fsm.TypeFlush, 0, flushEntry(l.node.FSM.Manifest().Generation, "no-quorum"))
		cancel()
		if err == nil {
			t.Fatal("a proposal committed without a quorum of voters")
		}
		// Ten election timeouts: no leader, q1 never a candidate.
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if l.node.IsLeader() || q1.node.raft.State() != raft.Follower {
				t.Fatalf("without quorum: %s %v, q1 %v", l.id, l.node.raft.State(), q1.node.raft.State())
			}
		}
		// One voter back is a quorum again; q1 follows the new history.
		c.start(down[0].id, false)
		nl := c.leader(10 * time.Second)
		if nl == q1 {
			t.Fatal("the non-voter leads")
		}
		// A new leader applies what is committed before it builds on it.
		if err := nl.node.Barrier(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		g := c.publish(nl, "quorum-again")
		c.waitGen(g, 5*time.Second)
		c.start(down[1].id, false)
		c.waitGen(g, 10*time.Second)
	})

	t.Run("promote and demote", func(t *testing.T) {
		l := c.leader(5 * time.Second)
		if _, err := c.joinReq(q1, q1, JoinRequest{Suffrage: "voter", ChangeSuffrage: true}); err != nil {
			t.Fatal(err)
		}
		four := map[string]string{"n1": SuffrageVoter, "n2": SuffrageVoter, "n3": SuffrageVoter, "q1": SuffrageVoter}
		wantSuffrages(t, l, four)
		wantSuffrages(t, q1, four)
		// A plain re-join keeps it a voter.
		if _, err := c.joinReq(n1, q1, JoinRequest{}); err != nil {
			t.Fatal(err)
		}
		wantSuffrages(t, l, four)
		if _, err := c.joinReq(n1, q1, JoinRequest{Suffrage: "Nonvoter", ChangeSuffrage: true}); err != nil {
			t.Fatal(err)
		}
		wantSuffrages(t, l, all)
		g := c.publish(c.leader(5*time.Second), "after-demote")
		c.waitGen(g, 5*time.Second)
	})

	t.Run("a non-voter's address changes, its suffrage stays", func(t *testing.T) {
		l := c.leader(5 * time.Second)
		c.stop(q1)
		q1.raftAddr = freeAddr(t)
		c.start("q1", false)
		if _, err := c.joinReq(l, q1, JoinRequest{}); err != nil {
			t.Fatal(err)
		}
		wantSuffrages(t, l, all)
		servers, _ := l.node.Servers()
		for _, s := range servers {
			if s.ID == "q1" && string(s.Address) != q1.raftAddr {
				t.Fatalf("q1 at %s, want %s", s.Address, q1.raftAddr)
			}
		}
		g := c.publish(l, "after-move")
		c.waitGen(g, 10*time.Second)
	})

	t.Run("a removed non-voter is refused", func(t *testing.T) {
		l := c.leader(5 * time.Second)
		cl := AdminClient{Addrs: []string{q1.adminAddr}, Token: testToken} // forwarded by the non-voter
		if err := cl.Call(context.Background(), http.MethodPost, "/admin/remove", []byte(`{"id":"q1"}`), nil); err != nil {
			t.Fatal(err)
		}
		wantSuffrages(t, l, map[string]string{"n1": SuffrageVoter, "n2": SuffrageVoter, "n3": SuffrageVoter})
		var ce *CallError
		if _, err := c.joinReq(l, q1, JoinRequest{Suffrage: "nonvoter"}); !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
			t.Fatalf("re-join of a removed non-voter: %v", err)
		}
		c.stop(q1)
		g := c.publish(l, "after-remove")
		c.waitGen(g, 5*time.Second)
	})
}
