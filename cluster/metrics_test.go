package cluster

import (
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/prometheus/client_golang/prometheus"
)

func gatherRaft(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(n.Metrics()); err != nil {
		t.Fatal(err)
	}
	return metricstest.Values(t, reg)
}

// The Raft metrics follow a real two-node cluster: the leader's state and
// indexes, and a follower's last contact, which grows while it is cut off
// from the leader and drops when the partition heals.
func TestRaftMetrics(t *testing.T) {
	c := newTCluster(t)
	n1 := c.start("n1", true)
	c.leader(10 * time.Second)
	n2 := c.start("n2", false)
	if err := c.join(n1, n2); err != nil {
		t.Fatal(err)
	}
	gen := c.publish(n1, "r1")
	c.waitGen(gen, 10*time.Second)

	lm := gatherRaft(t, n1.node)
	if lm["eddy_raft_state{state=Leader}"] != 1 || lm["eddy_raft_state{state=Follower}"] != 0 || lm["eddy_raft_is_leader"] != 1 {
		t.Fatalf("leader metrics %v", lm)
	}
	if lm["eddy_raft_voters"] != 2 || lm["eddy_raft_term"] < 1 || lm["eddy_raft_commit_index"] < 3 || lm["eddy_raft_applied_index"] < lm["eddy_raft_commit_index"]-1 || lm["eddy_raft_last_contact_seconds"] != 0 {
		t.Fatalf("leader metrics %v", lm)
	}
	fm := gatherRaft(t, n2.node)
	if fm["eddy_raft_state{state=Follower}"] != 1 || fm["eddy_raft_is_leader"] != 0 {
		t.Fatalf("follower metrics %v", fm)
	}
	if c := fm["eddy_raft_last_contact_seconds"]; c < 0 || c > 1 {
		t.Fatalf("follower last contact %v s in a healthy cluster", c)
	}
	applied := fm["eddy_raft_applied_index"]

	// Cut n1 off from n2: n2's last contact grows past the heartbeat timeout.
	n1.blocked.Store("n2", true)
	n1.blocked.Store(n2.raftAddr, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fm = gatherRaft(t, n2.node)
		if fm["eddy_raft_last_contact_seconds"] > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follower last contact did not grow while cut off: %v", fm)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n1.blocked.Delete("n2")
	n1.blocked.Delete(n2.raftAddr)
	deadline = time.Now().Add(20 * time.Second)
	for {
		l := c.leader(20 * time.Second)
		g := c.publish(l, "r2-"+time.Now().Format("150405.000000"))
		c.waitGen(g, 20*time.Second)
		fm = gatherRaft(t, n2.node)
		lc := fm["eddy_raft_last_contact_seconds"]
		if fm["eddy_raft_applied_index"] > applied && lc >= 0 && lc < 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follower metrics after the partition healed: %v", fm)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
