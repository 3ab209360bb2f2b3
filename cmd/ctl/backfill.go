package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/eddy-backlinks/eddy/ingest"
)

func init() {
	register("backfill", command{
		summary: "show the full-network backfill's progress, or crawl again: backfill status|restart --addr ADMIN [--json]",
		run:     runBackfill,
	})
}

const backfillUsage = `Usage: eddy-ctl backfill status --addr ADMIN_ADDRS [--token-file FILE] [--json]
       eddy-ctl backfill restart --yes --addr ADMIN_ADDRS [--token-file FILE] [--json]

Shows each backfill source of the cluster as its leader sees it: the
committed listRepos cursor (a new leader resumes from it; "eof:..." once
every page is written), whether it is done, the repositories listed,
written, gone (deleted, taken down, deactivated), failed (every try
failed: listed with their errors, retried after the listing and by each
new leader) and in flight, from the checkpoint the leaders publish; and
how many repositories wait for a resync (account reactivations, sync
events).

restart asks each backfill source of the leader (but resync_only ones)
to crawl every repository again, from the first page with a new
checkpoint: each repository is written again whole, its earlier links
revoked, so the index comes to hold the network as it is now, every link
once (what brings back links an older release did not extract, or a
lost table held: docs/operations.md, "Crawling again"). It costs what
the first crawl cost, and the bucket holds the revoked links until the
full compaction the crawl's end asks for. A pass running when it is
asked stops, and the crawl starts again at once. The request is replicated: if leadership moves, the
next leader carries it out. --yes is required.

Flags:
`

// backfillReport is what backfill status prints as JSON.
type backfillReport struct {
	Leader         string                `json:"leader"`
	Sources        []ingest.SourceStatus `json:"sources"`
	ResyncsPending int                   `json:"resyncs_pending"`
}

func runBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "restart" {
		return runBackfillRestart(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && helpAsked(args[0]) {
		fmt.Fprint(stderr, strings.TrimSuffix(backfillUsage, "Flags:\n")+"Each subcommand's flags: eddy-ctl backfill status -h, eddy-ctl backfill restart -h\n")
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprint(stderr, backfillUsage)
		return fmt.Errorf("%w: backfill takes the subcommand status or restart", errUsage)
	}
	fs, af := adminFlagSet("backfill status", backfillUsage, stderr)
	if err := parseAdminArgs(fs, args[1:]); err != nil {
		return err
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	_, nodes, err := clusterStatus(ctx, c, stderr)
	if err != nil {
		return err
	}
	lead := leaderNode(nodes)
	if lead == nil {
		return fmt.Errorf("no leader answered: the backfill runs on the leader; try again once one is elected")
	}
	rep := backfillReport{Leader: lead.ID, Sources: []ingest.SourceStatus{}}
	for _, s := range sourcesOf(lead) {
		if s.Kind == "backfill" {
			rep.Sources = append(rep.Sources, s)
		}
	}
	for k := range lead.Cursors {
		if strings.HasPrefix(k, ingest.ResyncPrefix) {
			rep.ResyncsPending++
		}
	}
	if af.json {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	if len(rep.Sources) == 0 {
		fmt.Fprintf(stdout, "leader %s runs no backfill source\n", lead.ID)
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tCURSOR\tDONE\tLISTED\tWRITTEN\tGONE\tINACTIVE\tFAILED\tIN FLIGHT")
		for _, s := range rep.Sources {
			done := "no"
			if s.Done {
				done = "yes"
			}
			b := s.Backfill
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Name, dash(s.Cursor), done, b["listed"], b["done"], b["gone"], b["inactive"], b["failed"], b["pending"])
		}
		tw.Flush()
		for _, s := range rep.Sources {
			if len(s.Failed) == 0 {
				continue
			}
			fmt.Fprintf(stdout, "\nFailed repositories of %s (retried by each new leader and after the listing):\n", s.Name)
			tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "DID\tATTEMPTS\tAT\tERROR")
			for _, r := range s.Failed {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.DID, r.Attempts, r.At, r.Error)
			}
			tw.Flush()
		}
	}
	fmt.Fprintf(stdout, "repositories waiting for a resync: %d\n", rep.ResyncsPending)
	return nil
}

// runBackfillRestart asks the leader's backfill sources to crawl again.
func runBackfillRestart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, af := adminFlagSet("backfill restart", backfillUsage, stderr)
	yes := fs.Bool("yes", false, "crawl every repository again (as long as the first crawl took)")
	if err := parseAdminArgs(fs, args); err != nil {
		return err
	}
	if !*yes {
		return fmt.Errorf("%w: backfill restart fetches every repository of the network again; say --yes", errUsage)
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	var resp struct {
		Sources []string `json:"sources"`
		Request string   `json:"request"`
		Leader  string   `json:"leader"`
	}
	// Asking twice before the crawl starts asks once; asked once it has
	// started, the crawl starts again when its pass ends.
	if err := adminCall(ctx, c, http.MethodPost, "/admin/backfill/restart", struct{}{}, &resp, false, stderr, "backfill restart"); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, resp)
	}
	fmt.Fprintf(stdout, "crawl again asked of leader %s: %s (\"eddy-ctl backfill status\" shows its progress)\n", resp.Leader, strings.Join(resp.Sources, ", "))
	return nil
}
