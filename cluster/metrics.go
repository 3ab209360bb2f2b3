package cluster

import (
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// raftStates are the values of eddy_raft_state's state label.
var raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}

// metrics is a Prometheus collector reading the node's Raft state at each
// scrape.
type metrics struct {
	n                                       *Node
	state, leader, lastContact, term        *prometheus.Desc
	commitIndex, appliedIndex, lastLogIndex *prometheus.Desc
	fsmPending, voters, lastSnapshotIndex   *prometheus.Desc
}

// Metrics returns a Prometheus collector of the node's Raft state, read
// from the Raft API at every scrape:
//
//	eddy_raft_state{state}            1 for the current state (Follower, Candidate, Leader, Shutdown), 0 for the others
//	eddy_raft_is_leader               1 on the leader
//	eddy_raft_leader_known            1 while a leader is known
//	eddy_raft_last_contact_seconds    since a follower last heard from the leader (0 on the leader, -1 never)
//	eddy_raft_term, eddy_raft_commit_index, eddy_raft_applied_index, eddy_raft_last_log_index,
//	eddy_raft_last_snapshot_index, eddy_raft_fsm_pending, eddy_raft_voters
func (n *Node) Metrics() prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &metrics{
		n:                 n,
		state:             d("eddy_raft_state", "1 for this node's current Raft state, 0 for the others.", "state"),
		leader:            d("eddy_raft_is_leader", "1 while this node leads."),
		lastContact:       d("eddy_raft_last_contact_seconds", "Seconds since this follower last heard from the leader (0 on the leader, -1 if never)."),
		term:              d("eddy_raft_term", "Current Raft term."),
		commitIndex:       d("eddy_raft_commit_index", "Highest log index known committed."),
		appliedIndex:      d("eddy_raft_applied_index", "Highest log index applied to the replicated state."),
		lastLogIndex:      d("eddy_raft_last_log_index", "Last index in the local log."),
		lastSnapshotIndex: d("eddy_raft_last_snapshot_index", "Log index of the last snapshot."),
		fsmPending:        d("eddy_raft_fsm_pending", "Committed entries waiting to be applied."),
		voters:            d("eddy_raft_voters", "Voters in the configuration, as this node sees it."),
	}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.state, m.leader, m.lastContact, m.term, m.commitIndex, m.appliedIndex, m.lastLogIndex, m.lastSnapshotIndex, m.fsmPending, m.voters} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	r := m.n.raft
	st := r.State()
	for _, s := range raftStates {
		v := 0.0
		if s == st {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, s.String())
	}
	isLeader := 0.0
	if st == raft.Leader {
		isLeader = 1
	}
	ch <- prometheus.MustNewConstMetric(m.leader, prometheus.GaugeValue, isLeader)
	contact := -1.0
	if st == raft.Leader {
		contact = 0
	} else if lc := r.LastContact(); !lc.IsZero() {
		contact = time.Since(lc).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(m.lastContact, prometheus.GaugeValue, contact)
	stats := r.Stats()
	num := func(k string) float64 {
		v, _ := strconv.ParseFloat(stats[k], 64)
		return v
	}
	ch <- prometheus.MustNewConstMetric(m.term, prometheus.GaugeValue, num("term"))
	ch <- prometheus.MustNewConstMetric(m.commitIndex, prometheus.GaugeValue, num("commit_index"))
	ch <- prometheus.MustNewConstMetric(m.appliedIndex, prometheus.GaugeValue, float64(r.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(m.lastLogIndex, prometheus.GaugeValue, float64(r.LastIndex()))
	ch <- prometheus.MustNewConstMetric(m.lastSnapshotIndex, prometheus.GaugeValue, num("last_snapshot_index"))
	ch <- prometheus.MustNewConstMetric(m.fsmPending, prometheus.GaugeValue, num("fsm_pending"))
	if servers, err := m.n.Servers(); err == nil {
		voters := 0
		for _, s := range servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
		ch <- prometheus.MustNewConstMetric(m.voters, prometheus.GaugeValue, float64(voters))
	}
}
