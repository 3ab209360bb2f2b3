package query

// Answers that fold every link of a subject into something smaller (its
// distinct accounts, its links per collection and path, the join records
// of many-to-many counts) read it window by window (lsm.Reader.Each), so
// they hold what they fold, not the links.

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
)

// distinctDIDs is the sorted did fields of the accounts with a live link
// lq asks about; shared (from the cache): never changed by the caller.
//
// The accounts are ordered by their encoding, not as the links are, so
// every page of getBacklinkDids and /links/distinct-dids folds every link
// of its subject: paging a post of a million likes a hundred accounts at a
// time read its million links a page. The accounts of a fold that read at
// least countCacheMin links are kept per view (Server.dids), at most
// didsCacheBytesMax bytes of them, and the pages that follow in the same
// generation cut theirs from that one fold.
func (s *Server) distinctDIDs(ctx context.Context, v *lsm.View, lq *linkQuery) ([]uint64, error) {
	if !lq.matchable {
		return nil, nil
	}
	key := binary.BigEndian.AppendUint64(nil, uint64(len(lq.known)))
	for _, sub := range lq.known {
		key = appendRecordID(key, sub.id)
	}
	k := string(filterKey(key, &lq.filter))
	if d, ok := s.dids.get(v, k); ok {
		return d, nil
	}
	known, err := s.held(ctx, v, lq.known)
	if err != nil {
		return nil, err
	}
	var dids didSet
	read := 0
	for _, sub := range known {
		// Window by window: a popular target's accounts, not its links,
		// are held (8 bytes an account).
		st, err := s.Reader.Each(ctx, v, sub.id, lq.filter, func(links []link.Backlink) error {
			for i := range links {
				dids.add(links[i].Source.DID)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		read += st.Candidates
	}
	d := dids.sorted()
	if read >= countCacheMin {
		// Kept at its size: the set's slice keeps the room of every link
		// added (a subject of many links from few accounts).
		d = slices.Clone(d)
		s.dids.put(v, k, d)
	}
	return d, nil
}

const (
	// didsCacheBytesMax bounds the distinct accounts kept (Server.dids):
	// those of a subject of ~4M accounts, or of many smaller ones.
	didsCacheBytesMax = 32 << 20
	// didsCacheEntryBytes is an entry's cost besides its accounts: its
	// key and the map's.
	didsCacheEntryBytes = 256
)

// didSet collects account fields in a slice, sorted and made distinct
// whenever it has doubled since: 8 bytes an account however many links
// name it (a map takes several times that).
type didSet struct {
	dids     []uint64
	distinct int // dids[:distinct] is sorted and distinct
}

// didSetMin is the slice a didSet first sorts at.
const didSetMin = 4096

func (d *didSet) add(did uint64) {
	d.dids = append(d.dids, did)
	if len(d.dids) >= 2*d.distinct+didSetMin {
		d.compact()
	}
}

func (d *didSet) compact() {
	slices.Sort(d.dids)
	d.dids = slices.Compact(d.dids)
	d.distinct = len(d.dids)
}

// sorted returns the accounts added, sorted and distinct.
func (d *didSet) sorted() []uint64 {
	d.compact()
	return d.dids
}

// len is the number of distinct accounts added.
func (d *didSet) len() int {
	d.compact()
	return len(d.dids)
}

// allOf is every live link to sub passing f, under each of its keys, in
// (source, location) order; errTooMany once it holds more than max (a
// link under both keys counted twice until the end, where one is
// dropped), so a popular subject is refused after max links are read,
// not after all of them.
func (s *Server) allOf(ctx context.Context, v *lsm.View, sub *subject, f lsm.Filter, max int) ([]link.Backlink, error) {
	sub, err := s.heldKeys(ctx, v, sub)
	if err != nil {
		return nil, err
	}
	var all []link.Backlink
	for _, k := range sub.keys {
		_, err := s.Reader.Each(ctx, v, k, f, func(links []link.Backlink) error {
			if len(all)+len(links) > len(sub.keys)*max {
				return errTooMany // checked before the window is kept
			}
			all = append(all, links...)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(sub.keys) > 1 {
		slices.SortFunc(all, func(a, b link.Backlink) int { return posOf(&a).compare(posOf(&b)) })
		all = dropTwins(all, nil, false, func(a, b link.RecordID) bool { return true })
	}
	if len(all) > max {
		return nil, errTooMany
	}
	return all, nil
}

// errTooMany: allOf met more links than it may hold.
var errTooMany = errors.New("query: more links than the answer may hold")

// eachOf calls fn with every live link to sub passing f, under each of
// its keys, window by window (lsm.Reader.Each), a link stored under both
// keys once: the links of the hashed key (written while a part of the
// target was unknown: usually few) are read whole first, and the
// encoding's links at their (source, location) are left out.
func (s *Server) eachOf(ctx context.Context, v *lsm.View, sub *subject, f lsm.Filter, fn func(links []link.Backlink) error) error {
	sub, err := s.heldKeys(ctx, v, sub)
	if err != nil {
		return err
	}
	type pos struct {
		src link.RecordID
		loc link.Location
	}
	var seen map[pos]bool
	var keep []link.Backlink
	for i := len(sub.keys) - 1; i >= 0; i-- { // the hash (last) first
		k := sub.keys[i]
		hashed := i > 0 // of two keys, the second is the hash
		_, err := s.Reader.Each(ctx, v, k, f, func(links []link.Backlink) error {
			if hashed {
				if seen == nil {
					seen = map[pos]bool{}
				}
				for j := range links {
					seen[pos{links[j].Source, links[j].Location}] = true
				}
				return fn(links)
			}
			if len(seen) == 0 {
				return fn(links)
			}
			keep = keep[:0]
			for j := range links {
				if !seen[pos{links[j].Source, links[j].Location}] {
					keep = append(keep, links[j])
				}
			}
			if len(keep) == 0 {
				return nil
			}
			return fn(keep)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
