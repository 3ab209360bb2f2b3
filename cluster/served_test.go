package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// MembersServed counts a member's generation only from the member itself:
// another node answering at its admin address (one started in its place
// before it was removed from the configuration) is an error, as an
// unreachable member is, so the garbage collector waits.
func TestMembersServedChecksWhoAnswers(t *testing.T) {
	c := newTCluster(t)
	n1 := c.start("n1", true)
	c.leader(5 * time.Second)
	n2 := c.start("n2", false)
	if err := c.join(n1, n2); err != nil {
		t.Fatal(err)
	}
	c.waitGen(c.publish(n1, "a"), 5*time.Second)
	n1.admin.Served = func() uint64 { return 7 }
	n2.admin.Served = func() uint64 { return 9 }
	ctx := context.Background()
	ms, err := n1.admin.MembersServed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("members %+v", ms)
	}
	for _, m := range ms {
		if want := map[string]uint64{"n1": 7, "n2": 9}[m.ID]; m.Err != nil || m.Generation != want {
			t.Fatalf("member %s: generation %d (want %d), %v", m.ID, m.Generation, want, m.Err)
		}
	}

	// n2 goes; a stranger (its own one-node cluster) takes its admin address.
	c.stop(n2)
	if err := MakeNodeCert(c.certDir, "x", []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	c.nodes["x"] = &tnode{id: "x", dir: filepath.Join(t.TempDir(), "x"), raftAddr: freeAddr(t), adminAddr: n2.adminAddr, blocked: &sync.Map{}}
	c.start("x", true).admin.Served = func() uint64 { return 11 }
	ms, err = n1.admin.MembersServed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		switch m.ID {
		case "n1":
			if m.Err != nil || m.Generation != 7 {
				t.Fatalf("n1: generation %d, %v", m.Generation, m.Err)
			}
		case "n2":
			if m.Err == nil || !strings.Contains(m.Err.Error(), `answered by node "x"`) {
				t.Fatalf("n2's address answered by x: generation %d, err %v", m.Generation, m.Err)
			}
		default:
			t.Fatalf("member %s", m.ID)
		}
	}
}

// VoterReachesStore: true once another voter answers that its store
// answered its last probe; false while no other voter says so (an older
// build, a node not yet probed, a failed probe) or answers at all.
func TestVoterReachesStore(t *testing.T) {
	c := newTCluster(t)
	n1, n2, n3 := c.three()
	c.waitGen(c.publish(n1, "a"), 5*time.Second)
	ctx := context.Background()
	// Neither says anything (an older build, or not probed yet).
	if n1.admin.VoterReachesStore(ctx) {
		t.Fatal("no other voter says its store answers, and it says one does")
	}
	no := func() bool { return false }
	n2.admin.StoreAnswers, n3.admin.StoreAnswers = no, no
	if n1.admin.VoterReachesStore(ctx) {
		t.Fatal("every other voter's last probe failed, and it says one answers")
	}
	n3.admin.StoreAnswers = func() bool { return true }
	if !n1.admin.VoterReachesStore(ctx) {
		t.Fatal("n3's store answers it, and it says none does")
	}
	c.stop(n3)
	if n1.admin.VoterReachesStore(ctx) {
		t.Fatal("n3 is gone and n2's store is down, and it says one answers")
	}
}
