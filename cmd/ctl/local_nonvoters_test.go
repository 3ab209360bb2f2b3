package main

import (
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/cluster"
)

// local up waits for the configuration it asked for: so many voters and
// so many non-voters, as the leader sees it.
func TestHealthyCountsSuffrage(t *testing.T) {
	servers := func(nonvoters ...string) []cluster.ServerStatus {
		var out []cluster.ServerStatus
		for _, id := range []string{"n1", "n2", "n3", "q1"} {
			s := cluster.ServerStatus{ID: id, Suffrage: cluster.SuffrageVoter}
			for _, nv := range nonvoters {
				if nv == id {
					s.Suffrage = cluster.SuffrageNonvoter
				}
			}
			out = append(out, s)
		}
		return out
	}
	status := func(sv []cluster.ServerStatus) []cluster.NodeStatus {
		var st []cluster.NodeStatus
		for _, s := range sv {
			state := "Follower"
			if s.ID == "n1" {
				state = "Leader"
			}
			st = append(st, cluster.NodeStatus{ID: s.ID, State: state, Leader: "n1", Servers: sv})
		}
		return st
	}
	if err := healthy(status(servers("q1")), localShape{voters: 3, nonvoters: 1}); err != nil {
		t.Fatal(err)
	}
	if err := healthy(status(servers()), localShape{voters: 3, nonvoters: 1}); err == nil || !strings.Contains(err.Error(), "4 voters and 0 non-voters") {
		t.Fatalf("q1 a voter: %v", err)
	}
	if err := healthy(status(servers("q1")), localShape{voters: 4}); err == nil {
		t.Fatal("a non-voter taken for a voter")
	}
}
