package query

import (
	"bytes"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/version"
)

// The index page (GET /): what this service is and holds, as JSON in the
// shape of Constellation's, or as an HTML page for a browser (Accept:
// text/html preferred over application/json).

type helloStats struct {
	// DIDs is the accounts the index interned (outlined). A did:plc that
	// the PLC map stores inline is not counted: with the PLC map on, most
	// accounts are not.
	DIDs int `json:"dids"`
	// Targetables (Constellation: distinct targets with their collection
	// and path) is not tracked by Eddy: null.
	Targetables *int `json:"targetables"`
	// LinkingRecords is the link records stored (links tree), an upper
	// bound of live links: revoked links stay until compaction, and a
	// record with several links stores forward entries too.
	LinkingRecords uint64 `json:"linking_records"`
	// StartedAt (Constellation: when indexing began, µs) is not kept: null.
	StartedAt *uint64          `json:"started_at"`
	OtherData map[string]int64 `json:"other_data"`
}

type helloOut struct {
	Help        string     `json:"help"`
	DaysIndexed *uint64    `json:"days_indexed"`
	Stats       helloStats `json:"stats"`
}

type outlineCounter interface {
	OutlineLen(kind link.OutlineKind) int
}

func (s *Server) helloData(v *lsm.View) helloOut {
	m := v.Manifest
	out := helloOut{
		Help:  "open this URL in a web browser (or request with Accept: text/html) for information about this API.",
		Stats: helloStats{OtherData: map[string]int64{"generation": int64(v.Generation())}},
	}
	var tables int64
	for _, t := range m.Tables(lsm.TreeLinks) {
		out.Stats.LinkingRecords += t.Records
		tables++
	}
	out.Stats.OtherData["link_tables"] = tables
	var names int64
	for _, t := range m.Tables(lsm.TreeNames) {
		names += int64(t.Records)
	}
	out.Stats.OtherData["name_records"] = names // named record keys (a chunk of 38 bytes a record), repeats not yet merged included
	if oc, ok := s.Codec.Outlines.(outlineCounter); ok {
		out.Stats.DIDs = oc.OutlineLen(link.OutlineDID)
		out.Stats.OtherData["collections"] = int64(oc.OutlineLen(link.OutlineCollection))
		out.Stats.OtherData["paths"] = int64(oc.OutlineLen(link.OutlinePath))
		out.Stats.OtherData["outlined_rkeys"] = int64(oc.OutlineLen(link.OutlineRKey))
	}
	return out
}

// hello: GET / — JSON, or HTML when the client prefers it.
func (s *Server) hello(w http.ResponseWriter, r *http.Request) {
	v := s.Views.Current()
	w.Header().Set(GenerationHeader, strconv.FormatUint(v.Generation(), 10))
	w.Header().Add("Vary", "Accept")
	out := s.helloData(v)
	if !prefersHTML(r.Header.Get("Accept")) {
		writeJSON(w, out)
		return
	}
	var buf bytes.Buffer
	err := helloPage.Execute(&buf, map[string]any{
		"Stats": out.Stats, "Generation": v.Generation(), "Version": version.Version, "Endpoints": pageEndpoints,
	})
	if err != nil {
		s.Log.Error("render the index page", "error", err)
		writeErr(w, &apiError{http.StatusInternalServerError, "InternalServerError", "the page failed on this node"})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// prefersHTML reports whether an Accept header ranks text/html above
// application/json (each by its most specific matching range); a tie,
// */* or no header is JSON.
func prefersHTML(accept string) bool {
	qOf := func(typ string) float64 {
		best, spec := 0.0, -1
		main, _, _ := strings.Cut(typ, "/")
		for _, part := range strings.Split(accept, ",") {
			fields := strings.Split(part, ";")
			rng := strings.ToLower(strings.TrimSpace(fields[0]))
			q := 1.0
			for _, p := range fields[1:] {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "q") {
					if f, err := strconv.ParseFloat(val, 64); err == nil {
						q = f
					}
				}
			}
			n := -1
			switch rng {
			case typ:
				n = 2
			case main + "/*":
				n = 1
			case "*/*":
				n = 0
			}
			if n > spec {
				best, spec = q, n
			}
		}
		return best
	}
	return qOf("text/html") > qOf("application/json")
}

type pageEndpoint struct {
	Path, About, Params, Example string
}

var pageEndpoints = []pageEndpoint{
	{"/xrpc/blue.microcosm.links.getBacklinks", "The records linking to a subject from a source, newest first.",
		"subject, source (both required, both repeatable), did (repeatable), limit (1-1000, default 100), cursor, reverse",
		"/xrpc/blue.microcosm.links.getBacklinks?subject=did:plc:mlbpil2fwz43vfn6uuysxtqa&source=app.bsky.graph.follow:subject"},
	{"/xrpc/blue.microcosm.links.getBacklinksCount", "How many live links go to a subject from a source.",
		"subject, source (required, repeatable), did (repeatable)", ""},
	{"/xrpc/blue.microcosm.links.getBacklinkDids", "The distinct accounts linking to a subject from a source.",
		"subject, source (required, repeatable), limit, cursor", ""},
	{"/xrpc/blue.microcosm.links.getManyToManyCounts", "Records linking to a subject from a source, grouped by what they link to at another path.",
		"subject, source, pathToOther (required), did, otherSubject (repeatable), limit, cursor", ""},
	{"/xrpc/blue.microcosm.links.getManyToMany", "Each such record with the other subject it links to.",
		"subject, source, pathToOther (required), linkDid, otherSubject (repeatable), limit, cursor", ""},
	{"/xrpc/blue.cerulea.backlinks.listBacklinks", "Every live link to a target, grouped by path.",
		"target (required), limit, cursor", ""},
	{"/links", "Constellation's older getBacklinks.", "target, collection, path (required), did, limit, cursor, reverse", ""},
	{"/links/count", "Constellation's older getBacklinksCount.", "target, collection, path (required)", ""},
	{"/links/count/distinct-dids", "How many distinct accounts link.", "target, collection, path (required)", ""},
	{"/links/distinct-dids", "Constellation's older getBacklinkDids.", "target, collection, path (required), limit, cursor", ""},
	{"/links/all", "Per collection and path, the live links to a target and their distinct accounts.", "target (required)", ""},
	{"/links/all/count", "Per collection and path, the live links to a target.", "target (required)", ""},
}

var helloPage = template.Must(template.New("hello").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Eddy: who links here?</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; }
code { background: #f3f3f3; padding: 0 .2em; }
dt { margin-top: 1em; font-weight: bold; }
</style>
</head>
<body>
<h1>Eddy</h1>
<p>A backlink index of the AT Protocol network: every like, repost, reply, quote, follow, block and mention is a
link from a record to a record, an account or a URL, and Eddy answers the reverse question, <em>who links here?</em>
Its API is Constellation's, so Constellation's clients work by changing the host.</p>
<p id="stats">This node serves generation <strong>{{.Generation}}</strong>: <strong id="records">{{.Stats.LinkingRecords}}</strong>
stored link records from <strong id="dids">{{.Stats.DIDs}}</strong> interned accounts.</p>
<h2>Endpoints</h2>
<dl>
{{range .Endpoints}}<dt><code>GET {{.Path}}</code></dt>
<dd>{{.About}} Parameters: {{.Params}}.{{if .Example}} <a href="{{.Example}}">Example</a>.{{end}}</dd>
{{end}}</dl>
<h2>Definitions</h2>
<p><strong>subject</strong> (or <strong>target</strong>): an at-uri, a DID, an http(s) URL or a URI of another scheme.
<strong>source</strong>: <code>collection:path</code>, the collection of the linking records and the path of the link
inside them, e.g. <code>app.bsky.feed.like:subject.uri</code>.
<strong>cursor</strong>: opaque; <code>null</code> when there is no further page.
Answers are newest first (by the linking record's key); <code>reverse=true</code> gives oldest first.</p>
<p>To get this page as JSON, ask with <code>Accept: application/json</code>. Eddy {{.Version}}.</p>
</body>
</html>
`))
