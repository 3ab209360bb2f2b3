package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/eddy-backlinks/eddy/query/client"
)

func init() {
	register("query", command{
		summary: "list the links to a target (at-uri, DID or URL), trying each node in turn",
		run:     runQuery,
	})
}

func runQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", os.Getenv("EDDY_ADDR"), "node URLs, comma-separated, or one URL whose host name resolves to several addresses [$EDDY_ADDR]")
	asJSON := fs.Bool("json", false, "print the answer as JSON, with the node that answered")
	limit := fs.Int("limit", 100, "links per page")
	all := fs.Bool("all", false, "follow cursors to the last page")
	cursor := fs.String("cursor", "", "start after this cursor")
	dns := fs.String("dns", os.Getenv("EDDY_DNS"), "resolve node host names with the DNS server at ip:port instead of the system's [$EDDY_DNS]")
	// Accept flags after the target too.
	var target string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		target, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if target == "" && fs.NArg() == 1 {
		target = fs.Arg(0)
	}
	if target == "" || *addr == "" {
		fs.Usage()
		return fmt.Errorf("query TARGET --addr URLS: %w", errUsage)
	}
	c := client.New(*addr)
	if *dns != "" {
		r, err := client.DNSResolver(*dns)
		if err != nil {
			return fmt.Errorf("--dns: %w", err)
		}
		c.Resolver = r
	}
	type page struct {
		Node       string              `json:"node"`
		Generation uint64              `json:"generation"`
		Attempts   int                 `json:"attempts"`
		Stale      string              `json:"stale,omitempty"`
		Backlinks  map[string][]string `json:"backlinks"`
		Cursor     *string             `json:"cursor"`
	}
	cur := *cursor
	for {
		out, ans, err := c.ListBacklinks(ctx, target, cur, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			b, _ := json.Marshal(page{Node: ans.Node, Generation: ans.Generation, Attempts: ans.Attempts, Stale: ans.Stale, Backlinks: out.Backlinks, Cursor: out.Cursor})
			fmt.Fprintln(stdout, string(b))
		} else {
			fmt.Fprintf(stdout, "# answered by %s at generation %d\n", ans.Node, ans.Generation)
			if ans.Stale != "" {
				fmt.Fprintf(stdout, "# stale: %s (no node answered without saying so)\n", ans.Stale)
			}
			paths := make([]string, 0, len(out.Backlinks))
			for p := range out.Backlinks {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			for _, p := range paths {
				for _, s := range out.Backlinks[p] {
					fmt.Fprintf(stdout, "%s\t%s\n", p, s)
				}
			}
			if out.Cursor != nil && !*all {
				fmt.Fprintf(stdout, "# more: --cursor %s\n", *out.Cursor)
			}
		}
		if !*all || out.Cursor == nil {
			return nil
		}
		cur = *out.Cursor
	}
}
