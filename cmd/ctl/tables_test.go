package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/lsm"
)

// status prints the requests its leader has not carried out yet, from the
// status JSON a node answers (cmd/node's adminExtra: the trees of a full
// compaction, the tables to drop by tree); a follower's are not printed.
func TestStatusPrintsPendingRequests(t *testing.T) {
	var nodes []cluster.NodeStatus
	b, err := json.Marshal([]cluster.NodeStatus{
		{ID: "n1", State: "Leader", Extra: map[string]any{
			"full_compaction_pending": []lsm.Tree{lsm.TreeLinks, lsm.TreeNames},
			"drops_pending":           map[lsm.Tree][]string{lsm.TreeRevocations: {"ef03"}, lsm.TreeLinks: {"ab01", "cd02"}},
		}},
		{ID: "n2", State: "Follower", Extra: map[string]any{"drops_pending": map[lsm.Tree][]string{lsm.TreeLinks: {"zz99"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &nodes); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printStatus(&out, nodes)
	for _, want := range []string{
		"Full compaction pending: links, names\n",
		"Tables of links to drop (eddy-ctl tables drop): ab01, cd02\n\nTables of revocations to drop (eddy-ctl tables drop): ef03\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "zz99") {
		t.Errorf("status printed a follower's requests:\n%s", out.String())
	}
	out.Reset()
	nodes[0].Extra = nil
	printStatus(&out, nodes)
	if strings.Contains(out.String(), "pending") || strings.Contains(out.String(), "to drop") {
		t.Errorf("status without requests printed some:\n%s", out.String())
	}
}
