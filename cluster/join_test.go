package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/hashicorp/raft"
)

// A join from a node without Raft state (fresh) under a voter's ID is
// refused: that voter lost its log and its vote. A check changes nothing:
// a new node it would take is not added, and the refusals are the join's.
func TestFreshJoinUnderAVotersIDRefused(t *testing.T) {
	c := newTCluster(t)
	n1 := c.start("n1", true)
	c.leader(5 * time.Second)
	n2 := c.start("n2", false)
	if err := c.join(n1, n2); err != nil {
		t.Fatal(err)
	}
	cl := AdminClient{Addrs: []string{n1.adminAddr}, Token: testToken}
	ask := func(id, raft string, fresh, check bool) error {
		body := fmt.Sprintf(`{"id":%q,"raft":%q,"admin":"127.0.0.1:1","http":"127.0.0.1:1","fresh":%v,"check":%v}`, id, raft, fresh, check)
		return cl.Call(context.Background(), http.MethodPost, "/admin/join", []byte(body), nil)
	}
	var ce *CallError
	for _, check := range []bool{true, false} {
		if err := ask("n2", n2.raftAddr, true, check); !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Name != "FreshVoter" {
			t.Fatalf("check %v: a fresh node under voter n2's ID: %v, want 409 FreshVoter", check, err)
		}
	}
	if err := ask("n2", n2.raftAddr, false, false); err != nil {
		t.Fatalf("n2 joining again with its state: %v", err)
	}
	if err := ask("n4", freeAddr(t), true, true); err != nil {
		t.Fatalf("a check for a new node: %v", err)
	}
	servers, err := n1.node.Servers()
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 2 {
		t.Fatalf("a check changed the configuration: %v", servers)
	}
	if err := n1.node.Remove(context.Background(), "n2"); err != nil {
		t.Fatal(err)
	}
	if err := ask("n2", n2.raftAddr, true, true); !errors.As(err, &ce) || ce.Name != "Removed" {
		t.Fatalf("a check for a removed ID: %v, want Removed", err)
	}
}

// A join records the member's addresses before the configuration names it,
// so that the cluster status asked of any node right after the join shows
// no member without them (it showed "admin address unknown" while a
// follower had the new configuration but not yet the addresses).
func TestJoinRecordsAddressesFirst(t *testing.T) {
	c := newTCluster(t)
	n1, n2, n3 := c.three()
	for i := range 3 {
		q := c.start(fmt.Sprintf("q%d", i+1), false)
		if _, err := c.joinReq(n2, q, JoinRequest{Suffrage: "nonvoter"}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []*tnode{n1, n2, n3, q} {
			var sts []NodeStatus
			cl := AdminClient{Addrs: []string{n.adminAddr}, Token: testToken}
			if err := cl.Call(context.Background(), http.MethodGet, "/admin/cluster", nil, &sts); err != nil {
				t.Fatal(err)
			}
			for _, st := range sts {
				if st.Error != "" {
					t.Fatalf("%s's cluster status right after %s joined: %s: %s", n.id, q.id, st.ID, st.Error)
				}
			}
		}
		// In the leader's log, the addresses come before the configuration.
		l := c.leader(5 * time.Second)
		first, err := l.node.store.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		last, err := l.node.store.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		var info, conf uint64
		for i := first; i <= last && conf == 0; i++ {
			var e raft.Log
			if err := l.node.store.GetLog(i, &e); err != nil {
				t.Fatal(err)
			}
			switch e.Type {
			case raft.LogCommand:
				d, err := fsm.Decode(e.Data)
				if ni, ok := d.Payload.(*fsm.NodeInfo); err == nil && ok && ni.ID == q.id && info == 0 {
					info = i
				}
			case raft.LogConfiguration:
				for _, s := range raft.DecodeConfiguration(e.Data).Servers {
					if string(s.ID) == q.id {
						conf = i
					}
				}
			}
		}
		if info == 0 || conf == 0 || info > conf {
			t.Fatalf("%s: addresses at index %d, first configuration naming it at %d (log %d..%d)", q.id, info, conf, first, last)
		}
	}
	// A refused join changes nothing: the leader asked to demote itself,
	// with other addresses, keeps the ones it had.
	l := c.leader(5 * time.Second)
	before, _ := l.node.FSM.Node(l.id)
	body := fmt.Sprintf(`{"id":%q,"raft":%q,"admin":"127.0.0.1:1","http":"127.0.0.1:1","suffrage":"nonvoter","change_suffrage":true}`, l.id, l.raftAddr)
	var ce *CallError
	cl := AdminClient{Addrs: []string{l.adminAddr}, Token: testToken}
	if err := cl.Call(context.Background(), http.MethodPost, "/admin/join", []byte(body), nil); !errors.As(err, &ce) || ce.Status != http.StatusConflict {
		t.Fatalf("the leader asked to demote itself: %v, want 409", err)
	}
	if after, _ := l.node.FSM.Node(l.id); after != before {
		t.Fatalf("a refused join changed the leader's addresses: %+v, were %+v", after, before)
	}
	// A member recorded without an admin address (it joined without one)
	// does not make status wait for one: it would wait on every call.
	q := c.start("q9", false)
	if err := l.node.JoinAs(context.Background(), JoinRequest{ID: q.id, Raft: q.raftAddr, Suffrage: "nonvoter"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st := l.admin.statusWithAddresses(context.Background())
	if took := time.Since(start); took >= addressWait/2 {
		t.Fatalf("status took %v with a member that has no admin address (%d members)", took, len(st.Servers))
	}
}
