package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest"
)

func init() {
	register("status", command{
		summary: "show every node of the cluster: status --addr ADMIN [--json]",
		run:     runStatus,
	})
}

const statusUsage = `Usage: eddy-ctl status --addr ADMIN_ADDRS [--token-file FILE] [--json]

Asks every address at once for the status of every node (GET
/admin/cluster), takes the first answer of a cluster member that shows a
leader (each node waits at most 5 s for another member's status), and
prints one row per node: state,
leader mark, Raft applied index, time since the leader was last heard from,
manifest generation applied and served, ingestion clock and stream cursors,
then the configuration. A node that did not answer shows its error. With
--json, prints the JSON array of node statuses as the node returned it.

Flags:
`

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, af := adminFlagSet("status", statusUsage, stderr)
	if err := parseAdminArgs(fs, args); err != nil {
		return err
	}
	c, ctx, cancel, err := af.connect(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	raw, nodes, err := clusterStatus(ctx, c, stderr)
	if err != nil {
		return err
	}
	if af.json {
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	printStatus(stdout, nodes)
	return nil
}

// statusGrace is how long status waits for an answer showing a leader
// once a member answered without one: the answering node's own wait for a
// member that does not answer, and a second.
const statusGrace = cluster.PeerStatusTimeout + time.Second

// clusterStatus asks every address at once for GET /admin/cluster and
// returns, raw and decoded, the first answer to arrive of a cluster member
// that shows a leader, or else, once every address has answered or failed,
// the answer of the first member in the addresses' order (a removed or
// cut-off node still answers, from a stale configuration). Before, the
// addresses were asked in turn, and a hung one held the command for its
// whole call timeout before the next was tried.
func clusterStatus(ctx context.Context, c *cluster.AdminClient, stderr io.Writer) (json.RawMessage, []cluster.NodeStatus, error) {
	type answer struct {
		raw    json.RawMessage
		nodes  []cluster.NodeStatus
		err    error
		leader bool
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type arrival struct {
		i int
		a *answer
	}
	arrived := make(chan arrival, len(c.Addrs))
	for i, addr := range c.Addrs {
		go func() {
			a := &answer{}
			defer func() { arrived <- arrival{i, a} }()
			one := *c
			one.Addrs = []string{addr}
			if a.err = one.Call(callCtx, http.MethodGet, "/admin/cluster", nil, &a.raw); a.err != nil {
				return
			}
			if err := json.Unmarshal(a.raw, &a.nodes); err != nil {
				a.err = fmt.Errorf("%s: bad answer: %v", addr, err)
				return
			}
			if len(a.nodes) == 0 {
				a.err = fmt.Errorf("%s: this node is not a member of a cluster yet", addr)
				return
			}
			a.leader = slices.ContainsFunc(a.nodes, func(n cluster.NodeStatus) bool { return n.Error == "" && n.State == "Leader" })
		}()
	}
	var chosen *answer
	answers := make([]*answer, len(c.Addrs)) // those that arrived
	var grace <-chan time.Time               // once a member answered with no leader
wait:
	for range c.Addrs {
		select {
		case got := <-arrived:
			answers[got.i] = got.a
			if got.a.leader {
				chosen = got.a
				break wait
			}
			if got.a.err == nil && grace == nil {
				grace = time.After(statusGrace)
			}
		case <-grace: // no leader: a hung address is not waited for past a member's own wait for it
			break wait
		}
	}
	cancel() // the others are not waited for
	var errs []string
	var unauthorized error
	leaderShown := chosen != nil
	for i, a := range answers {
		switch {
		case a == nil && !leaderShown:
			errs = append(errs, fmt.Sprintf("%s: no answer within %v of a member's", c.Addrs[i], statusGrace))
		case a == nil || a == chosen:
		case a.err != nil:
			err := describeCallErr(ctx, a.err)
			if unauthorized == nil && len(callErrorsWith(err, http.StatusUnauthorized)) > 0 {
				unauthorized = err
			}
			errs = append(errs, err.Error())
		default:
			if chosen == nil {
				chosen = a
			}
			errs = append(errs, fmt.Sprintf("%s: answered, but shows no leader", c.Addrs[i]))
		}
	}
	if chosen == nil {
		if unauthorized != nil {
			return nil, nil, unauthorized
		}
		return nil, nil, fmt.Errorf("no member of the cluster answered: %s", strings.Join(errs, "; "))
	}
	for _, e := range errs {
		fmt.Fprintf(stderr, "eddy-ctl status: %s\n", e)
	}
	return chosen.raw, chosen.nodes, nil
}

func printStatus(w io.Writer, nodes []cluster.NodeStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tLEADER\tAPPLIED\tLAST CONTACT\tGENERATION\tVIEW GEN\tCLOCK\tCURSORS")
	leaders := 0
	var failed []cluster.NodeStatus
	var config *cluster.NodeStatus
	for i, n := range nodes {
		if n.Error != "" {
			failed = append(failed, n)
			fmt.Fprintf(tw, "%s\tno answer\t\t-\t-\t-\t-\t-\t-\n", n.ID)
			continue
		}
		mark := ""
		if n.State == "Leader" {
			mark = "*"
			leaders++
			config = &nodes[i]
		} else if config == nil {
			config = &nodes[i]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", n.ID, n.State, mark, n.AppliedIndex,
			lastContact(n.LastContactMs), n.Generation, n.ViewGeneration, n.Clock, cursors(n.Cursors))
	}
	tw.Flush()
	for _, n := range failed {
		fmt.Fprintf(w, "%s: %s\n", n.ID, n.Error)
	}
	if lead := leaderNode(nodes); lead != nil {
		if srcs := sourcesOf(lead); len(srcs) > 0 {
			fmt.Fprintf(w, "\nSources, as leader %s sees them:\n", lead.ID)
			printSources(w, srcs)
		}
		printRequests(w, lead)
	}
	named := namedLeader(nodes)
	switch {
	case leaders == 0 && named != "":
		fmt.Fprintf(w, "the leader, %s as the nodes that answered name it, did not answer this status itself\n", named)
	case leaders == 0:
		fmt.Fprintln(w, "no node is leader: the cluster cannot change until one is elected (a majority of voters must be up)")
	case leaders > 1:
		fmt.Fprintf(w, "%d nodes claim to lead (a stale leader has not noticed the new term yet)\n", leaders)
	}
	if config == nil || len(config.Servers) == 0 {
		return
	}
	fmt.Fprintf(w, "\nConfiguration, as %s sees it:\n", config.ID)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSUFFRAGE\tRAFT\tADMIN\tHTTP")
	for _, s := range config.Servers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.Suffrage, s.Raft, dash(s.Admin), dash(s.HTTP))
	}
	tw.Flush()
}

// namedLeader returns the leader the answering followers name when they
// all name the same one (a leader whose own answer is missing: its admin
// port unreachable or hung, or a token it refuses), else "".
func namedLeader(nodes []cluster.NodeStatus) string {
	named := ""
	for _, n := range nodes {
		switch {
		case n.Error != "" || n.State == "Leader":
		case n.Leader == "" || named != "" && n.Leader != named:
			return ""
		default:
			named = n.Leader
		}
	}
	return named
}

func lastContact(ms int64) string {
	if ms < 0 {
		return "-"
	}
	d := time.Duration(ms) * time.Millisecond
	if d < time.Second {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return d.Round(100 * time.Millisecond).String()
}

// cursors renders the stream cursors; repositories waiting for a resync
// (one marker each) are counted, not listed.
func cursors(m map[string]string) string {
	keys := make([]string, 0, len(m))
	resyncs := 0
	for k := range m {
		if strings.HasPrefix(k, ingest.ResyncPrefix) {
			resyncs++
			continue
		}
		if ingest.RequestMark(k) {
			continue // a request's carrying out, kept for a look or two
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	if resyncs > 0 {
		parts = append(parts, fmt.Sprintf("resyncs-pending=%d", resyncs))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// leaderNode returns the node that answered as leader, if any.
func leaderNode(nodes []cluster.NodeStatus) *cluster.NodeStatus {
	for i := range nodes {
		if nodes[i].Error == "" && nodes[i].State == "Leader" {
			return &nodes[i]
		}
	}
	return nil
}

// sourcesOf decodes a node's per-source status (its "source_status"
// extra field; nodes older than it have none).
func sourcesOf(n *cluster.NodeStatus) []ingest.SourceStatus {
	raw, ok := n.Extra["source_status"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var out []ingest.SourceStatus
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

func printSources(w io.Writer, srcs []ingest.SourceStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tKIND\tCURSOR\tLAG\tDONE")
	for _, s := range srcs {
		lag := "-"
		if s.LagSeconds != nil {
			lag = (time.Duration(*s.LagSeconds * float64(time.Second))).Round(100 * time.Millisecond).String()
		}
		done := ""
		if s.Done {
			done = "done"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, dash(s.Cursor), lag, done)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printRequests prints the operator's requests the leader has not carried
// out yet: a full compaction's trees, the tables to drop.
func printRequests(w io.Writer, lead *cluster.NodeStatus) {
	if p, ok := lead.Extra["full_compaction_pending"].([]any); ok && len(p) > 0 {
		fmt.Fprintf(w, "\nFull compaction pending: %s\n", joinAny(p))
	}
	if p, ok := lead.Extra["drops_pending"].(map[string]any); ok && len(p) > 0 {
		trees := make([]string, 0, len(p))
		for t := range p {
			trees = append(trees, t)
		}
		sort.Strings(trees)
		for _, t := range trees {
			ids, _ := p[t].([]any)
			fmt.Fprintf(w, "\nTables of %s to drop (eddy-ctl tables drop): %s\n", t, joinAny(ids))
		}
	}
}

// joinAny joins JSON values with commas.
func joinAny(vs []any) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
