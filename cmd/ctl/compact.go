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
	register("compact", command{
		summary: "merge each tree's runs into one (a replicated request): compact --full|--cancel --addr ADMIN",
		run:     runCompact,
	})
}

const compactUsage = `Usage: eddy-ctl compact --full|--cancel --addr ADMIN_ADDRS [--token-file FILE]

Asks the leader (through any member) for a full compaction: each tree's
runs merged into one, one tree at a time, by the leader's write path in
the background (its compactions are paced; queries keep being served
from the manifest as it is until each merge is published). What an
index is given after a backfill: a query then reads one run, and a run
stores one account dictionary for all its tables (docs/scale.md). Runs
flushed while a merge runs stay for the ordinary compactions. The answer
names the trees still to merge; "eddy-ctl status" shows them
(full_compaction_pending) on every node until they are done. The request
is replicated: if leadership moves, the next leader carries it out.
--cancel withdraws it (a merge already running is still published).
Asking again while a merge runs asks for the runs flushed since too.

Flags:
`

func runCompact(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, af := adminFlagSet("compact", compactUsage, stderr)
	full := fs.Bool("full", false, "merge every run of each tree into one (the only kind of compaction asked for)")
	withdraw := fs.Bool("cancel", false, "withdraw a requested full compaction (a merge already running is published; no other starts)")
	if err := parseAdminArgs(fs, args); err != nil {
		return err
	}
	if *full == *withdraw {
		return fmt.Errorf("%w: compact needs --full or --cancel", errUsage)
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	var resp struct {
		Full      bool     `json:"full"`
		Cancelled bool     `json:"cancelled,omitempty"`
		Pending   []string `json:"pending"`
		Leader    string   `json:"leader"`
	}
	// Idempotent: asking twice asks for the same merges (of the runs the
	// trees have then); cancelling twice withdraws nothing more.
	if err := adminCall(ctx, c, http.MethodPost, "/admin/compact", cluster.CompactRequest{Full: *full, Cancel: *withdraw}, &resp, true, stderr, "compact"); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, resp)
	}
	if resp.Cancelled {
		fmt.Fprintf(stdout, "full compaction withdrawn by leader %s\n", resp.Leader)
		return nil
	}
	fmt.Fprintf(stdout, "full compaction asked of leader %s: trees to merge: %s\n", resp.Leader, strings.Join(resp.Pending, ", "))
	return nil
}
