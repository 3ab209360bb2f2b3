package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/eddy-backlinks/eddy/cluster"
)

func init() {
	register("remove", command{
		summary: "take a node out of the cluster for good: remove --addr ADMIN --id ID",
		run:     runRemove,
	})
}

const removeUsage = `Usage: eddy-ctl remove --addr ADMIN_ADDRS [--token-file FILE] --id ID [--force]

Removes node ID from the cluster, asking any member (a follower forwards to
the leader). The ID is recorded as removed: that node's connections and
re-joins are refused from then on, and a replacement joins under a new ID.
If ID is the leader, leadership is handed to another voter first.

An ID that is not in the cluster's configuration is refused (a typo would
otherwise burn an ID); --force records it as removed anyway, as after a
peers.json recovery, for the IDs of the lost nodes.

Flags:
`

func runRemove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, af := adminFlagSet("remove", removeUsage, stderr)
	id := fs.String("id", "", "ID of the node to remove")
	force := fs.Bool("force", false, "record ID as removed even if it is not in the configuration")
	if err := parseAdminArgs(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return fmt.Errorf("%w: --id is required", errUsage)
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	st, err := memberStatus(ctx, c)
	if err != nil {
		return err
	}
	member := false
	var ids []string
	for _, s := range st.Servers {
		ids = append(ids, s.ID)
		if s.ID == *id {
			member = true
		}
	}
	if !member && !*force {
		return fmt.Errorf("%s is not in the cluster's configuration (servers: %s), so there is nothing to remove; to record the ID of a node lost before a peers.json recovery as removed, add --force",
			*id, strings.Join(ids, ", "))
	}
	if member && len(st.Servers) == 1 {
		return fmt.Errorf("%s is the only server: a cluster cannot remove its last member", *id)
	}
	if st.Leader == *id {
		fmt.Fprintf(stderr, "eddy-ctl remove: %s is the leader: transferring leadership first\n", *id)
		var resp map[string]string
		if err := adminCall(ctx, c, http.MethodPost, "/admin/transfer-leadership", struct{}{}, &resp, false, stderr, "remove"); err != nil {
			return fmt.Errorf("transfer leadership away from %s: %w", *id, err)
		}
	}
	var resp map[string]string
	if err := adminCall(ctx, c, http.MethodPost, "/admin/remove", map[string]string{"id": *id}, &resp, true, stderr, "remove"); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, resp)
	}
	fmt.Fprintf(stdout, "removed %s: it cannot rejoin; a replacement joins under a new ID\n", *id)
	return nil
}

// memberStatus returns the status of the first node that answers, is a
// member of a cluster (a node waiting to be joined knows no servers) and
// knows a leader; failing that, of the first member that answered.
func memberStatus(ctx context.Context, c *cluster.AdminClient) (cluster.NodeStatus, error) {
	var (
		errs     []string
		fallback *cluster.NodeStatus
	)
	for _, addr := range c.Addrs {
		one := *c
		one.Addrs = []string{addr}
		st, err := nodeStatus(ctx, &one)
		switch {
		case err != nil:
			if len(callErrorsWith(err, http.StatusUnauthorized)) > 0 {
				return st, err
			}
			errs = append(errs, err.Error())
		case len(st.Servers) == 0:
			errs = append(errs, fmt.Sprintf("%s: node %s is not a member of a cluster yet", addr, st.ID))
		case st.Leader == "":
			if fallback == nil {
				fallback = &st
			}
		default:
			return st, nil
		}
	}
	if fallback != nil {
		return *fallback, nil
	}
	return cluster.NodeStatus{}, fmt.Errorf("no member of the cluster answered: %s", strings.Join(errs, "; "))
}

// callErrorsWith returns the admin API errors in err with the given status.
func callErrorsWith(err error, status int) []*cluster.CallError {
	var out []*cluster.CallError
	for _, ce := range callErrors(err) {
		if ce.Status == status {
			out = append(out, ce)
		}
	}
	return out
}
