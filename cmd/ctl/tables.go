package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest"
)

func init() {
	register("tables", command{
		summary: "drop damaged tables from the index (a replicated request): tables drop --tree T --tables IDS --yes | --cancel --addr ADMIN",
		run:     runTables,
	})
}

const tablesUsage = `Usage: eddy-ctl tables drop --tree TREE --tables ID[,ID...] --yes --addr ADMIN_ADDRS [--token-file FILE] [--json]
       eddy-ctl tables drop --tree TREE --cancel [--tables ID[,ID...]] --addr ADMIN_ADDRS [--token-file FILE] [--json]

drop asks the leader (through any member) to drop tables from the index:
tables whose objects the bucket lost or damaged, with no copy to restore
them from (docs/operations.md, "A corrupt table"). Until then every query
of a target in such a table fails, and every merge that takes its run.
Each ID names a table of TREE, as the log's "corrupt table" lines do,
or a run (every table of it). Only the links tree's tables can be
dropped: a revocation dropped would bring deleted links back, and the
other trees are what links are read through, which no crawl writes
again (restore their objects instead). The leader's write path rewrites the run without those tables (the
big compaction lane, as a merge of that one run: as long as such a merge
takes) and publishes it; the tables' records are then gone from answers
until a crawl brings them back ("eddy-ctl backfill restart"). The
answer lists the tables and the records they hold; "eddy-ctl status"
prints the tables still to drop (drops_pending in its --json, on every
node) until they are carried out. The request is replicated: if leadership moves, the next leader
carries it out. --yes is required. --cancel withdraws the requests for
the tables or runs named (all of TREE's if none): a drop merge still
running is abandoned; one already handed to the next flush is published.

Flags:
`

func runTables(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && helpAsked(args[0]) {
		fmt.Fprint(stderr, strings.TrimSuffix(tablesUsage, "Flags:\n")+"The subcommand's flags: eddy-ctl tables drop -h\n")
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "drop" {
		fmt.Fprint(stderr, tablesUsage)
		return fmt.Errorf("%w: tables takes the subcommand drop", errUsage)
	}
	fs, af := adminFlagSet("tables drop", tablesUsage, stderr)
	tree := fs.String("tree", "", "the tree the tables belong to (links: the only one whose tables can be dropped)")
	ids := fs.String("tables", "", "the tables (or runs) to drop, comma-separated")
	yes := fs.Bool("yes", false, "drop them: their records are lost from answers until a crawl brings them back")
	withdraw := fs.Bool("cancel", false, "withdraw drop requests instead (those of --tables, or every one of the tree)")
	if err := parseAdminArgs(fs, args[1:]); err != nil {
		return err
	}
	var tables []string
	for _, id := range strings.Split(*ids, ",") {
		if id = strings.TrimSpace(id); id != "" {
			tables = append(tables, id)
		}
	}
	switch {
	case *tree == "":
		return fmt.Errorf("%w: tables drop needs --tree", errUsage)
	case *withdraw && *yes:
		return fmt.Errorf("%w: --cancel and --yes ask opposite things", errUsage)
	case !*withdraw && len(tables) == 0:
		return fmt.Errorf("%w: tables drop needs --tables", errUsage)
	case !*withdraw && !*yes:
		return fmt.Errorf("%w: tables drop loses the tables' records until a crawl brings them back; say --yes", errUsage)
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	var resp struct {
		Tables    []ingest.DroppedTable `json:"tables,omitempty"`
		Cancelled []string              `json:"cancelled,omitempty"`
		Pending   map[string][]string   `json:"pending"`
		Leader    string                `json:"leader"`
	}
	// Withdrawing twice withdraws nothing more; asking twice asks nothing
	// more while the drop is pending, but a table dropped meanwhile is
	// answered 404 NotFound: a request whose answer was lost is not sent
	// again (status says whether it was taken).
	req := cluster.DropTablesRequest{Tree: *tree, Tables: tables, Cancel: *withdraw}
	if err := adminCall(ctx, c, http.MethodPost, "/admin/tables/drop", req, &resp, *withdraw, stderr, "tables drop"); err != nil {
		for _, ce := range callErrors(err) {
			if ce.Status == http.StatusNotFound && ce.Name != "NotFound" {
				return fmt.Errorf("%w (the leader runs a build without tables drop: upgrade it first)", err)
			}
		}
		return err
	}
	if af.json {
		return printJSON(stdout, resp)
	}
	if *withdraw {
		fmt.Fprintf(stdout, "drop requests withdrawn by leader %s: %s\n", resp.Leader, orNone(resp.Cancelled))
		return nil
	}
	var records uint64
	for _, t := range resp.Tables {
		records += t.Records
		fmt.Fprintf(stdout, "%s table %s (run %s): %d records\n", t.Tree, t.Table, t.Run, t.Records)
	}
	fmt.Fprintf(stdout, "drop of %d tables (%d records) asked of leader %s; \"eddy-ctl status\" shows it until it is carried out\n", len(resp.Tables), records, resp.Leader)
	return nil
}

// orNone is ids joined, or "none".
func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}
