package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/eddy-backlinks/eddy/link"
)

// window limits round one to the frames a page needs: the links after
// (or, reverse, before) a cursor, about want of them per run. want 0 reads
// every link of the target.
type window struct {
	after   *Cursor
	reverse bool
	want    int
	// spread: want is for all runs together, shared among them by the
	// frames each has left of the target (a count's window), instead of
	// for each run (a page, which must fill from any one run).
	spread bool
	// large: the read (Count, Each) takes its share of the reader's
	// bound on large reads once its first window is planned.
	large *largeRead
}

// windowBytesMin: a target spanning at most this many bytes of a table's
// frames is read whole (512 KiB: 8 frames of 64 KiB, 4 of format 7's 128
// KiB; about 8,000 links).
const windowBytesMin = 512 << 10

// windowFramesMin is windowBytesMin in frames of m's table.
func (m *TableMeta) windowFramesMin() int { return windowBytesMin / frameBytes(m.version) }

// framesFor is how many frames of m's table want links fill, and two more.
func (m *TableMeta) framesFor(want int) int {
	return want/(frameBytes(m.version)/link.BacklinkSize) + 2
}

// cursorKey writes the 56-byte prefix of a position (target, source,
// location) into k and returns it.
func cursorKey(k *[56]byte, target link.RecordID, c *Cursor) []byte {
	target.Put(k[0:24])
	c.Source.Put(k[24:48])
	binary.BigEndian.PutUint64(k[48:56], uint64(c.Location))
	return k[:]
}

// candidates is round one: the links to target in every run, folded
// (identical links keep their newest rev), filtered, in ascending source
// order. With a window it reads only the frames after the cursor that a
// page needs; horizon, when not nil, is the furthest position (in the
// window's direction) up to which every run was read: candidates beyond
// it are dropped, and the caller continues from it. The links returned
// live in s until its next use.
func (r *Reader) candidates(ctx context.Context, v *View, target link.RecordID, f *Filter, w window, s *queryScratch, st *Stats) ([]link.Backlink, *Cursor, error) {
	prefix := target.Bytes()
	var keyBuf [56]byte
	var key []byte
	if w.after != nil {
		key = cursorKey(&keyBuf, target, w.after)
	}
	if err := planRoundOne(ctx, v, prefix[:], key, w, s, st); err != nil {
		return nil, nil, err
	}
	if err := r.admitLarge(ctx, w.large, w, s); err != nil {
		return nil, nil, err
	}
	groups := s.groups
	err := r.fetchAll(ctx, groups)
	// Groups come in run order.
	perRun := 0
	for i := range groups {
		if i == 0 || s.runOf[i] != s.runOf[i-1] {
			perRun = 0
		}
		perRun += groups[i].gets
		st.Round1GETs += groups[i].gets
		st.Round1MaxPerRun = max(st.Round1MaxPerRun, perRun)
	}
	if err != nil {
		return nil, nil, err
	}
	horizon := roundOneHorizon(groups, s.cut, prefix[:], w.reverse)
	out, horizon, err := mergeCandidates(target, f, w, horizon, s, st)
	if err != nil {
		return nil, nil, err
	}
	st.Candidates += len(out)
	return out, horizon, nil
}

// planRoundOne sets s.groups to the frames round one reads of the target
// whose key prefix is prefix: in each run, the table that may hold it (its
// filter first), the frames its fences give, narrowed to the window's
// (key: the cursor's key, or nil). s.cut says which groups stop before the
// target's end in the window's direction; s.runOf gives each group's run.
func planRoundOne(ctx context.Context, v *View, prefix, key []byte, w window, s *queryScratch, st *Stats) error {
	s.groups, s.cut, s.runOf = s.groups[:0], s.cut[:0], s.runOf[:0]
	s.plan = s.plan[:0]
	left := 0 // bytes of frames the windowed runs have left of the target, in the window's direction
	for ri, vr := range v.trees[TreeLinks] {
		t := vr.tableFor(prefix)
		if t == nil {
			continue
		}
		st.TablesConsidered++
		m, err := t.load(ctx)
		if err != nil {
			return err
		}
		if !m.MayContain(prefix) {
			st.TablesFiltered++
			continue
		}
		first, last, ok := m.FramesFor(prefix)
		if !ok {
			continue
		}
		p := planEntry{t: t, m: m, run: ri, first: first, last: last, lo: first, hi: last}
		// Targets of a few frames are read whole (one GET, no second
		// round); a window pays off for popular targets.
		if p.windowed = w.want > 0 && last-first+1 > m.windowFramesMin(); p.windowed {
			if key != nil && !p.seek(key, w.reverse) {
				continue // nothing past the cursor here
			}
			left += (p.hi - p.lo + 1) * frameBytes(m.version)
		}
		s.plan = append(s.plan, p)
	}
	for i := range s.plan {
		p := &s.plan[i]
		if p.windowed {
			minFrames, wantFrames := p.m.windowFramesMin(), p.m.framesFor(w.want)
			need := max(minFrames, wantFrames)
			if w.spread && left > 0 {
				// Each run's share of want by its bytes left (a table of
				// format 7 has frames twice an older one's).
				need = max(minFrames, (wantFrames*(p.hi-p.lo+1)*frameBytes(p.m.version)+left-1)/left)
			}
			if !w.reverse {
				p.hi = min(p.last, p.lo+need-1)
			} else {
				p.lo = max(p.first, p.hi-need+1)
			}
		}
		s.groups = addGroup(s.groups, p.t, p.m, p.lo, p.hi)
		// A count's windows past the first read a target bigger than a
		// window: caching them would only evict everything else.
		s.groups[len(s.groups)-1].noCache = w.spread && key != nil
		s.cut = append(s.cut, (!w.reverse && p.hi < p.last) || (w.reverse && p.lo > p.first))
		s.runOf = append(s.runOf, p.run)
	}
	clear(s.plan) // the metas may go after the query
	return nil
}

// planEntry is one run's table in planRoundOne: the target's frames
// first..last, the ones to read lo..hi.
type planEntry struct {
	t                   *viewTable
	m                   *TableMeta
	run                 int
	first, last, lo, hi int
	windowed            bool
}

// seek narrows lo..hi to the frames at or past the cursor's key in the
// window's direction, and reports whether any are left.
func (p *planEntry) seek(key []byte, reverse bool) bool {
	if !reverse {
		if fs, _, ok := p.m.FramesFor(key); ok {
			p.lo = max(p.lo, fs)
		} else if bytes.Compare(key, p.m.MaxKey[:56]) > 0 {
			return false
		}
	} else {
		if _, fl, ok := p.m.FramesFor(key); ok {
			p.hi = min(p.hi, fl)
		} else if bytes.Compare(key, p.m.MinKey[:56]) < 0 {
			return false
		}
	}
	return p.lo <= p.hi
}

// roundOneHorizon returns the horizon of round one: for each run read only
// in part (cut), the last position it holds of the target (prefix) in what
// was read; the horizon is the nearest of them in the window's direction,
// nil when every run was read to the target's end.
func roundOneHorizon(groups []fetchGroup, cut []bool, prefix []byte, reverse bool) *Cursor {
	var horizon *Cursor
	for gi := range groups {
		if !cut[gi] {
			continue
		}
		g := &groups[gi]
		var recs []byte
		var off int
		if !reverse {
			recs = g.frames[len(g.frames)-1]
			off = len(recs) - link.BacklinkSize
		} else {
			recs = g.frames[0]
		}
		if len(recs) == 0 || !bytes.Equal(recs[off:off+24], prefix) {
			continue // the target ends (or starts) inside what was read
		}
		l := link.GetBacklink(recs[off:])
		c := Cursor{Source: l.Source, Location: l.Location}
		if horizon == nil || (!reverse && cmpPos(c.Source, c.Location, horizon.Source, horizon.Location) < 0) ||
			(reverse && cmpPos(c.Source, c.Location, horizon.Source, horizon.Location) > 0) {
			horizon = &c
		}
	}
	return horizon
}

// mergeCandidates merges the target's records of every group read (in
// s.groups) into s.out: those that pass f, after the window's cursor and
// not beyond horizon, in order, identical links folded to the newest rev.
func mergeCandidates(target link.RecordID, f *Filter, w window, horizon *Cursor, s *queryScratch, st *Stats) ([]link.Backlink, *Cursor, error) {
	prefix := target.Bytes()
	groups := s.groups
	inWindow := func(l *link.Backlink) bool {
		if w.after != nil {
			x := cmpPos(l.Source, l.Location, w.after.Source, w.after.Location)
			if (!w.reverse && x <= 0) || (w.reverse && x >= 0) {
				return false
			}
		}
		if horizon != nil {
			x := cmpPos(l.Source, l.Location, horizon.Source, horizon.Location)
			if (!w.reverse && x > 0) || (w.reverse && x < 0) {
				return false
			}
		}
		return true
	}
	// The target's records in each frame, narrowed to the window (a
	// binary search for the cursor and the horizon: a page deep in a
	// popular target merges its window, not every record before it in
	// the frames read), then the result sized once.
	var afterKey, horizonKey [posKeySize]byte
	if w.after != nil {
		afterKey = posKey(prefix[:], w.after)
	}
	if horizon != nil {
		horizonKey = posKey(prefix[:], horizon)
	}
	n := 0
	s.spans = s.spans[:0]
	for gi := range groups {
		for _, recs := range groups[gi].frames {
			lo, hi := prefixRange(recs, link.BacklinkSize, prefix[:])
			switch {
			case w.reverse:
				if horizon != nil {
					lo = boundIn(recs, lo, hi, horizonKey[:], false)
				}
				if w.after != nil {
					hi = boundIn(recs, lo, hi, afterKey[:], false)
				}
			default:
				if w.after != nil {
					lo = boundIn(recs, lo, hi, afterKey[:], true)
				}
				if horizon != nil {
					hi = boundIn(recs, lo, hi, horizonKey[:], true)
				}
			}
			s.spans = append(s.spans, lo, hi)
			n += (hi - lo) / link.BacklinkSize
		}
	}
	if n > CandidatesMax {
		return nil, nil, fmt.Errorf("target %v: more than %d links: %w", target, CandidatesMax, ErrTooBig)
	}

	out := s.out[:0]
	if cap(out) < n {
		out = make([]link.Backlink, 0, n)
	}
	// The spans hold the window only; inWindow stays as a check that
	// costs a comparison or two a link when a filter is asked anyway.
	all, windowed := f.empty(), w.after != nil || horizon != nil
	var keep func(*link.Backlink) bool
	if !all {
		keep = func(l *link.Backlink) bool { return f.match(l) && (!windowed || inWindow(l)) }
	}
	// Each group's links are sorted (a table is): one group is copied,
	// several are merged as they are read (one pass, no second buffer).
	s.segs = s.segs[:0]
	k := 0
	for gi := range groups {
		fs := groups[gi].frames
		s.segs = append(s.segs, mergeSeg{frames: fs, spans: s.spans[k : k+2*len(fs)]})
		k += 2 * len(fs)
	}
	// A forward page stops merging once it has its window's links (the
	// runs' frames read hold up to windowBytesMin each, eight thousand
	// links, where a page wants a hundred and fifty): what was
	// merged ends at the position of its last link, the new horizon.
	// A reverse page the same from the window's end (mergeSegsDesc).
	stop := 0
	if w.want > 0 && !w.spread {
		stop = w.want
	}
	var stopped bool
	switch {
	case w.spread && w.after != nil && n >= mergeHalvesMin && runtime.GOMAXPROCS(0) > 1: // a count's later windows (mergeHalves)
		out = mergeHalves(out, s, keep, n)
	case w.reverse && stop > 0:
		out, stopped = mergeSegsDesc(out, s.segs, keep, stop)
	default:
		out, stopped = mergeSegs(out, s.segs, keep, stop)
	}
	clear(s.segs)
	clear(s.segs2)
	s.out = out
	if stopped {
		last := out[len(out)-1]
		if w.reverse {
			last = out[0] // the merge went down to it
		}
		horizon = &Cursor{Source: last.Source, Location: last.Location}
		st.Scanned += len(out) // the rest of the window is read again from the new horizon
	} else {
		st.Scanned += n // the target's links in the window, before the filter
	}
	// Fold identical links (same source and location), keeping the newest.
	k = 0
	for i := range out {
		if k > 0 && out[k-1].Source == out[i].Source && out[k-1].Location == out[i].Location {
			out[k-1].SourceRev = max(out[k-1].SourceRev, out[i].SourceRev)
			continue
		}
		out[k] = out[i]
		k++
	}
	return out[:k], horizon, nil
}

// mergeHalvesMin: a count's window of at least this many links is merged
// in two halves at once (mergeHalves).
var mergeHalvesMin = 1 << 16 // a variable for the tests

// mergeHalves merges s.segs (n links in all) into out as mergeSegs does,
// in two halves on two goroutines: the segments are split at the position
// of the middle link of the largest one (every link at or past it goes to
// the upper half, so every lower link sorts before every upper one and
// identical links stay together for the fold), each half is merged into
// its own part of out, and the upper part is moved down after the lower
// one. A count's merge was the longest serial step of a window: a 10M-link
// target's warm count went from 968 to 604-675 ms (docs/scale.md). It is
// used on the windows past a count's first, whose frames the window
// decoded itself: on frames from the shared cache (the first window) the
// two halves took twice the CPU and more wall time than one merge
// (BenchmarkCountMega: 4.7 -> 8.4 ms a warm 110k-link count; the same
// merge alone, BenchmarkMergeHalves, halves its time). Why is not
// understood; measured, not guessed at.
func mergeHalves(out []link.Backlink, s *queryScratch, keep func(*link.Backlink) bool, n int) []link.Backlink {
	const w = link.BacklinkSize
	var key []byte
	most := 0
	for i := range s.segs {
		m := &s.segs[i]
		c := 0
		for f := range m.frames {
			c += (m.spans[2*f+1] - m.spans[2*f]) / w
		}
		if c <= most {
			continue
		}
		most = c
		mid := c / 2
		for f := range m.frames {
			k := (m.spans[2*f+1] - m.spans[2*f]) / w
			if mid < k {
				off := m.spans[2*f] + mid*w
				key = m.frames[f][off : off+posKeySize]
				break
			}
			mid -= k
		}
	}
	if key == nil {
		out, _ = mergeSegs(out, s.segs, keep, 0)
		return out
	}
	s.segs2 = s.segs2[:0]
	s.spans2 = reuseSlice(s.spans2, len(s.spans))
	low, k := 0, 0
	for i := range s.segs {
		m := &s.segs[i]
		up := s.spans2[k : k+len(m.spans)]
		k += len(m.spans)
		for f := range m.frames {
			lo, hi := m.spans[2*f], m.spans[2*f+1]
			cut := boundIn(m.frames[f], lo, hi, key, false)
			m.spans[2*f+1] = cut
			up[2*f], up[2*f+1] = cut, hi
			low += (cut - lo) / w
		}
		s.segs2 = append(s.segs2, mergeSeg{frames: m.frames, spans: up})
	}
	out = out[:n]
	lower, upper := out[:0:low], out[low:low:n]
	done := make(chan struct{})
	go func() {
		upper, _ = mergeSegs(upper, s.segs2, keep, 0)
		close(done)
	}()
	lower, _ = mergeSegs(lower, s.segs, keep, 0)
	<-done
	copy(out[len(lower):], upper)
	return out[:len(lower)+len(upper)]
}

// mergeSeg is one group's links in round one: the target's records of
// each frame (spans holds [lo, hi) byte offsets per frame), read in order;
// head is the next link.
type mergeSeg struct {
	head   link.Backlink
	frames [][]byte
	spans  []int
	fi     int // the frame of the next record
	off    int // its offset
}

// next reads the segment's next link that keep accepts (nil: every link)
// into head, and reports whether there was one.
func (m *mergeSeg) next(keep func(*link.Backlink) bool) bool {
	for m.fi < len(m.frames) {
		recs, hi := m.frames[m.fi], m.spans[2*m.fi+1]
		for m.off < hi {
			m.head = link.GetBacklink(recs[m.off:])
			m.off += link.BacklinkSize
			if keep == nil || keep(&m.head) {
				return true
			}
		}
		m.fi++
		if m.fi < len(m.frames) {
			m.off = m.spans[2*m.fi]
		}
	}
	return false
}

// mergeSegs appends the links of the sorted segments that keep accepts to
// out, in order (linkLess): a single segment is copied; several are merged
// through a binary heap of their indexes, ordered by their heads.
// With stop > 0 it returns once out has stop links more and the next
// link is at another position (identical links of several runs are
// folded together later, so they are never split), reporting stopped.
func mergeSegs(out []link.Backlink, segs []mergeSeg, keep func(*link.Backlink) bool, stop int) (_ []link.Backlink, stopped bool) {
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
		m.fi, m.off = 0, m.spans[0]
		if m.next(keep) {
			h = append(h, int32(i))
		}
	}
	if len(h) == 1 {
		m := &segs[h[0]]
		for {
			out = append(out, m.head)
			if !m.next(keep) {
				return out, false
			}
			if stop > 0 && len(out) >= stop {
				if last := &out[len(out)-1]; cmpPos(last.Source, last.Location, m.head.Source, m.head.Location) != 0 {
					return out, true
				}
			}
		}
	}
	return drainHeap(out, segs, h, keep, stop, false)
}

// drainHeap merges the segments whose indexes h holds (each with a head)
// into out through a binary heap ordered by their heads, ascending, or
// descending (desc: each segment read backwards, prev), stopping as
// mergeSegs says (stop: the length of out to reach, 0 none).
func drainHeap(out []link.Backlink, segs []mergeSeg, h []int32, keep func(*link.Backlink) bool, stop int, desc bool) (_ []link.Backlink, stopped bool) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(segs, h, i, desc)
	}
	for len(h) > 0 {
		m := &segs[h[0]]
		out = append(out, m.head)
		var more bool
		if desc {
			more = m.prev(keep)
		} else {
			more = m.next(keep)
		}
		if !more {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		siftDown(segs, h, 0, desc)
		if stop > 0 && len(out) >= stop && len(h) > 0 {
			last, next := &out[len(out)-1], &segs[h[0]].head
			if cmpPos(last.Source, last.Location, next.Source, next.Location) != 0 {
				return out, true
			}
		}
	}
	return out, false
}

// siftDown restores the order of the heap h (of indexes into segs, by
// their heads) below i: the least head on top, or with desc the greatest
// (mergeSegsDesc).
func siftDown(segs []mergeSeg, h []int32, i int, desc bool) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		// With desc, "not less" puts the greater (or an equal) head above.
		if c+1 < len(h) && linkLess(&segs[h[c+1]].head, &segs[h[c]].head) != desc {
			c++
		}
		if linkLess(&segs[h[c]].head, &segs[h[i]].head) == desc {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// linkLess orders two links of one target as their encodings.
func linkLess(a, b *link.Backlink) bool {
	if c := cmpPos(a.Source, a.Location, b.Source, b.Location); c != 0 {
		return c < 0
	}
	return a.SourceRev < b.SourceRev
}

// prefixRange returns the byte offsets [lo, hi) of the records of a sorted
// frame that start with prefix.
func prefixRange(recs []byte, width int, prefix []byte) (int, int) {
	n := len(recs) / width
	l := len(prefix)
	if l%8 == 0 {
		if n == 0 {
			return 0, 0
		}
		// A popular target's frames are mostly its own: the first and
		// the last record say so without a search.
		i, j := 0, n
		if compareWords(recs[:l], prefix) < 0 {
			i = searchRecs(n, func(i int) bool { return compareWords(recs[i*width:i*width+l], prefix) >= 0 })
		}
		if compareWords(recs[(n-1)*width:(n-1)*width+l], prefix) > 0 {
			j = i + searchRecs(n-i, func(k int) bool { return compareWords(recs[(i+k)*width:(i+k)*width+l], prefix) > 0 })
		}
		return i * width, j * width
	}
	i := searchRecs(n, func(i int) bool { return bytes.Compare(recs[i*width:i*width+l], prefix) >= 0 })
	j := i + searchRecs(n-i, func(k int) bool { return bytes.Compare(recs[(i+k)*width:(i+k)*width+l], prefix) > 0 })
	return i * width, j * width
}

// posKeySize: a position in a target's links as a record prefix:
// target, source, location.
const posKeySize = 2*link.RecordIDSize + 8

// posKey is the record prefix of position c in target's links.
func posKey(target []byte, c *Cursor) [posKeySize]byte {
	var k [posKeySize]byte
	copy(k[:], target)
	c.Source.Put(k[link.RecordIDSize:])
	binary.BigEndian.PutUint64(k[2*link.RecordIDSize:], uint64(c.Location))
	return k
}

// boundIn returns the byte offset of the first record in recs[lo:hi)
// (records of link.BacklinkSize bytes, sorted) whose prefix is above key
// (strict) or not below it, or hi.
func boundIn(recs []byte, lo, hi int, key []byte, strict bool) int {
	const w = link.BacklinkSize
	l := len(key)
	ok := func(off int) bool {
		c := compareWords(recs[off:off+l], key)
		return c > 0 || !strict && c == 0
	}
	switch {
	case lo >= hi || ok(lo):
		return lo // the whole span is past the bound (or empty)
	case !ok(hi - w):
		return hi // none of it is
	}
	i := searchRecs((hi-lo)/w, func(i int) bool { return ok(lo + i*w) })
	return lo + i*w
}

// compareWords is bytes.Compare for slices of the same length, a
// multiple of 8: big-endian words compared in order (inlined loads, no
// call), which is what a record's key fields are.
func compareWords(a, b []byte) int {
	for len(a) >= 8 {
		x, y := binary.BigEndian.Uint64(a), binary.BigEndian.Uint64(b)
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
		a, b = a[8:], b[8:]
	}
	return 0
}

func searchRecs(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
