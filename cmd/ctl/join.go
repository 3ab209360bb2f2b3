package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
)

func init() {
	register("join", command{
		summary: "add a node to the cluster: join --addr ADMIN --id ID --raft H:P --admin H:P --http H:P [--nonvoter|--voter]",
		run:     runJoin,
	})
}

const joinUsage = `Usage: eddy-ctl join --addr ADMIN_ADDRS [--token-file FILE] --id ID --raft HOST:PORT --admin HOST:PORT --http HOST:PORT [--nonvoter | --voter]

Adds node ID as a voter, asking any member (a follower forwards to the
leader). The node must be running with the same ID and addresses. Joining
again with the same addresses changes nothing; with a changed address it
updates it. A removed ID is refused: a replacement joins under a new ID.
While the cluster has no leader (just bootstrapped, or electing), the call
is retried until --timeout.

With --nonvoter the node joins as a non-voter: a query node that applies
the log and serves every endpoint but never votes, never leads (so never
runs the write path) and never counts for quorum. A member joining again
keeps its suffrage: --nonvoter demotes a voter (not the leader: transfer
leadership first), --voter promotes a non-voter; without either flag its
suffrage stays (a re-join to update an address never changes the quorum).
A node started with --join and --nonvoter joins itself as a non-voter.

Flags:
`

func runJoin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, af := adminFlagSet("join", joinUsage, stderr)
	var info fsm.NodeInfo
	fs.StringVar(&info.ID, "id", "", "ID of the joining node (its --id)")
	fs.StringVar(&info.Raft, "raft", "", "its Raft address, host:port, as the other nodes dial it (its --raft-addr)")
	fs.StringVar(&info.Admin, "admin", "", "its admin API address, host:port (its --admin-addr)")
	fs.StringVar(&info.HTTP, "http", "", "its public query address, host:port (its --http-addr)")
	nonvoter := fs.Bool("nonvoter", false, "join as a non-voter (a query node), or demote a voter to one")
	voter := fs.Bool("voter", false, "promote a non-voter to voter (a new node joins as a voter without it too)")
	if err := parseAdminArgs(fs, args); err != nil {
		return err
	}
	if *nonvoter && *voter {
		return fmt.Errorf("%w: --nonvoter and --voter exclude each other", errUsage)
	}
	if info.ID == "" {
		return fmt.Errorf("%w: --id is required", errUsage)
	}
	if !nodeIDPattern.MatchString(info.ID) {
		return fmt.Errorf("%w: --id %q: use letters, digits, '.', '_' and '-'", errUsage, info.ID)
	}
	for _, f := range []struct{ name, v string }{{"raft", info.Raft}, {"admin", info.Admin}, {"http", info.HTTP}} {
		if err := checkHostPort(f.name, f.v); err != nil {
			return err
		}
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	req := cluster.JoinRequest{ID: info.ID, Raft: info.Raft, Admin: info.Admin, HTTP: info.HTTP}
	switch {
	case *nonvoter:
		req.Suffrage, req.ChangeSuffrage = "nonvoter", true
	case *voter:
		req.Suffrage, req.ChangeSuffrage = "voter", true
	}
	var resp map[string]string
	if err := adminCall(ctx, c, http.MethodPost, "/admin/join", req, &resp, true, stderr, "join"); err != nil {
		for _, ce := range callErrors(err) {
			if ce.Status == http.StatusForbidden && ce.Name == "Removed" {
				return fmt.Errorf("%s was removed from the cluster and cannot rejoin: start the replacement with a new --id and an empty data directory, then join that ID", info.ID)
			}
			if ce.Status == http.StatusConflict && ce.Name == "SuffrageRefused" {
				return fmt.Errorf("%s: %s", info.ID, ce.Message)
			}
		}
		return err
	}
	// A leader of a build without non-voters ignores the suffrage asked
	// for and adds a voter: say so rather than report success.
	want := cluster.SuffrageVoter
	if *nonvoter {
		want = cluster.SuffrageNonvoter
	}
	if req.Suffrage != "" && resp["suffrage"] != want {
		return fmt.Errorf("%s joined, but its suffrage is %q, not the %s asked for: the leader's build does not know non-voters (upgrade every node first, then join again with --%s)",
			info.ID, resp["suffrage"], req.Suffrage, req.Suffrage)
	}
	if af.json {
		return printJSON(stdout, resp)
	}
	suffrage := ""
	switch resp["suffrage"] {
	case cluster.SuffrageVoter:
		suffrage = "voter; "
	case cluster.SuffrageNonvoter:
		suffrage = "non-voter; "
	}
	fmt.Fprintf(stdout, "%s is a member (%sraft %s, admin %s, http %s)\n", info.ID, suffrage, info.Raft, info.Admin, info.HTTP)
	return nil
}
