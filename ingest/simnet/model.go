package simnet

// Read access to the world, and the model: the live links an index of it
// must answer.

import (
	"slices"
	"strings"
	"time"
)

// Config returns the configuration in effect (defaults filled in).
func (w *World) Config() Config { return w.cfg }

// Steps returns the number of operations applied by Step so far.
func (w *World) Steps() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.steps
}

// RecordCount returns the number of records in the repositories of
// accounts that are not deleted (taken-down and deactivated accounts'
// records count).
func (w *World) RecordCount() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.records
}

// Now returns the simulated time.
func (w *World) Now() time.Time {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return time.UnixMicro(w.clock).UTC()
}

func (a *account) snapshot() Account {
	return Account{DID: a.did, Handle: a.handle, PDS: a.pds, PLCSeq: a.plcSeq, Status: a.status, Rev: a.rev, Head: a.head.String()}
}

// Accounts returns every account, deleted ones included, in creation order.
func (w *World) Accounts() []Account {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]Account, len(w.accounts))
	for i, a := range w.accounts {
		out[i] = a.snapshot()
	}
	return out
}

// Account returns the account of did.
func (w *World) Account(did string) (Account, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	a, ok := w.byDID[did]
	if !ok {
		return Account{}, false
	}
	return a.snapshot(), true
}

// Records returns the current records of did's repository in MST (path)
// order: none for a deleted or unknown account. A deactivated or
// taken-down account keeps its records.
func (w *World) Records(did string) []Record {
	w.mu.RLock()
	defer w.mu.RUnlock()
	a, ok := w.byDID[did]
	if !ok {
		return nil
	}
	out := make([]Record, 0, len(a.list))
	for _, r := range a.list {
		out = append(out, Record{Collection: r.collection, RKey: r.rkey, CID: r.ver.cid.String(), CBOR: r.ver.cbor})
	}
	slices.SortFunc(out, func(x, y Record) int {
		return strings.Compare(x.Collection+"/"+x.RKey, y.Collection+"/"+y.RKey)
	})
	return out
}

// Mega returns the mega target, normalised.
func (w *World) Mega() string { return w.megaTarget }

// linkLive says whether the records of an account in this status are live
// links: only an active account's. A deactivated or taken-down account's
// repository is not served (getRepo answers RepoDeactivated or
// RepoTakendown, AppViews hide it), so no index can know its records; its
// links come back when a reactivation restores the repository. Deleted
// accounts' are gone for good.
func linkLive(status string) bool {
	return status == StatusActive
}

// LiveLinks returns THE MODEL: for every normalised target (at-uri, DID or
// URL, as link.ParseTarget spells it) the set of live links to it, sorted
// by source then path. A link is live when its source record exists and
// its account is active (see linkLive). Links are found
// with package extract; a record linking one target twice at one path
// counts once.
func (w *World) LiveLinks() map[string][]LinkRef {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make(map[string][]LinkRef)
	for _, a := range w.accounts {
		if !linkLive(a.status) {
			continue
		}
		for _, r := range a.list {
			if len(r.links) == 0 {
				continue
			}
			src := "at://" + a.did + "/" + r.path()
			for _, l := range r.links {
				out[l.target] = append(out[l.target], LinkRef{Source: src, Path: l.path})
			}
		}
	}
	for _, refs := range out {
		slices.SortFunc(refs, func(x, y LinkRef) int {
			if c := strings.Compare(x.Source, y.Source); c != 0 {
				return c
			}
			return strings.Compare(x.Path, y.Path)
		})
	}
	return out
}

// Targets returns every target with at least one live link, sorted.
func (w *World) Targets() []string {
	ll := w.LiveLinks()
	out := make([]string, 0, len(ll))
	for t := range ll {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
