package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/hashicorp/raft"
)

// JoinRequest is a join: the node's addresses and the suffrage it wants.
//
// Suffrage is what a node joining for the first time gets: voter (the
// default, "") or nonvoter. A member joining again keeps its suffrage
// (a restart, or a changed address, never changes the quorum) unless
// ChangeSuffrage is set: then a non-voter asking for voter is promoted and a
// voter asking for nonvoter demoted (never the leader itself: transfer
// leadership first).
//
// Fresh says the node has no Raft state of its own: a new node, or one
// whose data directory was lost. Such a node is refused under the ID of a
// voter (ErrFreshVoter): a voter that lost its log and its vote would grant
// its vote to any candidate, a lagging one included, which could then win
// without entries the cluster had committed. Check asks only whether the
// cluster would take the join, changing nothing: a node without Raft state
// asks it before it starts Raft, so that it never votes unless taken.
// (A leader of an older release ignores both: it joins the node.)
type JoinRequest struct {
	ID             string `json:"id"`
	Raft           string `json:"raft"`
	HTTP           string `json:"http"`
	Admin          string `json:"admin"`
	Suffrage       string `json:"suffrage,omitempty"`
	ChangeSuffrage bool   `json:"change_suffrage,omitempty"`
	Fresh          bool   `json:"fresh,omitempty"`
	Check          bool   `json:"check,omitempty"`
}

// ErrFreshVoter: a node without Raft state asked to join under the ID of a
// voter.
var ErrFreshVoter = errors.New("cluster: a voter came back without its Raft state")

// Info is the request's addresses, as the state records them.
func (r JoinRequest) Info() fsm.NodeInfo {
	return fsm.NodeInfo{ID: r.ID, Raft: r.Raft, HTTP: r.HTTP, Admin: r.Admin}
}

// Nonvoter reports whether the request asks for a non-voter.
func (r JoinRequest) Nonvoter() bool { return strings.EqualFold(r.Suffrage, SuffrageNonvoter) }

// check validates the suffrage fields.
func (r JoinRequest) check() error {
	if r.Suffrage != "" && !strings.EqualFold(r.Suffrage, SuffrageVoter) && !strings.EqualFold(r.Suffrage, SuffrageNonvoter) {
		return fmt.Errorf("join: suffrage %q: want %q or %q: %w", r.Suffrage, "voter", "nonvoter", ErrSuffrage)
	}
	if r.ChangeSuffrage && r.Suffrage == "" {
		return fmt.Errorf("join: change_suffrage needs a suffrage: %w", ErrSuffrage)
	}
	return nil
}

// Join adds a voter (see JoinRequest for non-voters and suffrage changes).
// A re-join with the same ID and address is a no-op; a changed address is
// updated; a removed ID is refused.
func (n *Node) Join(ctx context.Context, info fsm.NodeInfo) error {
	return n.JoinAs(ctx, JoinRequest{ID: info.ID, Raft: info.Raft, HTTP: info.HTTP, Admin: info.Admin})
}

// JoinAs adds (or updates) a member with the suffrage req asks for.
func (n *Node) JoinAs(ctx context.Context, req JoinRequest) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	info := req.Info()
	if info.ID == "" || info.Raft == "" {
		return errors.New("join: node ID and raft address are required")
	}
	if err := req.check(); err != nil {
		return err
	}
	if ni, ok := n.FSM.Node(info.ID); ok && ni.Removed {
		return fmt.Errorf("join %s: %w; a replacement joins under a new ID", info.ID, ErrRemoved)
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	var cur *raft.Server
	for _, s := range cf.Configuration().Servers {
		if s.ID == raft.ServerID(info.ID) {
			cur = &s
			break
		}
	}
	if req.Fresh && cur != nil && cur.Suffrage == raft.Voter {
		return fmt.Errorf("join %s: %w (its data directory was lost or wiped): it may not vote again under that ID, or it could elect a node that lacks committed entries; remove it (eddy-ctl remove --addr ADMIN_ADDRS --id %s) and start it with a new --id", info.ID, ErrFreshVoter, info.ID)
	}
	if req.Check {
		return nil
	}
	// The suffrage it ends with: a new member's is the one asked for
	// (voter by default); a member keeps its own unless asked to change.
	nonvoter := req.Nonvoter()
	if cur != nil && !req.ChangeSuffrage {
		nonvoter = cur.Suffrage == raft.Nonvoter
	}
	record := func() error {
		if have, ok := n.FSM.Node(info.ID); !ok || have != info {
			if _, err := n.Propose(ctx, fsm.TypeNodeInfo, 0, info); err != nil {
				return fmt.Errorf("join %s: record addresses: %w", info.ID, err)
			}
		}
		return nil
	}
	if cur == nil {
		// A new member's addresses go in before the configuration names
		// it, so that no node lists it without them (its status, the
		// garbage collector's served generations). A member's changed
		// addresses go in once the change is made, so that a refused one
		// changes nothing.
		if err := record(); err != nil {
			return err
		}
	}
	id, addr := raft.ServerID(info.ID), raft.ServerAddress(info.Raft)
	switch {
	case cur != nil && cur.Address == addr && (cur.Suffrage == raft.Nonvoter) == nonvoter:
		// Already as asked.
	case !nonvoter:
		// New, a changed address, or a promotion.
		if err := n.raft.AddVoter(id, addr, 0, MembershipTimeout).Error(); err != nil {
			return fmt.Errorf("join %s: %w", info.ID, err)
		}
		if cur != nil && cur.Suffrage == raft.Nonvoter {
			n.log.Info("promoted a non-voter to voter", "id", info.ID)
		}
	default:
		if cur != nil && cur.Suffrage != raft.Nonvoter {
			if info.ID == n.cfg.ID {
				return fmt.Errorf("join %s as a non-voter: %w: it is the leader; transfer leadership away first", info.ID, ErrSuffrage)
			}
			if err := n.raft.DemoteVoter(id, 0, MembershipTimeout).Error(); err != nil {
				return fmt.Errorf("join %s: demote: %w", info.ID, err)
			}
			n.log.Info("demoted a voter to non-voter", "id", info.ID)
		}
		// New, or a changed address (AddNonvoter replaces a non-voter).
		if cur == nil || cur.Address != addr {
			if err := n.raft.AddNonvoter(id, addr, 0, MembershipTimeout).Error(); err != nil {
				return fmt.Errorf("join %s: %w", info.ID, err)
			}
		}
	}
	return record()
}
