package lsm

import (
	"slices"

	"github.com/eddy-backlinks/eddy/link"
)

// prev reads the segment's previous link that keep accepts into head, and
// reports whether there was one (mergeSegsDesc: fi and off start at the
// end of the last frame's span).
func (m *mergeSeg) prev(keep func(*link.Backlink) bool) bool {
	for m.fi >= 0 {
		recs, lo := m.frames[m.fi], m.spans[2*m.fi]
		for m.off > lo {
			m.off -= link.BacklinkSize
			m.head = link.GetBacklink(recs[m.off:])
			if keep == nil || keep(&m.head) {
				return true
			}
		}
		m.fi--
		if m.fi >= 0 {
			m.off = m.spans[2*m.fi+1]
		}
	}
	return false
}

// mergeSegsDesc is mergeSegs for a reverse page: it merges from the
// segments' ends down, stops as mergeSegs does (stop > 0), and leaves what
// it appended in ascending order. A reverse page of a popular target merged
// its whole window (eight thousand links a run) for a page of a hundred.
func mergeSegsDesc(out []link.Backlink, segs []mergeSeg, keep func(*link.Backlink) bool, stop int) (_ []link.Backlink, stopped bool) {
	base := len(out)
	if stop > 0 {
		stop += len(out)
	}
	var hbuf [64]int32
	h := hbuf[:0]
	for i := range segs {
		m := &segs[i]
		if len(m.frames) == 0 {
			continue
		}
		m.fi = len(m.frames) - 1
		m.off = m.spans[2*m.fi+1]
		if m.prev(keep) {
			h = append(h, int32(i))
		}
	}
	out, stopped = drainHeap(out, segs, h, keep, stop, true)
	slices.Reverse(out[base:])
	return out, stopped
}
