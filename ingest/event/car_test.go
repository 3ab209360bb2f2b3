package event

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
)

// Every CAR the tests read this way is also walked without its records
// (OpenCAR, CAR.Walk(false, ...): a backfill's check before it writes),
// which must accept and refuse what the full walk does, naming the same
// records and the same missing blocks.
func readCAROps(t testing.TB, b []byte) ([]Op, CARInfo, error) {
	t.Helper()
	var ops []Op
	info, err := ReadCAR(bytes.NewReader(b), func(o *Op) error {
		ops = append(ops, *o)
		return nil
	})
	var paths []string
	c, cerr := OpenCAR(b, CAROptions{})
	cinfo := c.Info()
	if cerr == nil {
		cinfo, cerr = c.Walk(false, func(o *Op) error {
			if o.Record != nil {
				t.Errorf("a walk without records gave %s/%s's", o.Collection, o.RKey)
			}
			paths = append(paths, o.Collection+"/"+o.RKey+"|"+o.CID)
			return nil
		})
	}
	if (cerr == nil) != (err == nil) {
		t.Errorf("a walk without records: error %v, the full walk's %v", cerr, err)
	}
	cinfo.Decoded = info.Decoded // the one figure a walk without records cannot give
	if fmt.Sprint(cinfo) != fmt.Sprint(info) || len(paths) != len(ops) {
		t.Errorf("a walk without records: %+v (%d ops), the full walk: %+v (%d ops)", cinfo, len(paths), info, len(ops))
	}
	for i, o := range ops {
		if i < len(paths) && paths[i] != o.Collection+"/"+o.RKey+"|"+o.CID {
			t.Errorf("op %d: %s without records, %s/%s|%s with", i, paths[i], o.Collection, o.RKey, o.CID)
		}
	}
	return ops, info, err
}

// TestReadCARSummary decodes every repository CAR of the shared test set
// and compares it with car_summary.tsv, computed by an independent reader.
func TestReadCARSummary(t *testing.T) {
	sums := loadCARSummary(t)
	if len(sums) != 10 {
		t.Fatalf("%d CARs in car_summary.tsv", len(sums))
	}
	versions := map[int]int{}
	for _, s := range sums {
		b := readTD(t, s.file)
		if len(b) != s.bytes {
			t.Fatalf("%s: %d bytes, summary says %d", s.file, len(b), s.bytes)
		}
		ops, info, err := readCAROps(t, b)
		if err != nil {
			t.Fatalf("%s: %v", s.file, err)
		}
		versions[info.Version]++
		nodes, recs := 0, 0
		for _, m := range info.Missing {
			switch m.Kind {
			case MissingMSTNode:
				nodes++
			case MissingRecord:
				recs++
			}
		}
		got := carSummary{file: s.file, bytes: len(b), did: info.DID, rev: info.Rev, version: info.Version,
			entries: info.Records, present: info.Decoded, missingNodes: nodes, blocks: info.Blocks, root: info.Root, data: info.Data}
		if got != s {
			t.Fatalf("%s:\n got %+v\nwant %+v", s.file, got, s)
		}
		if len(ops) != info.Records || recs != s.entries-s.present {
			t.Fatalf("%s: %d ops, %d missing records", s.file, len(ops), recs)
		}
		for i, op := range ops {
			if op.Kind != KindCommit || op.Action != ActionCreate || op.DID != s.did || op.Rev != s.rev || op.Seq != 0 || op.CID == "" {
				t.Fatalf("%s: op %+v", s.file, op)
			}
			if (op.Skip == "") != (op.Record != nil) || (op.Skip != "" && op.Skip != SkipRecordMissing) {
				t.Fatalf("%s: op %+v", s.file, op)
			}
			if i > 0 && ops[i-1].Collection+"/"+ops[i-1].RKey >= op.Collection+"/"+op.RKey {
				t.Fatalf("%s: ops out of order", s.file)
			}
		}
	}
	if versions[2] == 0 || versions[3] == 0 {
		t.Fatalf("versions %v: want both 2 and 3", versions)
	}
}

// TestReadCARExpectedRecords compares jetstream/corpus/repo.car with the
// listing Bluesky's goat printed for it.
func TestReadCARExpectedRecords(t *testing.T) {
	ops, info, err := readCAROps(t, readTD(t, "jetstream/corpus/repo.car"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range ops {
		got = append(got, op.Collection+"/"+op.RKey+"\t"+op.CID)
	}
	var want []string
	for _, l := range lines(t, "jetstream/corpus/car_expected_records.tsv") {
		want = append(want, string(l))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	commit := string(readTD(t, "jetstream/corpus/car_expected_commit.txt"))
	for _, w := range []string{"Version: 3", "DID: " + info.DID, "Data CID: " + info.Data, "Revision: " + info.Rev} {
		if !strings.Contains(commit, w+"\n") {
			t.Fatalf("car_expected_commit.txt lacks %q", w)
		}
	}
	if info.Version != 3 || len(info.Missing) != 0 {
		t.Fatalf("info %+v", info)
	}
}

// TestReadCARRecordsFromCARs compares every decoded record with the JSON
// form of derived/records_from_cars.jsonl (made by an independent reader).
func TestReadCARRecordsFromCARs(t *testing.T) {
	type key struct{ source, collection, rkey string }
	type rec struct {
		cid string
		rec map[string]any
	}
	want := map[key]rec{}
	for _, l := range lines(t, "derived/records_from_cars.jsonl") {
		var r struct {
			Source, DID, Collection, RKey, CID string
			Record                             json.RawMessage
		}
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		m, err := atdata.UnmarshalJSON(r.Record)
		if err != nil {
			t.Fatalf("%s %s/%s: %v", r.Source, r.Collection, r.RKey, err)
		}
		want[key{r.Source, r.Collection, r.RKey}] = rec{r.CID, m}
	}
	seen := 0
	for _, s := range loadCARSummary(t) {
		ops, _, err := readCAROps(t, readTD(t, s.file))
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range ops {
			if op.Record == nil {
				continue
			}
			w, ok := want[key{s.file, op.Collection, op.RKey}]
			if !ok {
				t.Fatalf("%s: %s/%s not in records_from_cars.jsonl", s.file, op.Collection, op.RKey)
			}
			seen++
			if w.cid != op.CID || !reflect.DeepEqual(w.rec, op.Record) {
				t.Fatalf("%s %s/%s:\n got %s %#v\nwant %s %#v", s.file, op.Collection, op.RKey, op.CID, op.Record, w.cid, w.rec)
			}
		}
	}
	if seen != len(want) {
		t.Fatalf("matched %d of %d records", seen, len(want))
	}
	t.Logf("%d records equal", seen)
}

func TestReadCARPartial(t *testing.T) {
	ops, info, err := readCAROps(t, readTD(t, "indigo/testing/testdata/repo_slice.car"))
	if err != nil {
		t.Fatal(err)
	}
	var nodes, recs []MissingBlock
	for _, m := range info.Missing {
		if m.Kind == MissingMSTNode {
			nodes = append(nodes, m)
		} else {
			recs = append(recs, m)
		}
	}
	if len(ops) != 5 || info.Records != 5 || info.Decoded != 1 || len(nodes) != 1 || len(recs) != 4 {
		t.Fatalf("%d ops, info %+v", len(ops), info)
	}
	skipped := 0
	for _, op := range ops {
		if op.Skip == SkipRecordMissing {
			skipped++
			found := false
			for _, m := range recs {
				found = found || (m.Path == op.Collection+"/"+op.RKey && m.CID == op.CID)
			}
			if !found {
				t.Fatalf("skipped op %+v not in Missing", op)
			}
		}
	}
	if skipped != 4 || nodes[0].CID == "" || nodes[0].Path != "" {
		t.Fatalf("skipped %d, nodes %+v", skipped, nodes)
	}
}

// carFile assembles a CAR v1 from a root and blocks.
func carFile(root []byte, blocks ...[2][]byte) []byte {
	hdr := []byte{0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x81, 0xd8, 0x2a, 0x58, byte(len(root) + 1), 0x00}
	hdr = append(hdr, root...)
	hdr = append(hdr, 0x67, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x01)
	out := binary.AppendUvarint(nil, uint64(len(hdr)))
	out = append(out, hdr...)
	for _, b := range blocks {
		out = binary.AppendUvarint(out, uint64(len(b[0])+len(b[1])))
		out = append(out, b[0]...)
		out = append(out, b[1]...)
	}
	return out
}

// carBlockList returns the blocks of a CAR.
func carBlockList(t testing.TB, b []byte) (root []byte, blocks [][2][]byte) {
	roots, off, err := carHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carBlocks(b, off, MaxCARBlocks, func(c, d []byte) { blocks = append(blocks, [2][]byte{c, d}) }); err != nil {
		t.Fatal(err)
	}
	return roots[0], blocks
}

func TestReadCARErrors(t *testing.T) {
	good := readTD(t, "jetstream/corpus/repo.car")
	root, blocks := carBlockList(t, good)
	if _, _, err := readCAROps(t, carFile(root, blocks...)); err != nil {
		t.Fatalf("rebuilt CAR: %v", err)
	}
	// Without the commit block.
	var rest [][2][]byte
	for _, b := range blocks {
		if !bytes.Equal(b[0], root) {
			rest = append(rest, b)
		}
	}
	if _, _, err := readCAROps(t, carFile(root, rest...)); err == nil {
		t.Fatal("CAR without commit decoded")
	}
	// Every truncation is an error or a partial result, never a panic.
	for cut := 0; cut < len(good); cut += 7 {
		readCAROps(t, good[:cut])
	}
	// Corrupt MST node (replace the MST root's data with a non-map).
	_, info, _ := readCAROps(t, good)
	var corrupt [][2][]byte
	for _, b := range blocks {
		if cidString(b[0]) == info.Data {
			b = [2][]byte{b[0], {0x01}}
		}
		corrupt = append(corrupt, b)
	}
	if _, _, err := readCAROps(t, carFile(root, corrupt...)); err == nil {
		t.Fatal("corrupt MST node decoded")
	}
	// Only the commit: the MST root is missing.
	ops, info2, err := readCAROps(t, carFile(root, [2][]byte{root, blocksByCID(blocks, root)}))
	if err != nil || len(ops) != 0 || len(info2.Missing) != 1 || info2.Missing[0].CID != info.Data {
		t.Fatalf("commit only: %d ops, %+v, %v", len(ops), info2, err)
	}
	// CARv2 / unknown version header.
	bad := []byte{0x0b, 0xa1, 0x67, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x02, 0x00}
	if _, _, err := readCAROps(t, bad); err == nil {
		t.Fatal("CAR version 2 decoded")
	}
	// A callback error stops the walk.
	stop := errors.New("stop")
	n := 0
	if _, err := ReadCAR(bytes.NewReader(good), func(*Op) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("callback error: %v after %d", err, n)
	}
}

func blocksByCID(blocks [][2][]byte, c []byte) []byte {
	for _, b := range blocks {
		if bytes.Equal(b[0], c) {
			return b[1]
		}
	}
	return nil
}

// mstCAR builds a CAR from hand-made MST nodes. nodes[0] is the root;
// links between nodes are given by index, -1 for none.
type mstEntry struct {
	p    int
	k    string
	v    clink
	tree int
}

type mstNode struct {
	left    int
	entries []mstEntry
	raw     []byte // if set, the node's block data as is
}

func blockCID(data []byte) []byte {
	c, err := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: multihash.SHA2_256, MhLength: -1}.Sum(data)
	if err != nil {
		panic(err)
	}
	return c.Bytes()
}

// buildMSTCAR builds a CAR holding a commit, the nodes and the records.
// To allow cycles, node i's CID is fixed in advance as the hash of
// "node i", which the reader does not check against the node's data.
func buildMSTCAR(t testing.TB, nodes []mstNode, records map[string][]byte, omit ...int) []byte {
	t.Helper()
	ncid := func(i int) []byte { return blockCID([]byte(fmt.Sprintf("node %d", i))) }
	lnk := func(i int) any {
		if i < 0 {
			return nil
		}
		return clink(append([]byte{0}, ncid(i)...))
	}
	var blocks [][2][]byte
	for i, n := range nodes {
		if slices.Contains(omit, i) {
			continue
		}
		data := n.raw
		if data == nil {
			var es []any
			for _, e := range n.entries {
				es = append(es, cmap{"k", []byte(e.k), "p", e.p, "t", lnk(e.tree), "v", e.v})
			}
			if es == nil {
				es = []any{}
			}
			data = cenc(cmap{"e", es, "l", lnk(n.left)})
		}
		blocks = append(blocks, [2][]byte{ncid(i), data})
	}
	for _, r := range records {
		blocks = append(blocks, [2][]byte{blockCID(r), r})
	}
	commit := cenc(cmap{"did", "did:plc:test", "rev", "3abc", "sig", []byte{1}, "data", lnk(0), "prev", nil, "version", 3})
	root := blockCID(commit)
	return carFile(root, append([][2][]byte{{root, commit}}, blocks...)...)
}

func recLink(data []byte) clink { return clink(append([]byte{0}, blockCID(data)...)) }

func TestReadCARHostileMST(t *testing.T) {
	rec := cenc(cmap{"$type", "app.bsky.feed.like", "x", 1})
	recs := map[string][]byte{"r": rec}
	rl := recLink(rec)
	ok := func(name string, nodes []mstNode, wantOps int, wantSkips []string, omit ...int) CARInfo {
		t.Helper()
		ops, info, err := readCAROps(t, buildMSTCAR(t, nodes, recs, omit...))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var skips []string
		for _, op := range ops {
			if op.Skip != "" {
				skips = append(skips, op.Skip)
			}
		}
		if len(ops) != wantOps || !reflect.DeepEqual(skips, wantSkips) {
			t.Fatalf("%s: %d ops, skips %v; want %d, %v", name, len(ops), skips, wantOps, wantSkips)
		}
		return info
	}
	fail := func(name string, nodes []mstNode, substr string) {
		t.Helper()
		_, _, err := readCAROps(t, buildMSTCAR(t, nodes, recs))
		if err == nil || !strings.Contains(err.Error(), substr) {
			t.Fatalf("%s: error %v, want %q", name, err, substr)
		}
	}

	// A valid two-level tree with prefix compression.
	ok("valid", []mstNode{
		{left: 1, entries: []mstEntry{{0, "a.b/3", rl, 2}}},
		{left: -1, entries: []mstEntry{{0, "a.b/1", rl, -1}, {4, "2", rl, -1}}},
		{left: -1, entries: []mstEntry{{0, "a.b/4", rl, -1}}},
	}, 4, nil)
	// Empty repository.
	ok("empty", []mstNode{{left: -1}}, 0, nil)
	// Bad keys yield ops with Skip bad_path; a missing record, record_missing.
	ok("bad paths", []mstNode{{left: -1, entries: []mstEntry{{0, "", rl, -1}, {0, "a.b", rl, -1}, {0, "a.b/c/d", rl, -1}, {0, "a.c/x", recLink([]byte("nope")), -1}}}},
		4, []string{SkipBadPath, SkipBadPath, SkipBadPath, SkipRecordMissing})
	// Missing subtree: reported, the rest still walked.
	info := ok("missing subtree", []mstNode{
		{left: 1, entries: []mstEntry{{0, "a.b/3", rl, 2}}},
		{left: -1, entries: []mstEntry{{0, "a.b/1", rl, -1}}},
		{left: -1, entries: []mstEntry{{0, "a.b/4", rl, -1}}},
	}, 2, nil, 1)
	if len(info.Missing) != 1 || info.Missing[0].Kind != MissingMSTNode {
		t.Fatalf("missing %+v", info.Missing)
	}

	fail("self cycle", []mstNode{{left: 0, entries: []mstEntry{{0, "a.b/1", rl, -1}}}}, "reached twice")
	fail("cycle via tree", []mstNode{
		{left: -1, entries: []mstEntry{{0, "a.b/1", rl, 1}}},
		{left: -1, entries: []mstEntry{{0, "a.b/2", rl, 0}}},
	}, "reached twice")
	fail("shared subtree", []mstNode{
		{left: 1, entries: []mstEntry{{0, "a.b/1", rl, 1}}},
		{left: -1, entries: []mstEntry{{0, "a.b/0", rl, -1}}},
	}, "reached twice")
	fail("out of order", []mstNode{{left: -1, entries: []mstEntry{{0, "a.b/2", rl, -1}, {0, "a.b/1", rl, -1}}}}, "out of order")
	fail("duplicate", []mstNode{{left: -1, entries: []mstEntry{{0, "a.b/1", rl, -1}, {5, "", rl, -1}}}}, "out of order")
	fail("duplicate empty", []mstNode{{left: -1, entries: []mstEntry{{0, "", rl, -1}, {0, "", rl, -1}}}}, "out of order")
	fail("prefix too long", []mstNode{{left: -1, entries: []mstEntry{{0, "a.b/1", rl, -1}, {9, "x", rl, -1}}}}, "prefix")
	fail("key too long", []mstNode{{left: -1, entries: []mstEntry{{0, "a.b/" + strings.Repeat("x", MaxMSTKeyLen), rl, -1}}}}, "too long")
	fail("no e", []mstNode{{raw: cenc(cmap{"l", nil})}}, `no "e"`)
	fail("entry without v", []mstNode{{raw: cenc(cmap{"e", []any{cmap{"p", 0, "k", []byte("a.b/1")}}, "l", nil})}}, "lacks")
	fail("negative prefix", []mstNode{{raw: cenc(cmap{"e", []any{cmap{"p", -1, "k", []byte("a.b/1"), "v", rl}}, "l", nil})}}, "lacks")
	fail("not a map", []mstNode{{raw: cenc([]any{})}}, "expected map")
	fail("trailing", []mstNode{{raw: append(cenc(cmap{"e", []any{}, "l", nil}), 0)}}, "trailing")

	// Depth: a chain of left links MaxMSTDepth nodes deep is fine, one
	// more is refused.
	chain := func(n int) []mstNode {
		nodes := make([]mstNode, n)
		for i := range nodes {
			nodes[i].left = i + 1
		}
		nodes[n-1].left = -1
		nodes[n-1].entries = []mstEntry{{0, "a.b/1", rl, -1}}
		return nodes
	}
	ok("deep", chain(MaxMSTDepth), 1, nil)
	fail("too deep", chain(MaxMSTDepth+1), "deeper")
}

// oneByteReader hides Len and returns one byte per Read.
type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

func TestReadAllLimited(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10000)
	for _, r := range []io.Reader{bytes.NewReader(data), &oneByteReader{data}, bytes.NewBufferString(string(data))} {
		got, err := readAllLimited(r, len(data))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%T: %d bytes, %v", r, len(got), err)
		}
	}
	if _, err := readAllLimited(&oneByteReader{data}, len(data)-1); err == nil {
		t.Fatal("limit not enforced")
	}
	if _, err := readAllLimited(bytes.NewReader(data), len(data)-1); err == nil {
		t.Fatal("limit not enforced with Len")
	}
	f, err := os.Open(td("jetstream/corpus/repo.car"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := readAllLimited(f, MaxCARBytes)
	if err != nil || !bytes.Equal(got, readTD(t, "jetstream/corpus/repo.car")) {
		t.Fatalf("file: %v", err)
	}
	if _, err := readAllLimited(iotest.ErrReader(errors.New("boom")), 10); err == nil || err.Error() != "boom" {
		t.Fatalf("reader error: %v", err)
	}
}

// TestDecodeBudget checks that one large record named by many MST entries
// or commit ops is not decoded over and over without bound, while a few
// identical records are fine.
func TestDecodeBudget(t *testing.T) {
	big := cenc(cmap{"$type", "x.y.z", "t", strings.Repeat("a", 600<<10)})
	bl := recLink(big)
	entries := func(n int) []mstEntry {
		var es []mstEntry
		for i := 0; i < n; i++ {
			es = append(es, mstEntry{0, fmt.Sprintf("a.b/%04d", i), bl, -1})
		}
		return es
	}
	recs := map[string][]byte{"big": big}
	if ops, _, err := readCAROps(t, buildMSTCAR(t, []mstNode{{left: -1, entries: entries(3)}}, recs)); err != nil || len(ops) != 3 || ops[2].Record == nil {
		t.Fatalf("3 identical records: %d ops, %v", len(ops), err)
	}
	if _, _, err := readCAROps(t, buildMSTCAR(t, []mstNode{{left: -1, entries: entries(100)}}, recs)); !errors.Is(err, errDecodeBudget) {
		t.Fatalf("100 references: %v", err)
	}

	// The same through a firehose commit.
	c, _ := cid.Cast(bl[1:])
	link := lexutil.LexLink(c)
	ev := comatproto.SyncSubscribeRepos_Commit{Repo: "did:plc:x", Rev: "3a", Seq: 1, Commit: link, Blocks: carFile(bl[1:], [2][]byte{bl[1:], big})}
	for i := 0; i < 3; i++ {
		ev.Ops = append(ev.Ops, &comatproto.SyncSubscribeRepos_RepoOp{Action: "create", Path: fmt.Sprintf("a.b/%d", i), Cid: &link})
	}
	frame := append(header(1, "#commit"), cborOf(t, &ev)...)
	if ops, err := decodeAll(t, frame); err != nil || len(ops) != 3 || ops[2].Record == nil {
		t.Fatalf("3 ops: %d, %v", len(ops), err)
	}
	for i := 3; i < 100; i++ {
		ev.Ops = append(ev.Ops, &comatproto.SyncSubscribeRepos_RepoOp{Action: "create", Path: fmt.Sprintf("a.b/%d", i), Cid: &link})
	}
	frame = append(header(1, "#commit"), cborOf(t, &ev)...)
	if _, err := decodeAll(t, frame); !errors.Is(err, errDecodeBudget) {
		t.Fatalf("100 ops: %v", err)
	}
}
