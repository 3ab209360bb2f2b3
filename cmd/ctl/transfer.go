package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

func init() {
	register("transfer-leadership", command{
		summary: "hand leadership to another voter: transfer-leadership --addr ADMIN",
		run:     runTransfer,
	})
}

const transferUsage = `Usage: eddy-ctl transfer-leadership --addr ADMIN_ADDRS [--token-file FILE]

Asks the leader (through any member) to hand leadership to another
up-to-date voter, and waits until one has taken over. Use it before
maintenance on the leader's machine.

Flags:
`

func runTransfer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, af := adminFlagSet("transfer-leadership", transferUsage, stderr)
	if err := parseAdminArgs(fs, args); err != nil {
		return err
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	before := ""
	if st, err := memberStatus(ctx, c); err == nil {
		before = st.Leader
	}
	var resp struct {
		Leader string `json:"leader"`
	}
	// Not idempotent: only a call that surely reached no leader (503) is retried.
	if err := adminCall(ctx, c, http.MethodPost, "/admin/transfer-leadership", struct{}{}, &resp, false, stderr, "transfer-leadership"); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, resp)
	}
	if before != "" && before != resp.Leader {
		fmt.Fprintf(stdout, "leader: %s (was %s)\n", resp.Leader, before)
	} else {
		fmt.Fprintf(stdout, "leader: %s\n", resp.Leader)
	}
	return nil
}
