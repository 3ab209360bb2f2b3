package workload

import (
	"slices"
	"strconv"

	"github.com/eddy-backlinks/eddy/link"
)

// The stream's sample: targets whose live links it keeps exactly.

// Mega is the index in Sample of the mega target.
const Mega = 0

func (s *Stream) addSample(id link.RecordID, kind, desc string) {
	if _, ok := s.sampleIx[id]; ok {
		return
	}
	s.sampleIx[id] = int32(len(s.Sample))
	s.Sample = append(s.Sample, &SampleTarget{ID: id, Kind: kind, Desc: desc, live: map[srcLoc]uint64{}})
}

// makeSample picks the sample: the mega target, popular, medium and small
// posts, ~150-link posts for the query set, accounts, URLs and records of
// the other pools, of every popularity.
func (s *Stream) makeSample() {
	s.addSample(s.megaID, "mega", "the mega post")
	nb := (s.nPosts + postBucket - 1) / postBucket
	h := hash3(s.cfg.Seed, 0x5a, 0)
	bucket := func() uint64 { h = mix(h + 1); return h % nb }
	for _, c := range []struct {
		kind string
		rank uint64
		n    int
	}{{"popular", 0, 4}, {"popular", 1, 2}, {"medium", 8, 4}, {"small", 300, 4}, {"small", 1000, 2}} {
		for range c.n {
			b := bucket()
			if c.rank >= min(postBucket, s.nPosts-b*postBucket) {
				continue
			}
			p, id := s.postIn(b, c.rank)
			s.addSample(id, c.kind, "post "+strconv.FormatUint(p, 10)+" (rank "+strconv.FormatUint(c.rank, 10)+" of its bucket)")
		}
	}
	for range sampleQueryCount {
		b := bucket()
		rank := 3 + mix(h)%18 // ~50 to ~500 links: the bench queries those near 150
		if rank >= min(postBucket, s.nPosts-b*postBucket) {
			continue
		}
		p, id := s.postIn(b, rank)
		s.addSample(id, "query", "post "+strconv.FormatUint(p, 10)+" (rank "+strconv.FormatUint(rank, 10)+")")
	}
	for _, rank := range []uint64{0, 3, 50, 2000} {
		if rank < uint64(len(s.acc)) {
			s.addSample(s.accountTarget(rank), "account", "account of popularity rank "+strconv.FormatUint(rank, 10))
		}
	}
	for _, rank := range []uint64{0, 5, 500} {
		if rank < s.nURLs {
			id, text := s.urlTarget(rank)
			s.addSample(id, "url", text)
		}
	}
	for _, pl := range []pool{poolRepost, poolList, poolFeedGen, poolStarterPack} {
		i := newPerm(s.pools[pl], s.cfg.Seed^uint64(pl)).at(0)
		s.addSample(s.poolRecord(pl, i), "record", "the most popular record of pool "+strconv.Itoa(int(pl)))
	}
	// Posts of about ten links (the peers bench's small class), drawn
	// last from their own sequence so that the targets above stay those
	// of earlier runs.
	h = hash3(s.cfg.Seed, 0x5b, 0)
	for _, rank := range []uint64{100, 100, 100, 150, 150, 150} {
		b := bucket()
		if rank >= min(postBucket, s.nPosts-b*postBucket) {
			continue
		}
		p, id := s.postIn(b, rank)
		s.addSample(id, "small", "post "+strconv.FormatUint(p, 10)+" (rank "+strconv.FormatUint(rank, 10)+" of its bucket)")
	}
}

func (s *Stream) track(l *link.Backlink) {
	i, ok := s.sampleIx[l.Target]
	if !ok {
		return
	}
	st := s.Sample[i]
	st.Written++
	k := srcLoc{l.Source, l.Location}
	if _, ok := st.live[k]; !ok {
		ref := sampleRef{i, l.Location}
		if _, ok := s.srcIx[l.Source]; !ok {
			s.srcIx[l.Source] = ref
		} else {
			s.srcMore[l.Source] = append(s.srcMore[l.Source], ref)
		}
	}
	st.live[k] = l.SourceRev
}

func (s *Stream) trackRevoke(v *link.Revocation) {
	r, ok := s.srcIx[v.Source]
	if !ok {
		return
	}
	s.revokeRef(v, r)
	for _, r := range s.srcMore[v.Source] {
		s.revokeRef(v, r)
	}
}

// revokeRef drops the sample's link r of v's source if v revokes it.
func (s *Stream) revokeRef(v *link.Revocation, r sampleRef) {
	st := s.Sample[r.t]
	k := srcLoc{v.Source, r.loc}
	if rev, ok := st.live[k]; ok && rev < v.Rev {
		delete(st.live, k)
	}
}

// LiveCount is the number of live links to the sample target.
func (t *SampleTarget) LiveCount() int { return len(t.live) }

// Expected returns the live links to the sample target in the order a
// query returns them (by source, then location).
func (t *SampleTarget) Expected() []link.Backlink {
	out := make([]link.Backlink, 0, len(t.live))
	for k, rev := range t.live {
		out = append(out, link.Backlink{Target: t.ID, Source: k.src, Location: k.loc, SourceRev: rev})
	}
	slices.SortFunc(out, func(a, b link.Backlink) int { return a.Compare(&b) })
	return out
}

// SampleLinks is the number of live links the sample holds.
func (s *Stream) SampleLinks() int {
	n := 0
	for _, t := range s.Sample {
		n += len(t.live)
	}
	return n
}
