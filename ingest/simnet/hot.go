package simnet

import (
	"slices"
	"strings"

	"github.com/bluesky-social/indigo/atproto/atdata"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
)

// Model queries for tests that follow one target, or the events, while the
// world goes on: a hot target is the mega target with a large MegaShare
// (Config{Mega: MegaPost, MegaShare: 0.9} gives the mega post about 0.69
// live links per step).

// LiveLinksTo returns the live links to one normalised target, sorted by
// source then path: LiveLinks()[target], without building the map of every
// target.
func (w *World) LiveLinksTo(target string) []LinkRef {
	w.mu.RLock()
	defer w.mu.RUnlock()
	var out []LinkRef
	for _, a := range w.accounts {
		if !linkLive(a.status) {
			continue
		}
		for _, r := range a.list {
			for _, l := range r.links {
				if l.target == target {
					out = append(out, LinkRef{Source: "at://" + a.did + "/" + r.path(), Path: l.path})
				}
			}
		}
	}
	slices.SortFunc(out, func(x, y LinkRef) int {
		if c := strings.Compare(x.Source, y.Source); c != 0 {
			return c
		}
		return strings.Compare(x.Path, y.Path)
	})
	return out
}

// Change is what one event did, as far as links go.
type Change struct {
	Seq int64  // relay sequence number of the event
	DID string // the repository or account
	// Action is "create", "update" or "delete" for a record operation of a
	// #commit (Source names the record), "account" for an #account event
	// (Status is the new status, "" when active).
	Action string
	Source string
	Status string
	// Links are the distinct links of the record version a create or
	// update wrote (normalised target, Constellation path, strong
	// reference), as package extract finds them.
	Links []WrittenLink
}

// WrittenLink is one link of a record version.
type WrittenLink struct {
	Target    string
	Path      string
	StrongRef bool
}

// ChangesSince returns, in event order, the changes of every event after
// relay sequence number seq: each record operation of each #commit, and
// each #account event. #identity events change no link and are left out.
func (w *World) ChangesSince(seq int64) []Change {
	evs, _ := w.snapshot()
	if seq < 0 {
		seq = 0
	}
	var out []Change
	var ex extract.Extractor
	for _, ev := range evs[min(int(seq), len(evs)):] {
		switch ev.kind {
		case evAccount:
			status := ev.status
			if ev.active {
				status = StatusActive
			}
			out = append(out, Change{Seq: ev.seq, DID: ev.did, Action: "account", Status: status})
		case evCommit:
			for _, op := range ev.ops {
				c := Change{Seq: ev.seq, DID: ev.did, Action: op.action.String(), Source: "at://" + ev.did + "/" + op.collection + "/" + op.rkey}
				if op.action != event.ActionDelete && op.ver != nil {
					rec, err := atdata.UnmarshalCBOR(op.ver.cbor)
					if err != nil {
						panic("simnet: own record does not decode: " + err.Error())
					}
					ls, _ := ex.Extract(rec)
					for _, l := range ls {
						wl := WrittenLink{Target: l.Target.Norm, Path: l.Path, StrongRef: l.StrongRef}
						if !slices.Contains(c.Links, wl) {
							c.Links = append(c.Links, wl)
						}
					}
				}
				out = append(out, c)
			}
		}
	}
	return out
}
