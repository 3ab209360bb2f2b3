package workload

import (
	"container/heap"
	"slices"

	"github.com/eddy-backlinks/eddy/link"
)

// The stream's live tail: one event per stamp (1 ms).

// liveKind is what happens at a live stamp.
type liveKind uint8

const (
	liveCreate liveKind = iota
	liveBackfillDelete
)

// liveRecord derives the record created at live stamp st: its account,
// collection and links. fresh draws its fate too (deleted or updated
// later, and when).
func (s *Stream) liveRecord(st uint64, out []outLink) (src link.RecordID, ci int, links []outLink, fate pending) {
	s.pcg.Seed(hash3(s.cfg.Seed, 0x11fe, st), st)
	_ = s.r.Float64() // the event's kind
	a := s.activeAccount(s.r.Float64())
	us := HistoryEnd.UnixMicro() + int64(st-s.BackfillStamps)*msPerStamp
	jit := s.r.Uint64()
	for {
		ci = s.codes.colPick.pick(s.r)
		out = s.links(ci, us, out[:0])
		if len(out) > 0 {
			break
		}
	}
	src = s.recordID(a, s.codes.col[ci], us, jit)
	// Its fate.
	switch x := s.r.Float64(); {
	case s.updatable[ci] && x < liveUpdateP:
		fate = pending{due: st + 1 + uint64(s.r.ExpFloat64()*updateDelayMean), first: 1}
	case x >= 1-liveDeleteP:
		var d uint64
		if s.r.IntN(2) == 0 {
			d = 1 + uint64(s.r.ExpFloat64()*deleteSoonMean)
		} else {
			d = 1 + s.r.Uint64N(uint64(min(s.cfg.LiveLinks, liveLateMax)))
		}
		fate = pending{due: st + d}
	}
	return src, ci, out, fate
}

func (s *Stream) liveKind(st uint64) liveKind {
	s.pcg.Seed(hash3(s.cfg.Seed, 0x11fe, st), st)
	if s.cfg.Shape == ShapeBackfill && s.r.Float64() < backfillDeleteP {
		return liveBackfillDelete
	}
	return liveCreate
}

// runLive writes the live tail after stamp: one event per stamp until
// Links are written, then the deletes still due.
func (s *Stream) runLive(stamp uint64, add func(link.RecordID, uint64, []outLink) error, revoke func(src link.RecordID, rev, written uint64, links []outLink) error, out []outLink) error {
	var due pendingHeap
	var bfDel uint64
	var bfPerm perm
	if len(s.cumR) > 0 && s.cumR[len(s.cumR)-1] > 0 {
		bfPerm = newPerm(uint64(s.cumR[len(s.cumR)-1]), s.cfg.Seed^0xde1)
	}
	for s.Written < s.cfg.Links {
		stamp++
		if len(due) > 0 && due[0].due <= stamp {
			p := heap.Pop(&due).(pending)
			src, ci, orig, _ := s.liveRecord(p.seq, out)
			out = orig
			if err := revoke(src, stamp, p.seq, orig); err != nil {
				return err
			}
			s.Revoked += p.count
			if p.first == 1 { // an update: new links at the same stamp
				s.pcg.Seed(hash3(s.cfg.Seed, 0x0bd, stamp), stamp)
				for {
					out = s.links(ci, HistoryEnd.UnixMicro()+int64(stamp-s.BackfillStamps)*msPerStamp, out[:0])
					if len(out) > 0 {
						break
					}
				}
				if room := s.cfg.Links - s.Written; len(out) > room {
					out = out[:room]
				}
				if err := add(src, stamp, out); err != nil {
					return err
				}
				s.Records--
				s.Updates++
			}
			continue
		}
		if s.liveKind(stamp) == liveBackfillDelete && bfPerm.n > 0 && bfDel < bfPerm.n {
			g := int64(bfPerm.at(bfDel))
			bfDel++
			a, _ := slices.BinarySearch(s.cumR, g+1)
			k := g
			if a > 0 {
				k -= s.cumR[a-1]
			}
			var src link.RecordID
			src, out = s.backfillRecord(a, uint64(k), out)
			if err := revoke(src, stamp, uint64(a)+1, out); err != nil { // account a's repository was written at stamp a+1
				return err
			}
			s.Revoked += len(out)
			s.BackfillDeletes++
			continue
		}
		src, _, ls, fate := s.liveRecord(stamp, out)
		out = ls
		if room := s.cfg.Links - s.Written; len(out) > room {
			out = out[:room]
		}
		if err := add(src, stamp, out); err != nil {
			return err
		}
		if fate.due > 0 {
			fate.seq, fate.count = stamp, len(out)
			heap.Push(&due, fate)
		}
	}
	// Deletes still due (updates not yet due are dropped).
	for len(due) > 0 {
		p := heap.Pop(&due).(pending)
		if p.first == 1 {
			continue
		}
		stamp++
		src, _, orig, _ := s.liveRecord(p.seq, out)
		out = orig
		if err := revoke(src, stamp, p.seq, orig); err != nil {
			return err
		}
		s.Revoked += p.count
	}
	s.Stamps = stamp
	return nil
}
