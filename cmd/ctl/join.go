package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/eddy-backlinks/eddy/fsm"
)

func init() {
	register("join", command{
		summary: "add a node to the cluster: join --addr ADMIN --id ID --raft H:P --admin H:P --http H:P",
		run:     runJoin,
	})
}

const joinUsage = `Usage: eddy-ctl join --addr ADMIN_ADDRS [--token-file FILE] --id ID --raft HOST:PORT --admin HOST:PORT --http HOST:PORT

Adds node ID as a voter, asking any member (a follower forwards to the
leader). The node must be running with the same ID and addresses. Joining
again with the same addresses changes nothing; with a changed address it
updates it. A removed ID is refused: a replacement joins under a new ID.
While the cluster has no leader (just bootstrapped, or electing), the call
is retried until --timeout.

Flags:
`

func runJoin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, af := adminFlagSet("join", joinUsage, stderr)
	var info fsm.NodeInfo
	fs.StringVar(&info.ID, "id", "", "ID of the joining node (its --id)")
	fs.StringVar(&info.Raft, "raft", "", "its Raft address, host:port, as the other nodes dial it (its --raft-addr)")
	fs.StringVar(&info.Admin, "admin", "", "its admin API address, host:port (its --admin-addr)")
	fs.StringVar(&info.HTTP, "http", "", "its public query address, host:port (its --http-addr)")
	if err := parseAdminArgs(fs, args); err != nil {
		return err
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
	var resp map[string]string
	if err := adminCall(ctx, c, http.MethodPost, "/admin/join", info, &resp, true, stderr, "join"); err != nil {
		for _, ce := range callErrors(err) {
			if ce.Status == http.StatusForbidden && ce.Name == "Removed" {
				return fmt.Errorf("%s was removed from the cluster and cannot rejoin: start the replacement with a new --id and an empty data directory, then join that ID", info.ID)
			}
		}
		return err
	}
	if af.json {
		return printJSON(stdout, resp)
	}
	fmt.Fprintf(stdout, "%s is a member (raft %s, admin %s, http %s)\n", info.ID, info.Raft, info.Admin, info.HTTP)
	return nil
}
