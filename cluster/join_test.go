package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
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
