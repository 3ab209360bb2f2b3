package workload

import (
	"slices"

	"github.com/eddy-backlinks/eddy/link"
)

// index builds the per-target bookkeeping.
func (w *Workload) index() {
	nt := len(w.Targets)
	w.live = make([]int32, nt)
	w.written = make([]int32, nt)
	w.byTargetOff = make([]int32, nt+1)
	for i, t := range w.LinkTarget {
		w.written[t]++
		if !w.revoked[i] {
			w.live[t]++
			w.liveLinks++
		}
	}
	for t := range nt {
		w.byTargetOff[t+1] = w.byTargetOff[t] + w.written[t]
	}
	next := slices.Clone(w.byTargetOff[:nt])
	w.byTargetIdx = make([]int32, len(w.Links))
	for i, t := range w.LinkTarget {
		w.byTargetIdx[next[t]] = int32(i)
		next[t]++
	}
}

// Live reports whether Links[i] is live at the end of the workload.
func (w *Workload) Live(i int) bool { return !w.revoked[i] }

// LiveLinks is the number of live links at the end.
func (w *Workload) LiveLinks() int { return w.liveLinks }

// LiveCount is the number of live links to target t at the end.
func (w *Workload) LiveCount(t int32) int { return int(w.live[t]) }

// WrittenCount is the number of links written to target t.
func (w *Workload) WrittenCount(t int32) int { return int(w.written[t]) }

// RevokedLinks is the number of links revoked.
func (w *Workload) RevokedLinks() int { return len(w.Links) - w.liveLinks }

// TargetLinks returns the indexes in Links of the links to target t, in
// write order.
func (w *Workload) TargetLinks(t int32) []int32 {
	return w.byTargetIdx[w.byTargetOff[t]:w.byTargetOff[t+1]]
}

// Expected returns the first limit live links to target t in the order a
// query returns them (by source, then location); limit <= 0 returns all.
func (w *Workload) Expected(t int32, limit int) []link.Backlink {
	var out []link.Backlink
	for _, i := range w.TargetLinks(t) {
		if !w.revoked[i] {
			out = append(out, w.Links[i])
		}
	}
	slices.SortFunc(out, func(a, b link.Backlink) int { return a.Compare(&b) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// TargetText renders target t as the string a link holds: the at-uri of a
// record, a bare DID, or (hashed targets cannot be rendered from their
// hash) the normalised URL the workload kept.
func (w *Workload) TargetText(t int32) (string, error) {
	id := w.Targets[t].ID
	switch {
	case id.IsHashed():
		return w.Targets[t].Text, nil
	case id.IsRepo():
		return w.Codec.RenderDID(id.DID)
	default:
		return w.Codec.RenderRecord(id)
	}
}

// KeySep separates the fields of a Key.
const KeySep = 0x00

// TargetPrefix is the prefix of the Keys of target t's links: its
// rendered text and KeySep.
func (w *Workload) TargetPrefix(dst []byte, t int32) ([]byte, error) {
	s, err := w.TargetText(t)
	if err != nil {
		return dst, err
	}
	return append(append(dst, s...), KeySep), nil
}

// Key appends Links[i] rendered as strings to dst:
// target, collection, path, did, rkey, separated by KeySep — the target
// as TargetText, the source's collection NSID, its Constellation path
// (".subject.uri"), its DID and its record key, all rendered through the
// Codec.
func (w *Workload) Key(dst []byte, i int) ([]byte, error) {
	l := &w.Links[i]
	dst, err := w.TargetPrefix(dst, w.LinkTarget[i])
	if err != nil {
		return dst, err
	}
	col, err := w.Codec.RenderCollection(l.Source.Collection)
	if err != nil {
		return dst, err
	}
	path, err := w.Codec.RenderLocation(l.Location, link.StyleConstellation)
	if err != nil {
		return dst, err
	}
	did, err := w.Codec.RenderDID(l.Source.DID)
	if err != nil {
		return dst, err
	}
	rkey, err := w.Codec.RenderRKey(l.Source.RKey)
	if err != nil {
		return dst, err
	}
	dst = append(append(dst, col...), KeySep)
	dst = append(append(dst, path...), KeySep)
	dst = append(append(dst, did...), KeySep)
	return append(dst, rkey...), nil
}

// Stats summarises a workload.
type Stats struct {
	Links, LiveLinks, RevokedLinks int
	Revocations, Records, Accounts int
	Targets, MegaLinks             int
	ByKind                         map[string]int // links by target kind
	ByCollection                   map[string]int // links by source collection
}

// Stats returns the workload's summary.
func (w *Workload) Stats() Stats {
	s := Stats{
		Links: len(w.Links), LiveLinks: w.liveLinks, RevokedLinks: w.RevokedLinks(),
		Revocations: len(w.Revocations), Records: w.Records, Accounts: w.Accounts,
		Targets: len(w.Targets), MegaLinks: w.Config.MegaLinks,
		ByKind: map[string]int{}, ByCollection: map[string]int{},
	}
	for i, t := range w.LinkTarget {
		s.ByKind[w.Targets[t].Kind.String()]++
		c, _ := w.Codec.RenderCollection(w.Links[i].Source.Collection)
		s.ByCollection[c]++
	}
	return s
}
