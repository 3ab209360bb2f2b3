package simnet

import (
	"slices"
	"strings"
	"testing"
)

// LiveLinksTo is LiveLinks restricted to one target, and replaying
// ChangesSince(0) rebuilds it: the changes say everything that moves a
// link.
func TestHotTargetModel(t *testing.T) {
	w := NewWorld(Config{Seed: 5, Accounts: 60, Mega: MegaPost, MegaShare: 0.9})
	w.Step(4000)
	mid := w.LastSeq()
	w.Step(4000)
	hot := w.Mega()
	want := w.LiveLinks()[hot]
	if got := w.LiveLinksTo(hot); !slices.Equal(got, want) {
		t.Fatalf("LiveLinksTo: %d links, LiveLinks: %d", len(got), len(want))
	}
	if len(want) < 4000 {
		t.Fatalf("hot target has %d live links after 8,000 steps at share 0.9", len(want))
	}

	// Replay: records (source -> links to hot) and account statuses.
	recs := map[string][]string{}
	status := map[string]string{}
	sawAccount, sawUpdate, sawDelete := false, false, false
	apply := func(cs []Change) {
		for _, c := range cs {
			switch c.Action {
			case "account":
				sawAccount = true
				status[c.DID] = c.Status
				if c.Status == StatusDeleted {
					for src := range recs {
						if strings.HasPrefix(src, "at://"+c.DID+"/") {
							delete(recs, src)
						}
					}
				}
			case "delete":
				sawDelete = true
				delete(recs, c.Source)
			case "create", "update":
				sawUpdate = sawUpdate || c.Action == "update"
				var paths []string
				for _, l := range c.Links {
					if l.Target == hot {
						paths = append(paths, l.Path)
					}
				}
				recs[c.Source] = paths
			default:
				t.Fatalf("action %q", c.Action)
			}
		}
	}
	first := w.ChangesSince(0)
	if first[len(first)-1].Seq != w.LastSeq() {
		t.Fatalf("last change at seq %d, log at %d", first[len(first)-1].Seq, w.LastSeq())
	}
	// In two halves, to check the sequence-number boundary.
	var early []Change
	for _, c := range first {
		if c.Seq <= mid {
			early = append(early, c)
		}
	}
	apply(early)
	late := w.ChangesSince(mid)
	if len(early)+len(late) != len(first) || late[0].Seq != mid+1 {
		t.Fatalf("ChangesSince(%d) starts at %d with %d changes; %d before, %d in all", mid, late[0].Seq, len(late), len(early), len(first))
	}
	apply(late)
	if !sawAccount || !sawUpdate || !sawDelete {
		t.Fatalf("replay saw account %v, update %v, delete %v", sawAccount, sawUpdate, sawDelete)
	}
	var got []LinkRef
	for src, paths := range recs {
		did := strings.SplitN(strings.TrimPrefix(src, "at://"), "/", 2)[0]
		if !linkLive(status[did]) {
			continue
		}
		for _, p := range paths {
			got = append(got, LinkRef{Source: src, Path: p})
		}
	}
	slices.SortFunc(got, func(x, y LinkRef) int {
		if c := strings.Compare(x.Source, y.Source); c != 0 {
			return c
		}
		return strings.Compare(x.Path, y.Path)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("replayed changes give %d live links to the hot target, the model %d", len(got), len(want))
	}
	if len(w.ChangesSince(w.LastSeq())) != 0 {
		t.Fatal("changes after the last event")
	}
}
