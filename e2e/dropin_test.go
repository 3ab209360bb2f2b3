package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/eddy-backlinks/eddy/extract/extracttest"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// Eddy as a drop-in for Constellation, seen by a real atproto client: a
// three-node cluster replays the real capture plus Leaflet documents whose
// lists nest eight deep (paths of 600+ bytes), an update and a delete of
// them, and list items that make many-to-many answers meaningful; then
//
//   - every node answers every link of every live document, by
//     listBacklinks and by getBacklinks with its long source, and none of
//     the deleted or updated-away ones;
//   - e2e/jsclient/drive.mjs drives every XRPC endpoint of every node
//     through @atcute/client and validates every answer against
//     lexicons/ with @atproto/lexicon (and proves that validation bites),
//     and what it collected is what the index holds;
//   - an unknown XRPC method is 501 MethodNotImplemented, a known one asked
//     with POST is 405, every /xrpc/ answer is JSON.
//
// Node.js and e2e/jsclient/node_modules come from `make testdeps`; without
// them the tests that need them skip, or fail when CI or
// EDDY_REQUIRE_MINIO=1 says the test services must be there.

const jsDriver = "jsclient/drive.mjs"

// nodeJS returns the node binary, skipping or failing the test without it
// or without the driver's packages.
func nodeJS(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat("jsclient/node_modules/@atcute/client/package.json")
		if err == nil {
			_, err = os.Stat("jsclient/node_modules/@atproto/lexicon/package.json")
		}
	}
	if err != nil {
		msg := fmt.Sprintf("Node.js and e2e/jsclient's packages are needed (%v); run `make testdeps`", err)
		if os.Getenv("CI") != "" || os.Getenv(miniotest.EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// Every lexicon loads in @atproto/lexicon, and answers shaped as the
// contract says pass while the same answers with a field renamed do not
// (no cluster needed).
func TestLexiconsLoad(t *testing.T) {
	node := nodeJS(t)
	cmd := exec.Command(node, jsDriver, "--check-lexicons")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var sum jsSummary
	if jerr := json.Unmarshal(out.Bytes(), &sum); jerr != nil {
		t.Fatalf("drive.mjs --check-lexicons: %v, %v\n%s%s", err, jerr, out.String(), errb.String())
	}
	if err != nil || !sum.OK {
		t.Fatalf("drive.mjs --check-lexicons: %v: %s\n%s", err, strings.Join(sum.Failures, "\n"), errb.String())
	}
	lex, _ := filepath.Glob("../lexicons/*.json")
	if len(sum.Lexicons) != len(lex) || len(sum.Lexicons) != 6 {
		t.Fatalf("loaded %v, files %v", sum.Lexicons, lex)
	}
	t.Logf("%d lexicons load; %d mutated answers refused", len(sum.Lexicons), sum.Validations.MutationsRejected)
}

// jsSummary is what drive.mjs prints.
type jsSummary struct {
	OK          bool           `json:"ok"`
	Lexicons    []string       `json:"lexicons"`
	Answers     map[string]int `json:"answers"`
	Validations struct {
		Params                     int `json:"params"`
		Outputs                    int `json:"outputs"`
		BadParamsRejectedByLexicon int `json:"badParamsRejectedByLexicon"`
		MutationsRejected          int `json:"mutationsRejected"`
	} `json:"validations"`
	GetBacklinks []struct {
		Index        int        `json:"index"`
		Total        *int       `json:"total"`
		Forward      []jsRecord `json:"forward"`
		Reverse      []jsRecord `json:"reverse"`
		PagesForward int        `json:"pagesForward"`
		PagesReverse int        `json:"pagesReverse"`
	} `json:"getBacklinks"`
	GetBacklinksCount []struct {
		Index int `json:"index"`
		Total int `json:"total"`
	} `json:"getBacklinksCount"`
	GetBacklinkDids []struct {
		Index int      `json:"index"`
		Total *int     `json:"total"`
		Dids  []string `json:"dids"`
	} `json:"getBacklinkDids"`
	ListBacklinks []struct {
		Index     int                 `json:"index"`
		Backlinks map[string][]string `json:"backlinks"`
		Pages     int                 `json:"pages"`
	} `json:"listBacklinks"`
	GetManyToManyCounts []struct {
		Index  int `json:"index"`
		Groups []struct {
			Subject  string `json:"subject"`
			Total    int    `json:"total"`
			Distinct int    `json:"distinct"`
		} `json:"groups"`
		Pages int `json:"pages"`
	} `json:"getManyToManyCounts"`
	GetManyToMany []struct {
		Index int `json:"index"`
		Items []struct {
			LinkRecord   jsRecord `json:"linkRecord"`
			OtherSubject string   `json:"otherSubject"`
		} `json:"items"`
		Pages int `json:"pages"`
	} `json:"getManyToMany"`
	BadParams []struct {
		NSID   string `json:"nsid"`
		Why    string `json:"why"`
		Status int    `json:"status"`
		Error  string `json:"error"`
	} `json:"badParams"`
	Mutations []struct {
		NSID     string `json:"nsid"`
		Change   string `json:"change"`
		Rejected bool   `json:"rejected"`
	} `json:"mutations"`
	Failures []string `json:"failures"`
}

type jsRecord struct {
	DID        string  `json:"did"`
	Collection string  `json:"collection"`
	RKey       string  `json:"rkey"`
	Subject    *string `json:"subject"`
	Source     *string `json:"source"`
}

func (r jsRecord) uri() string { return "at://" + r.DID + "/" + r.Collection + "/" + r.RKey }

// The inputs drive.mjs takes.
type jsBacklinks struct {
	Subject   []string `json:"subject"`
	Source    []string `json:"source"`
	DID       []string `json:"did,omitempty"`
	PageLimit int      `json:"pageLimit"`
}

type jsList struct {
	Target    string `json:"target"`
	PageLimit int    `json:"pageLimit"`
}

type jsManyToMany struct {
	Subject      string   `json:"subject"`
	Source       string   `json:"source"`
	PathToOther  string   `json:"pathToOther"`
	DID          []string `json:"did,omitempty"`
	LinkDID      []string `json:"linkDid,omitempty"`
	OtherSubject []string `json:"otherSubject,omitempty"`
	PageLimit    int      `json:"pageLimit"`
}

type jsInputs struct {
	MinGeneration uint64         `json:"minGeneration"`
	Backlinks     []jsBacklinks  `json:"backlinks"`
	ListBacklinks []jsList       `json:"listBacklinks"`
	ManyToMany    []jsManyToMany `json:"manyToMany"`
}

// synthetic is what the test adds to the capture: events in order, the
// links of each record, and the live ones at the end.
type synthetic struct {
	lines   []string
	links   map[string][]extracttest.Link // source at-uri -> links, as last written
	live    map[string]bool               // source at-uri -> live at the end
	removed map[string][]extracttest.Link // links of deleted or updated-away versions
	docs    []string                      // leaflet documents' at-uris, in creation order
	deleted string                        // the deleted document
	updated string                        // the updated document
	list    string                        // the list the list items join
	items   map[string]listItem           // list item at-uri -> what it joins
}

type listItem struct{ did, list, subject string }

const (
	dropinCollLeaflet  = "pub.leaflet.document"
	dropinCollListItem = "app.bsky.graph.listitem"
	dropinCID          = "bafyreiguce4jh7kcbmof3pmcvasifqtw24b6isakj5ve5ga2b4z4alpc4i"
)

// buildSynthetic writes the events after the capture's last time_us.
func buildSynthetic(lastUS int64, captureDIDs []string) *synthetic {
	s := &synthetic{links: map[string][]extracttest.Link{}, live: map[string]bool{}, removed: map[string][]extracttest.Link{}, items: map[string]listItem{}}
	us := lastUS + 1_000_000
	tick := func() int64 { us += 1000; return us }
	tid := func(t int64, clock uint) string { return syntax.NewTID(t, clock).String() }
	event := func(did, op, coll, rkey string, rec []byte) {
		t := tick()
		c := map[string]any{"rev": tid(t, 1), "operation": op, "collection": coll, "rkey": rkey}
		if rec != nil {
			c["record"] = json.RawMessage(rec)
			c["cid"] = dropinCID
		}
		b, err := json.Marshal(map[string]any{"did": did, "time_us": t, "kind": "commit", "commit": c})
		if err != nil {
			panic(err)
		}
		s.lines = append(s.lines, string(b))
		uri := "at://" + did + "/" + coll + "/" + rkey
		if old := s.links[uri]; s.live[uri] {
			s.removed[uri] = append(s.removed[uri], old...)
		}
		if op == "delete" {
			s.live[uri] = false
			return
		}
		s.live[uri] = true
	}

	author := "did:plc:eddyleafletauthor2222222" // made up
	other := captureDIDs[0]                      // an account of the capture
	pub := "at://" + author + "/pub.leaflet.publication/" + tid(us, 7)
	doc := func(did, rkey, tag string, op string) string {
		rec, links := extracttest.LeafletDocument(did, pub, tag, 8)
		uri := "at://" + did + "/" + dropinCollLeaflet + "/" + rkey
		event(did, op, dropinCollLeaflet, rkey, rec)
		s.links[uri] = links
		return uri
	}
	s.docs = append(s.docs, doc(author, tid(tick(), 2), "alpha", "create"))
	// A key that is not a TID: newer than every TID in the contract's order.
	s.docs = append(s.docs, doc(author, "nested-lists-bravo", "bravo", "create"))
	charlie := tid(tick(), 2)
	s.deleted = doc(other, charlie, "charlie", "create")
	s.docs = append(s.docs, s.deleted)
	delta := tid(tick(), 2)
	s.updated = doc(author, delta, "delta", "create")
	s.docs = append(s.docs, s.updated)

	// List items: three accounts put members in one list (one twice), one
	// item goes to another list, one is created and deleted.
	owner := captureDIDs[0]
	s.list = "at://" + owner + "/app.bsky.graph.list/" + tid(us, 3)
	list2 := "at://" + owner + "/app.bsky.graph.list/" + tid(us+1, 3)
	members := []string{"did:plc:eddymemberone22222222222", "did:plc:eddymembertwo22222222222", captureDIDs[1], "did:plc:eddymemberfour2222222222"}
	accounts := []string{owner, "did:plc:eddylistcurator2222222222", captureDIDs[2]}
	item := func(did, list, subject string) string {
		rkey := tid(tick(), 4)
		rec, _ := json.Marshal(map[string]any{"$type": dropinCollListItem, "list": list, "subject": subject, "createdAt": "2026-07-04T15:00:00.000Z"})
		event(did, "create", dropinCollListItem, rkey, rec)
		uri := "at://" + did + "/" + dropinCollListItem + "/" + rkey
		s.links[uri] = []extracttest.Link{{Path: ".list", Target: list}, {Path: ".subject", Target: subject}}
		s.items[uri] = listItem{did, list, subject}
		return uri
	}
	item(accounts[0], s.list, members[0])
	item(accounts[0], s.list, members[1])
	item(accounts[0], s.list, members[2])
	item(accounts[1], s.list, members[0])
	item(accounts[1], s.list, members[1])
	item(accounts[2], s.list, members[0])
	item(accounts[0], s.list, members[0]) // the same member twice by one account
	// A member that is a URL: kept under its hash, named by the forward
	// entries, so many-to-many answers it as the URL.
	item(accounts[2], s.list, "https://example.com/eddy-member")
	item(accounts[0], list2, members[3])
	gone := item(accounts[1], s.list, members[3])

	// The update: new links only; the delete: none.
	doc(author, delta, "delta-2", "update")
	event(other, "delete", dropinCollLeaflet, charlie, nil)
	event(accounts[1], "delete", dropinCollListItem, gone[strings.LastIndex(gone, "/")+1:], nil)
	return s
}

// modelLinks: per target, the live links "source path" (Constellation's
// paths) of the capture and the synthetic records together.
func (s *synthetic) modelLinks(capture map[string][]string) map[string][]string {
	out := map[string][]string{}
	for tg, v := range capture {
		out[tg] = append([]string(nil), v...)
	}
	for src, links := range s.links {
		if !s.live[src] {
			continue
		}
		for _, l := range links {
			out[l.Target] = append(out[l.Target], src+" "+l.Path)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// targets: every target any synthetic record ever linked, live or not.
func (s *synthetic) targets() []string {
	set := map[string]bool{}
	for _, ls := range []map[string][]extracttest.Link{s.links, s.removed} {
		for _, links := range ls {
			for _, l := range links {
				set[l.Target] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dollar: per target, the live synthetic links "source $path" in seed
// 000's paths.
func (s *synthetic) dollar() map[string][]string {
	out := map[string][]string{}
	for src, links := range s.links {
		if !s.live[src] {
			continue
		}
		for _, l := range links {
			out[l.Target] = append(out[l.Target], src+" "+dollarPath(l))
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// dollarPath is a link's path as listBacklinks renders it (seed 000's: a
// strong reference at its own path, without ".uri").
func dollarPath(l extracttest.Link) string {
	if l.StrongRef {
		return "$" + strings.TrimSuffix(l.Path, ".uri")
	}
	return "$" + l.Path
}

func syntheticCollection(src string) bool {
	return strings.Contains(src, "/"+dropinCollLeaflet+"/") || strings.Contains(src, "/"+dropinCollListItem+"/")
}

// xrpc asks one node and checks the answer is JSON; it returns the status
// and the body, decoded into out when out is not nil and the status 200.
func xrpc(t *testing.T, method, u string, out any) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: HTTP %d with Content-Type %q: %s", method, u, resp.StatusCode, ct, qClip(b))
	}
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Errorf("%s: %v: %s", u, err, qClip(b))
		}
	}
	return resp.StatusCode, resp.Header, b
}

// backlinksOf pages getBacklinks of one subject and source to the end
// (default page size) and returns the records' at-uris.
func backlinksOf(t *testing.T, n localNode, subject, source string) ([]string, error) {
	t.Helper()
	var out []string
	cursor := ""
	for page := 0; ; page++ {
		u := "http://" + n.HTTP + "/xrpc/blue.microcosm.links.getBacklinks?subject=" + url.QueryEscape(subject) + "&source=" + url.QueryEscape(source)
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var p struct {
			Total   int
			Records []jsRecord
			Cursor  *string
		}
		st, _, b := xrpc(t, "GET", u, &p)
		if st != 200 {
			return out, fmt.Errorf("getBacklinks %s %s: HTTP %d: %s", subject, source, st, qClip(b))
		}
		for _, r := range p.Records {
			out = append(out, r.uri())
		}
		if p.Cursor == nil {
			break
		}
		if page > 1000 {
			return out, fmt.Errorf("getBacklinks %s %s: over 1000 pages", subject, source)
		}
		cursor = *p.Cursor
	}
	slices.Sort(out)
	return out, nil
}

func TestDropIn(t *testing.T) {
	node := nodeJS(t)
	capture, _ := filepath.Abs(corpus + "expected_v1.jsonl")
	raw, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	var lastUS int64
	var dids []string
	for _, l := range lines {
		var ev struct {
			DID    string `json:"did"`
			TimeUS int64  `json:"time_us"`
			Kind   string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatal(err)
		}
		lastUS = max(lastUS, ev.TimeUS)
		if ev.Kind == "commit" && !slices.Contains(dids, ev.DID) {
			dids = append(dids, ev.DID)
		}
	}
	syn := buildSynthetic(lastUS, dids)
	dir := t.TempDir()
	file := filepath.Join(dir, "dropin.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(append(lines, syn.lines...), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	synFile := filepath.Join(dir, "synthetic.jsonl")
	if err := os.WriteFile(synFile, []byte(strings.Join(syn.lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkSyntheticModel(t, syn, synFile)
	model := syn.modelLinks(wantLinks(t, "--jetstream", capture))
	dollar := syn.dollar()

	lc := up(t, "--flush-interval", "200ms", "--source", "replay+file://"+file)
	lc.waitFor(t, "every node serves the whole capture", 60*time.Second, lc.allServing)
	_, lst, err := lc.leaderStatus()
	if err != nil {
		t.Fatal(err)
	}
	gen := lst.Generation
	t.Logf("%d capture lines and %d synthetic events served at generation %d", len(lines), len(syn.lines), gen)

	// a. The documents' links, on every node.
	longest := 0
	for src, links := range syn.links {
		if syn.live[src] {
			for _, l := range links {
				longest = max(longest, len(l.Path))
			}
		}
	}
	if longest < 600 {
		t.Fatalf("the longest live path is %d bytes; the test means paths of 600+", longest)
	}
	for _, n := range lc.Nodes {
		t.Run("links/"+n.ID, func(t *testing.T) { checkDocLinks(t, n, syn, model, dollar) })
	}

	// b. The real client, against every node.
	inputs := dropinInputs(syn, model, gen)
	inFile := filepath.Join(dir, "inputs.json")
	b, _ := json.MarshalIndent(inputs, "", " ")
	if err := os.WriteFile(inFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range lc.Nodes {
		t.Run("jsclient/"+n.ID, func(t *testing.T) { runDriver(t, node, n, inFile, inputs, syn, model) })
	}

	// c. Errors of the XRPC surface.
	for _, n := range lc.Nodes {
		t.Run("errors/"+n.ID, func(t *testing.T) { checkXRPCErrors(t, n, syn) })
	}
}

// checkSyntheticModel demands the links the test wrote down for its
// records are the ones eddy-ctl links extracts from them.
func checkSyntheticModel(t *testing.T, syn *synthetic, file string) {
	t.Helper()
	out := ctl(t, "links", "--quiet", "--jetstream", file)
	have := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l linkLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Op != "delete" {
			have[l.Source+" "+l.Path+" "+l.Target] = true
		}
	}
	want := map[string]bool{}
	for _, ls := range []map[string][]extracttest.Link{syn.links, syn.removed} {
		for src, links := range ls {
			for _, l := range links {
				want[src+" "+l.Path+" "+l.Target] = true
			}
		}
	}
	if len(qCount(have, want))+len(qCount(want, have)) > 0 {
		t.Fatalf("the test's model of its records differs from eddy-ctl links: %s", qDiff(have, want))
	}
}

// checkDocLinks: every live link of every synthetic record is answered by
// listBacklinks (seed 000's paths) and getBacklinks (its source, the path
// without its leading dot); the removed ones are not.
// (Over 120 lines: one check per API over every document's links, in one place.)
func checkDocLinks(t *testing.T, n localNode, syn *synthetic, model, dollar map[string][]string) {
	errs := 0
	report := func(format string, args ...any) {
		t.Helper()
		if errs++; errs <= 20 {
			t.Errorf(format, args...)
		}
	}
	checked := 0
	listed := map[string]map[string]bool{} // target -> "source $path" listBacklinks answered
	for _, tg := range syn.targets() {
		// Every link of tg, by /links/all and getBacklinks.
		if have := nodeLinks(t, n, tg); !slices.Equal(have, model[tg]) {
			report("target %s:\n have %v\n want %v", tg, have, model[tg])
		}
		// listBacklinks: the synthetic links at their $-paths, the
		// capture's by source.
		var lb struct {
			Backlinks map[string][]string `json:"backlinks"`
			Cursor    *string             `json:"cursor"`
		}
		st, _, body := xrpc(t, "GET", "http://"+n.HTTP+"/xrpc/blue.cerulea.backlinks.listBacklinks?limit=1000&target="+url.QueryEscape(tg), &lb)
		if st != 200 {
			report("listBacklinks %s: HTTP %d: %s", tg, st, qClip(body))
			continue
		}
		if lb.Cursor != nil {
			report("listBacklinks %s: a second page (cursor %s) for fewer than 1000 links", tg, *lb.Cursor)
		}
		var synHave, otherHave, otherWant []string
		listed[tg] = map[string]bool{}
		for p, srcs := range lb.Backlinks {
			for _, src := range srcs {
				listed[tg][src+" "+p] = true
				if syntheticCollection(src) {
					synHave = append(synHave, src+" "+p)
				} else {
					otherHave = append(otherHave, src)
				}
			}
		}
		for _, k := range model[tg] {
			if src, _, _ := strings.Cut(k, " "); !syntheticCollection(src) {
				otherWant = append(otherWant, src)
			}
		}
		slices.Sort(synHave)
		slices.Sort(otherHave)
		slices.Sort(otherWant)
		if !slices.Equal(synHave, dollar[tg]) {
			report("listBacklinks %s:\n have %v\n want %v", tg, synHave, dollar[tg])
		}
		if !slices.Equal(otherHave, otherWant) {
			report("listBacklinks %s: the capture's sources %v, want %v", tg, otherHave, otherWant)
		}
		checked++
	}
	// getBacklinks by each live link's own source (collection and the path
	// without its leading dot), and by each removed link's.
	pairs := map[[2]string]bool{}
	for src, links := range syn.links {
		if syn.live[src] {
			for _, l := range links {
				pairs[[2]string{l.Target, collOf(src) + ":" + strings.TrimPrefix(l.Path, ".")}] = true
			}
		}
	}
	for src, links := range syn.removed {
		for _, l := range links {
			pairs[[2]string{l.Target, collOf(src) + ":" + strings.TrimPrefix(l.Path, ".")}] = true
		}
	}
	long := 0
	answered := map[[2]string][]string{} // (target, source) -> getBacklinks' records
	for pr := range pairs {
		tg, source := pr[0], pr[1]
		coll, path, _ := strings.Cut(source, ":")
		var want []string
		for _, k := range model[tg] {
			if src, p, _ := strings.Cut(k, " "); p == "."+path && collOf(src) == coll {
				want = append(want, src)
			}
		}
		have, err := backlinksOf(t, n, tg, source)
		if err != nil {
			report("%v", err)
			continue
		}
		answered[pr] = have
		if !slices.Equal(have, want) {
			report("getBacklinks subject=%s source=%s:\n have %v\n want %v", tg, source, have, want)
		}
		if len(path) >= 600 {
			long++
		}
	}
	// The deleted document, the deleted list item and the updated
	// document's first version: none of their old links is answered, by
	// getBacklinks or by listBacklinks.
	gone := 0
	for src, links := range syn.removed {
		for _, l := range links {
			if syn.live[src] && slices.ContainsFunc(syn.links[src], func(m extracttest.Link) bool { return m.Target == l.Target && m.Path == l.Path }) {
				continue // the new version links there too
			}
			gone++
			source := collOf(src) + ":" + strings.TrimPrefix(l.Path, ".")
			if slices.Contains(answered[[2]string{l.Target, source}], src) {
				report("getBacklinks subject=%s source=%s answers %s, deleted or updated away", l.Target, source, src)
			}
			for k := range listed[l.Target] {
				if strings.HasPrefix(k, src+" ") && (!syn.live[src] || k == src+" "+dollarPath(l)) {
					report("listBacklinks %s answers %s, deleted or updated away", l.Target, k)
				}
			}
		}
	}
	if gone < 28 {
		t.Fatalf("only %d removed links to check", gone)
	}
	if errs > 20 {
		t.Errorf("… and %d more", errs-20)
	}
	t.Logf("%s: %d targets of the synthetic records checked by listBacklinks and /links/all+getBacklinks, %d sources by getBacklinks (%d with paths of 600+ bytes), %d deleted or updated-away links absent", n.ID, checked, len(pairs), long, gone)
}

func collOf(uri string) string {
	_, coll, _ := qSplit(uri)
	return coll
}

// dropinInputs chooses what drive.mjs asks: every live document link, the
// busiest sources of the capture, several subjects and sources at once, a
// did filter, the list's many-to-many.
func dropinInputs(syn *synthetic, model map[string][]string, gen uint64) jsInputs {
	in := jsInputs{MinGeneration: gen}
	type pair struct{ tg, source string }
	count := map[pair]int{}
	for tg, ks := range model {
		for _, k := range ks {
			src, p, _ := strings.Cut(k, " ")
			count[pair{tg, collOf(src) + ":" + strings.TrimPrefix(p, ".")}]++
		}
	}
	var ps []pair
	for p := range count {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if count[ps[i]] != count[ps[j]] {
			return count[ps[i]] > count[ps[j]]
		}
		return ps[i].tg+ps[i].source < ps[j].tg+ps[j].source
	})
	// The busiest sources first (pages of 2, so several pages each), then
	// every other source of a synthetic record (pages of 1).
	for i, p := range ps {
		coll, _, _ := strings.Cut(p.source, ":")
		if i < 6 {
			in.Backlinks = append(in.Backlinks, jsBacklinks{Subject: []string{p.tg}, Source: []string{p.source}, PageLimit: 2})
		} else if coll == dropinCollLeaflet || coll == dropinCollListItem {
			in.Backlinks = append(in.Backlinks, jsBacklinks{Subject: []string{p.tg}, Source: []string{p.source}, PageLimit: 1})
		}
	}
	doc0 := syn.links[syn.docs[0]]
	author, pub := doc0[len(doc0)-2].Target, doc0[len(doc0)-1].Target
	site := func(uri string) string { return syn.links[uri][0].Target }
	sitePath := dropinCollLeaflet + ":" + strings.TrimPrefix(doc0[0].Path, ".")
	nobodies := []string{author}
	for i := range 20 {
		nobodies = append(nobodies, fmt.Sprintf("did:plc:eddynobody%016d", i))
	}
	in.Backlinks = append(in.Backlinks,
		// Two subjects, two sources (one with its leading dot): records
		// carry subject and source.
		jsBacklinks{Subject: []string{author, pub}, Source: []string{dropinCollLeaflet + ":author", dropinCollLeaflet + ":.publication"}, PageLimit: 2},
		// Three subjects at one source, one of them only linked by the
		// deleted document.
		// (the first not normalised: the records carry it normalised).
		jsBacklinks{Subject: []string{strings.Replace(site(syn.docs[0]), "https://example.com/", "HTTPS://Example.COM:443/", 1), site(syn.docs[1]), site(syn.deleted)}, Source: []string{sitePath}, PageLimit: 1},
		// A did filter, of more accounts than subject and source may repeat.
		jsBacklinks{Subject: []string{author}, Source: []string{dropinCollLeaflet + ":author"}, DID: nobodies, PageLimit: 1},
		jsBacklinks{Subject: []string{syn.list}, Source: []string{dropinCollListItem + ":list"}, DID: []string{"did:plc:eddylistcurator2222222222"}, PageLimit: 1},
	)
	deep := doc0[4].Target // the deepest level's at-mention
	in.ListBacklinks = []jsList{{author, 2}, {pub, 3}, {syn.list, 2}, {deep, 1}, {ps[0].tg, 2}}
	owner := strings.Split(strings.TrimPrefix(syn.list, "at://"), "/")[0]
	members := map[string]bool{}
	for _, it := range syn.items {
		members[it.subject] = true
	}
	var ms []string
	for m := range members {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	in.ManyToMany = []jsManyToMany{
		{Subject: syn.list, Source: dropinCollListItem + ":list", PathToOther: "subject", PageLimit: 2},
		{Subject: syn.list, Source: dropinCollListItem + ":.list", PathToOther: ".subject", DID: []string{owner}, LinkDID: []string{owner}, PageLimit: 100},
		{Subject: syn.list, Source: dropinCollListItem + ":list", PathToOther: "subject", OtherSubject: ms[:2], PageLimit: 1},
	}
	return in
}

// expectBacklinks: the records a getBacklinks query must return, as
// "at-uri" or, when several subjects or sources are asked, "at-uri subject
// source".
func expectBacklinks(q jsBacklinks, model map[string][]string) []string {
	multi := len(q.Subject) > 1 || len(q.Source) > 1
	var out []string
	for _, s := range q.Subject {
		if t, err := link.ParseTarget(s); err == nil {
			s = t.Norm
		}
		for _, source := range q.Source {
			coll, path, _ := strings.Cut(source, ":")
			path = "." + strings.TrimPrefix(path, ".")
			for _, k := range model[s] {
				src, p, _ := strings.Cut(k, " ")
				did, c, _ := qSplit(src)
				if p != path || c != coll || (len(q.DID) > 0 && !slices.Contains(q.DID, did)) {
					continue
				}
				if multi {
					src += " " + s + " " + coll + ":" + path[1:]
				}
				out = append(out, src)
			}
		}
	}
	slices.Sort(out)
	return out
}

// (Over 120 lines: runs the JS client and checks its whole summary against the model, field by field.)
func runDriver(t *testing.T, node string, n localNode, inFile string, in jsInputs, syn *synthetic, model map[string][]string) {
	start := time.Now()
	cmd := exec.Command(node, jsDriver, "http://"+n.HTTP, inFile)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var sum jsSummary
	if jerr := json.Unmarshal(out.Bytes(), &sum); jerr != nil {
		t.Fatalf("drive.mjs: %v; its output is not a summary (%v):\n%s\n%s", err, jerr, qClip(out.Bytes()), errb.String())
	}
	if err != nil || !sum.OK {
		fs := sum.Failures
		more := ""
		if len(fs) > 40 {
			more = fmt.Sprintf("\n… and %d more", len(fs)-40)
			fs = fs[:40]
		}
		t.Errorf("drive.mjs against %s: %v, %d failures:\n%s%s\n%s", n.ID, err, len(sum.Failures), strings.Join(fs, "\n"), more, errb.String())
	}
	t.Logf("drive.mjs against %s in %v: answers %v; validated %d parameter sets and %d answers; %d bad parameter sets refused by the lexicons too; %d mutated answers refused",
		n.ID, time.Since(start).Round(time.Millisecond), sum.Answers, sum.Validations.Params, sum.Validations.Outputs, sum.Validations.BadParamsRejectedByLexicon, sum.Validations.MutationsRejected)

	// What the client collected is what the index holds.
	for _, g := range sum.GetBacklinks {
		q := in.Backlinks[g.Index]
		want := expectBacklinks(q, model)
		multi := len(q.Subject) > 1 || len(q.Source) > 1
		var have []string
		for _, r := range g.Forward {
			k := r.uri()
			if multi && r.Subject != nil && r.Source != nil {
				k += " " + *r.Subject + " " + *r.Source
			}
			have = append(have, k)
		}
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("getBacklinks %v %v did=%v:\n have %v\n want %v", q.Subject, q.Source, q.DID, have, want)
		}
		if g.Total == nil || *g.Total != len(want) {
			t.Errorf("getBacklinks %v %v did=%v: total %v, want %d", q.Subject, q.Source, q.DID, g.Total, len(want))
		}
		if len(want) > q.PageLimit && g.PagesForward < 2 {
			t.Errorf("getBacklinks %v %v: %d records in %d page(s) of %d", q.Subject, q.Source, len(want), g.PagesForward, q.PageLimit)
		}
	}
	for _, c := range sum.GetBacklinksCount {
		q := in.Backlinks[c.Index]
		if want := len(expectBacklinks(q, model)); c.Total != want {
			t.Errorf("getBacklinksCount %v %v did=%v: %d, want %d", q.Subject, q.Source, q.DID, c.Total, want)
		}
	}
	for _, d := range sum.GetBacklinkDids {
		q := in.Backlinks[d.Index]
		set := map[string]bool{}
		for _, k := range expectBacklinks(q, model) {
			did, _, _ := qSplit(strings.Fields(k)[0])
			set[did] = true
		}
		have := slices.Sorted(slices.Values(d.Dids))
		want := qSortedKeys(set)
		if !slices.Equal(have, want) || d.Total == nil || *d.Total != len(want) {
			t.Errorf("getBacklinkDids %v %v: %v (total %v), want %v", q.Subject, q.Source, have, d.Total, want)
		}
	}
	dollar := syn.dollar()
	for _, l := range sum.ListBacklinks {
		tg := in.ListBacklinks[l.Index].Target
		var have, want []string
		for p, srcs := range l.Backlinks {
			for _, src := range srcs {
				if syntheticCollection(src) {
					have = append(have, src+" "+p)
				} else {
					have = append(have, src)
				}
			}
		}
		want = append(want, dollar[tg]...)
		for _, k := range model[tg] {
			if src, _, _ := strings.Cut(k, " "); !syntheticCollection(src) {
				want = append(want, src)
			}
		}
		slices.Sort(have)
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("listBacklinks %s:\n have %v\n want %v", tg, have, want)
		}
	}
	// Many-to-many, from the list items alone.
	for _, c := range sum.GetManyToManyCounts {
		q := in.ManyToMany[c.Index]
		type agg struct {
			total int
			dids  map[string]bool
		}
		groups := map[string]*agg{}
		for uri, it := range syn.items {
			if !syn.live[uri] || it.list != q.Subject || (len(q.DID) > 0 && !slices.Contains(q.DID, it.did)) ||
				(len(q.OtherSubject) > 0 && !slices.Contains(q.OtherSubject, it.subject)) {
				continue
			}
			g := groups[it.subject]
			if g == nil {
				g = &agg{dids: map[string]bool{}}
				groups[it.subject] = g
			}
			g.total++
			g.dids[it.did] = true
		}
		var have, want []string
		for _, g := range c.Groups {
			have = append(have, fmt.Sprintf("%s total=%d distinct=%d", g.Subject, g.Total, g.Distinct))
		}
		for s, g := range groups {
			want = append(want, fmt.Sprintf("%s total=%d distinct=%d", s, g.total, len(g.dids)))
		}
		slices.Sort(have)
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("getManyToManyCounts %+v:\n have %v\n want %v", q, have, want)
		}
		if len(want) > q.PageLimit && c.Pages < 2 {
			t.Errorf("getManyToManyCounts %+v: %d groups in %d page(s)", q, len(want), c.Pages)
		}
	}
	for _, m := range sum.GetManyToMany {
		q := in.ManyToMany[m.Index]
		var have, want []string
		for _, it := range m.Items {
			have = append(have, it.LinkRecord.uri()+" "+it.OtherSubject)
		}
		for uri, it := range syn.items {
			if syn.live[uri] && it.list == q.Subject && (len(q.LinkDID) == 0 || slices.Contains(q.LinkDID, it.did)) &&
				(len(q.OtherSubject) == 0 || slices.Contains(q.OtherSubject, it.subject)) {
				want = append(want, uri+" "+it.subject)
			}
		}
		slices.Sort(have)
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("getManyToMany %+v:\n have %v\n want %v", q, have, want)
		}
	}
	if len(sum.GetBacklinks) != len(in.Backlinks) || len(sum.ListBacklinks) != len(in.ListBacklinks) ||
		len(sum.GetManyToManyCounts) != len(in.ManyToMany) || len(sum.GetManyToMany) != len(in.ManyToMany) {
		t.Errorf("drive.mjs answered %d/%d getBacklinks, %d/%d listBacklinks, %d+%d/%d many-to-many queries",
			len(sum.GetBacklinks), len(in.Backlinks), len(sum.ListBacklinks), len(in.ListBacklinks), len(sum.GetManyToManyCounts), len(sum.GetManyToMany), len(in.ManyToMany))
	}
	if len(sum.Mutations) < 6 || sum.Validations.MutationsRejected != len(sum.Mutations) {
		t.Errorf("drive.mjs refused %d of %d mutated answers", sum.Validations.MutationsRejected, len(sum.Mutations))
	}
}

// checkXRPCErrors: an unknown method is 501 MethodNotImplemented, a known
// method asked with another HTTP method is 405 with Allow, an unknown
// path outside /xrpc/ is 404 NotFound; all are XRPC error bodies in JSON.
func checkXRPCErrors(t *testing.T, n localNode, syn *synthetic) {
	base := "http://" + n.HTTP
	type xerr struct{ Error, Message string }
	expect := func(method, path string, status int, name string) http.Header {
		t.Helper()
		st, h, b := xrpc(t, method, base+path, nil)
		var e xerr
		if err := json.Unmarshal(b, &e); err != nil || st != status || e.Error != name || e.Message == "" {
			t.Errorf("%s %s: HTTP %d %s, want %d {\"error\":%q,\"message\":…}", method, path, st, qClip(b), status, name)
		}
		return h
	}
	expect("GET", "/xrpc/blue.microcosm.links.nope", http.StatusNotImplemented, "MethodNotImplemented")
	expect("GET", "/xrpc/com.atproto.sync.getRepo?did=did:plc:eddynobody222222222222222", http.StatusNotImplemented, "MethodNotImplemented")
	q := "?subject=" + url.QueryEscape(syn.list) + "&source=app.bsky.graph.listitem:list"
	for _, nsid := range []string{"blue.microcosm.links.getBacklinks", "blue.microcosm.links.getBacklinksCount", "blue.microcosm.links.getBacklinkDids",
		"blue.microcosm.links.getManyToManyCounts", "blue.microcosm.links.getManyToMany", "blue.cerulea.backlinks.listBacklinks"} {
		for _, m := range []string{"POST", "PUT", "DELETE"} {
			h := expect(m, "/xrpc/"+nsid+q, http.StatusMethodNotAllowed, "InvalidRequest")
			if a := h.Get("Allow"); !strings.Contains(a, "GET") {
				t.Errorf("%s /xrpc/%s: Allow %q", m, nsid, a)
			}
		}
	}
	expect("GET", "/no/such/path", http.StatusNotFound, "NotFound")
	// Every endpoint answers JSON, a 200 as much as a 400.
	for _, p := range []string{
		"/xrpc/blue.microcosm.links.getBacklinks" + q,
		"/xrpc/blue.microcosm.links.getBacklinksCount" + q,
		"/xrpc/blue.microcosm.links.getBacklinkDids" + q,
		"/xrpc/blue.microcosm.links.getManyToManyCounts" + q + "&pathToOther=subject",
		"/xrpc/blue.microcosm.links.getManyToMany" + q + "&pathToOther=subject",
		"/xrpc/blue.cerulea.backlinks.listBacklinks?target=" + url.QueryEscape(syn.list),
	} {
		if st, _, b := xrpc(t, "GET", base+p, nil); st != 200 {
			t.Errorf("GET %s: HTTP %d: %s", p, st, qClip(b))
		}
		expect("GET", p+"&minGeneration=-1", http.StatusBadRequest, "InvalidRequest")
	}
}
