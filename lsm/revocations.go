package lsm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/eddy-backlinks/eddy/link"
)

// revHit is a key of round two that a revocation table may hold: frames
// first..last of group (an index into queryScratch.rgroups).
type revHit struct {
	key         int // index into the key sequence
	first, last int
	group       int
}

// didRev is a repository's revocation threshold.
type didRev struct{ did, rev uint64 }

// scanKeysPerFrame: round two scans a revocation table's frames (instead of
// asking its filter about every key) when the cache holds all the frames
// the keys span and there are at least this many keys per frame. A scan
// walks the frames and the sorted keys together, each side skipping ahead
// by galloping, so it costs about the smaller of the two sides; asking the
// filter costs a hash and three random reads per key and table, which for
// a popular target (100,000 keys) over a node's dozen or more revocation
// runs was most of a count.
const scanKeysPerFrame = 8

// live is round two: for each link, whether it survives the revocations of
// its source record and repository. Keys are kept in sorted slices (no
// maps): repository keys {0,0,did} sort before every record key, so the
// keys are visited in byte order and each table's frame ranges come out
// ascending, ready to merge into one GET per run of adjacent frames.
//
// A revocation table whose frames over the keys' range are all in the
// cache, and few against the keys, is scanned instead (see
// scanKeysPerFrame): a warm count of a popular target then costs about
// the keys plus the revocations it meets, not the keys times the runs.
// Tables the cache lacks are asked through their filters, as a cold query
// must (it fetches only the frames a key may be in). The answer lives in s
// until its next use.
func (r *Reader) live(ctx context.Context, v *View, links []link.Backlink, s *queryScratch, st *Stats) ([]bool, error) {
	st.Round2Passes++
	out := reuseSlice(s.live, len(links))
	s.live = out
	if len(links) == 0 {
		return out, nil
	}
	order, minDID, maxDID := sourceKeys(links, s)
	kr := newKeyRanges(minDID, maxDID, s.srcKeys)
	s.repoRevs = s.repoRevs[:0]
	p := revProbe{links: links, s: s}

	s.rgroups = s.rgroups[:0]
	s.hits = s.hits[:0]
	for _, vr := range v.trees[TreeRevocations] {
		if err := r.planRevocationRun(ctx, vr, &p, &kr, st); err != nil {
			return nil, err
		}
	}
	if len(s.rgroups) > 0 {
		if err := r.readRevocationHits(ctx, &p, st); err != nil {
			return nil, err
		}
	}
	repo := repoThresholds(s)
	srcKeys, srcThr := s.srcKeys, s.srcThr
	si := 0 // sorted candidates find their source key by walking
	if order == keysDesc {
		si = len(srcKeys) - 1
	}
	for i := range links {
		l := &links[i]
		switch order {
		case keysAsc:
			for srcKeys[si] != l.Source {
				si++
			}
		case keysDesc:
			for srcKeys[si] != l.Source {
				si--
			}
		default:
			si, _ = slices.BinarySearchFunc(srcKeys, l.Source, link.RecordID.Compare)
		}
		var repoThr uint64
		if len(repo) > 0 {
			if j, ok := slices.BinarySearchFunc(repo, l.Source.DID, func(e didRev, d uint64) int { return cmp.Compare(e.did, d) }); ok {
				repoThr = repo[j].rev
			}
		}
		out[i] = link.Live(l.SourceRev, srcThr[si], repoThr)
		if !out[i] {
			st.Revoked++
		}
	}
	return out, nil
}

// keyOrder is the order candidates came in, by source.
type keyOrder uint8

const (
	keysUnsorted keyOrder = iota
	keysAsc               // source order
	keysDesc              // reversed (a reverse page)
)

// sourceKeys sets s.srcKeys to the sorted distinct sources of links and
// s.srcThr to their thresholds (zero); it returns the order the links
// came in and the range of their DIDs.
func sourceKeys(links []link.Backlink, s *queryScratch) (order keyOrder, minDID, maxDID uint64) {
	srcKeys := reuseSlice(s.srcKeys, len(links))
	minDID, maxDID = links[0].Source.DID, links[0].Source.DID
	for i := range links {
		srcKeys[i] = links[i].Source
		minDID, maxDID = min(minDID, links[i].Source.DID), max(maxDID, links[i].Source.DID)
	}
	// Candidates come in source order, or reversed for a reverse page.
	asc := slices.IsSortedFunc(srcKeys, link.RecordID.Compare)
	desc := !asc && slices.IsSortedFunc(srcKeys, func(a, b link.RecordID) int { return b.Compare(a) })
	switch {
	case asc:
		order = keysAsc
	case desc:
		order = keysDesc
		slices.Reverse(srcKeys)
	default:
		slices.SortFunc(srcKeys, link.RecordID.Compare)
	}
	srcKeys = slices.Compact(srcKeys)
	srcThr := reuseSlice(s.srcThr, len(srcKeys))
	clear(srcThr)
	s.srcKeys, s.srcThr = srcKeys, srcThr
	return order, minDID, maxDID
}

// planRevocationRun handles one revocation run in round two: the tables
// whose frames over the keys' range the cache holds are scanned at once
// (scanRevocations); for the others, every key their filter may hold gets
// a hit in s.hits, on frames of a group of s.rgroups (one group per run of
// adjacent frames of a table).
func (r *Reader) planRevocationRun(ctx context.Context, vr *viewRun, p *revProbe, kr *keyRanges, st *Stats) error {
	s := p.s
	compacted := vr.run.Kind == RunCompacted
	// Scan what the cache holds; the rest is asked key by key.
	keysPer := len(s.srcKeys)
	if compacted {
		keysPer >>= vr.shardBits
	}
	s.probeShard = reuseSlice(s.probeShard, len(vr.tables))
	s.tableMetas = reuseSlice(s.tableMetas, len(vr.tables))
	defer clear(s.tableMetas) // the cache may let them go after this
	probe := false
	for ti, t := range vr.tables {
		s.probeShard[ti], s.tableMetas[ti] = 0, nil
		if t == nil {
			continue
		}
		m, err := t.load(ctx)
		if err != nil {
			return err
		}
		s.tableMetas[ti] = m
		switch r.scanRevocations(t, m, s, kr, keysPer) {
		case scanned:
			st.Round2Scans++
		case notScanned:
			// Ask the filter only about the kinds of key the table's
			// range can hold: most tables hold no repository
			// revocations (an account's deletion), and asking about
			// each source's repository doubled the probes.
			var kinds probeKinds
			if keyRangeMeets(m, kr.rlo[:], kr.rhi[:]) {
				kinds |= probeRepos
			}
			if keyRangeMeets(m, kr.klo[:], kr.khi[:]) {
				kinds |= probeRecords
			}
			s.probeShard[ti] = kinds
			probe = probe || kinds != 0
		}
	}
	if !probe {
		return nil
	}
	p.prepare()
	if compacted {
		if s.byTable == nil {
			s.byTable = make(map[*viewTable]int)
		}
		clear(s.byTable)
	}
	single := -1
	for i := 0; i < p.nKeys; i++ {
		var t *viewTable
		var m *TableMeta
		if compacted {
			sh := p.shard(i, vr.shardBits)
			if int(sh) >= len(vr.tables) || !s.probeShard[sh].has(p.kindAt(i)) {
				continue
			}
			t, m = vr.tables[sh], s.tableMetas[sh]
		} else {
			if !s.probeShard[0].has(p.kindAt(i)) {
				continue
			}
			t, m = vr.tables[0], s.tableMetas[0]
		}
		if !p.mayContain(m, i) {
			continue
		}
		kb := p.keyAt(i).Bytes()
		first, last, ok := m.FramesFor(kb[:])
		if !ok {
			continue
		}
		gi := single
		if compacted {
			if x, ok := s.byTable[t]; ok {
				gi = x
			} else {
				gi = -1
			}
		}
		if gi < 0 || first > s.rgroups[gi].last+1 {
			s.rgroups = addGroup(s.rgroups, t, m, first, last)
			gi = len(s.rgroups) - 1
			if compacted {
				s.byTable[t] = gi
			} else {
				single = gi
			}
		} else if last > s.rgroups[gi].last {
			s.rgroups[gi].last = last
		}
		s.hits = append(s.hits, revHit{key: i, first: first, last: last, group: gi})
	}
	return nil
}

// readRevocationHits fetches the groups of s.rgroups and folds the
// revocations of each hit's key into its threshold (s.srcThr, s.repoThr),
// then adds the repositories' thresholds to s.repoRevs.
func (r *Reader) readRevocationHits(ctx context.Context, p *revProbe, st *Stats) error {
	s := p.s
	err := r.fetchAll(ctx, s.rgroups)
	for i := range s.rgroups {
		st.Round2GETs += s.rgroups[i].gets
	}
	if err != nil {
		return err
	}
	for _, h := range s.hits {
		kb := p.keyAt(h.key).Bytes()
		thr := p.thrAt(h.key)
		g := &s.rgroups[h.group]
		for fi := h.first; fi <= h.last; fi++ {
			recs := g.frames[fi-g.first]
			lo, hi := prefixRange(recs, link.RevocationSize, kb[:])
			for off := lo; off < hi; off += link.RevocationSize {
				if rev := binary.BigEndian.Uint64(recs[off+24 : off+32]); rev > *thr {
					*thr = rev
				}
			}
		}
	}
	for i, thr := range s.repoThr {
		if thr > 0 {
			s.repoRevs = append(s.repoRevs, didRev{s.dids[i], thr})
		}
	}
	return nil
}

// repoThresholds sorts s.repoRevs by DID, keeping the highest threshold of
// each (most often there is none), and returns it.
func repoThresholds(s *queryScratch) []didRev {
	repo := s.repoRevs
	if len(repo) > 1 {
		slices.SortFunc(repo, func(a, b didRev) int {
			if a.did != b.did {
				return cmp.Compare(a.did, b.did)
			}
			return cmp.Compare(b.rev, a.rev)
		})
		repo = slices.CompactFunc(repo, func(a, b didRev) bool { return a.did == b.did }) // keeps the highest
		s.repoRevs = repo
	}
	return repo
}

// revProbe is the key sequence round two asks filters about: the
// repositories of the links (sorted DIDs), then their source records
// (s.srcKeys), with each key's hashes computed once for every table.
// Built only when some table is not scanned.
type revProbe struct {
	links   []link.Backlink
	s       *queryScratch
	ready   bool
	nKeys   int
	fseed   uint64 // the seed of s.fhash (0 before computed)
	hashed  bool
	sharded bool
}

// prepare builds the DIDs and thresholds of the repository keys.
func (p *revProbe) prepare() {
	if p.ready {
		return
	}
	p.ready = true
	s := p.s
	dids := reuseSlice(s.dids, len(p.links))
	for i := range p.links {
		dids[i] = p.links[i].Source.DID
	}
	slices.Sort(dids)
	dids = slices.Compact(dids)
	s.dids = dids
	s.repoThr = reuseSlice(s.repoThr, len(dids))
	clear(s.repoThr)
	p.nKeys = len(dids) + len(s.srcKeys)
}

// keyRanges are the two ranges of keys one pass of round two asks about,
// encoded once for every revocation table: the repositories of the
// sources' DIDs, and the source records.
type keyRanges struct {
	minDID, maxDID     uint64
	rlo, rhi, klo, khi [link.RecordIDSize]byte
}

func newKeyRanges(minDID, maxDID uint64, srcKeys []link.RecordID) keyRanges {
	return keyRanges{minDID: minDID, maxDID: maxDID,
		rlo: link.RepoID(minDID).Bytes(), rhi: link.RepoID(maxDID).Bytes(),
		klo: srcKeys[0].Bytes(), khi: srcKeys[len(srcKeys)-1].Bytes()}
}

// probeKinds says which keys of the sequence round two asks a table's
// filter about: its repositories, its source records, both or none.
type probeKinds uint8

const (
	probeRepos probeKinds = 1 << iota
	probeRecords
)

func (k probeKinds) has(kind probeKinds) bool { return k&kind != 0 }

// keyRangeMeets reports whether [lo, hi] (24-byte keys) meets m's key
// range [MinKey, MaxKey].
func keyRangeMeets(m *TableMeta, lo, hi []byte) bool {
	l := len(lo)
	return len(m.MinKey) >= l && bytes.Compare(hi, m.MinKey[:l]) >= 0 && bytes.Compare(lo, m.MaxKey[:l]) <= 0
}

// kindAt is the kind of key i: a repository or a source record.
func (p *revProbe) kindAt(i int) probeKinds {
	if i < len(p.s.dids) {
		return probeRepos
	}
	return probeRecords
}

func (p *revProbe) keyAt(i int) link.RecordID {
	if i < len(p.s.dids) {
		return link.RepoID(p.s.dids[i])
	}
	return p.s.srcKeys[i-len(p.s.dids)]
}

func (p *revProbe) thrAt(i int) *uint64 {
	if i < len(p.s.dids) {
		return &p.s.repoThr[i]
	}
	return &p.s.srcThr[i-len(p.s.dids)]
}

// mayContain asks t's filter about key i, hashing each key once for every
// table that shares a filter seed.
func (p *revProbe) mayContain(m *TableMeta, i int) bool {
	if m.filter == nil || m.Format.PrefixLen != link.RecordIDSize {
		kb := p.keyAt(i).Bytes()
		return m.MayContain(kb[:])
	}
	if !p.hashed || m.filter.seed != p.fseed {
		if p.hashed {
			// Another seed than the cached hashes' (tables written with
			// other options): hash this key alone.
			kb := p.keyAt(i).Bytes()
			return m.mayContainKey(filterKey(kb[:], m.filter.seed))
		}
		p.hashed, p.fseed = true, m.filter.seed
		p.s.fhash = reuseSlice(p.s.fhash, p.nKeys)
		for k := range p.nKeys {
			kb := p.keyAt(k).Bytes()
			p.s.fhash[k] = filterKey(kb[:], p.fseed)
		}
	}
	return m.mayContainKey(p.s.fhash[i])
}

// shard is ShardOf(key i, bits), the key hashed once for every run.
func (p *revProbe) shard(i int, bits uint8) uint32 {
	if bits == 0 {
		return 0
	}
	if !p.sharded {
		p.sharded = true
		p.s.shash = reuseSlice(p.s.shash, p.nKeys)
		for k := range p.nKeys {
			kb := p.keyAt(k).Bytes()
			p.s.shash[k] = xxh3.HashSeed(kb[:], shardHashSeed)
		}
	}
	return shardOfHash(p.s.shash[i], bits)
}

// shardOfHash is ShardOf given the prefix's xxh3 hash with shardHashSeed.
func shardOfHash(h uint64, bits uint8) uint32 {
	if bits == 0 {
		return 0
	}
	bits = min(bits, 32)
	return uint32(h >> (64 - bits))
}

// scanResult says what scanRevocations did with a table.
type scanResult uint8

const (
	notScanned scanResult = iota // round two asks the table's filter
	scanned
	outOfRange // no key is in the table's range: nothing to read
)

// scanRevocations folds the revocations of t that the links' keys meet
// into the thresholds (s.srcThr, s.repoRevs) by walking t's frames over
// the keys' range and the sorted source keys together, when the cache
// holds all those frames and they are few against keys (the keys of t's
// shard).
func (r *Reader) scanRevocations(t *viewTable, m *TableMeta, s *queryScratch, kr *keyRanges, keys int) scanResult {
	srcKeys, srcThr := s.srcKeys, s.srcThr
	minDID, maxDID := kr.minDID, kr.maxDID
	a1, b1, ok1 := m.FramesForRange(kr.rlo[:], kr.rhi[:])
	a2, b2, ok2 := m.FramesForRange(kr.klo[:], kr.khi[:])
	switch {
	case !ok1 && !ok2:
		return outOfRange
	case !ok1:
		a1, b1 = a2, b2
		ok2 = false
	case ok2 && a2 <= b1+1:
		b1 = max(b1, b2)
		ok2 = false
	}
	frames := b1 - a1 + 1
	if ok2 {
		frames += b2 - a2 + 1
	}
	if frames*scanKeysPerFrame > keys {
		return notScanned
	}
	var ok bool
	fs := s.scanFrames[:0]
	if fs, ok = r.cache.cachedRange(t.ref.ID, a1, b1, fs); ok && ok2 {
		fs, ok = r.cache.cachedRange(t.ref.ID, a2, b2, fs)
	}
	s.scanFrames = fs
	defer clear(fs)
	if !ok {
		return notScanned
	}
	const w = link.RevocationSize
	j := 0 // the first source key not below the records walked
	for _, recs := range fs {
		n := len(recs) / w
		for i := 0; i < n && j < len(srcKeys); {
			rk := link.GetRecordID(recs[i*w:])
			if rk.IsRepo() {
				if rk.DID >= minDID && rk.DID <= maxDID {
					s.repoRevs = append(s.repoRevs, didRev{rk.DID, binary.BigEndian.Uint64(recs[i*w+24:])})
				}
				i++
				continue
			}
			switch c := rk.Compare(srcKeys[j]); {
			case c == 0:
				srcThr[j] = max(srcThr[j], binary.BigEndian.Uint64(recs[i*w+24:]))
				i++
			case c < 0:
				i = gallopRecs(recs, w, i, n, srcKeys[j])
			default:
				j = gallopKeys(srcKeys, j, rk)
			}
		}
	}
	return scanned
}

// gallopRecs returns the index of the first record after i (whose key is
// below k) of the n records of width w in recs whose key is not below k,
// or n: an exponential search, then a binary one.
func gallopRecs(recs []byte, w, i, n int, k link.RecordID) int {
	below := func(x int) bool { return link.GetRecordID(recs[x*w:]).Compare(k) < 0 }
	lo, step := i, 1 // recs[lo] is below k
	hi := lo + step
	for hi < n && below(hi) {
		lo, step = hi, step*2
		hi = lo + step
	}
	hi = min(hi, n)
	return lo + 1 + searchRecs(hi-lo-1, func(x int) bool { return !below(lo + 1 + x) })
}

// gallopKeys returns the index of the first key after j (which is below
// k) not below k, or len(keys).
func gallopKeys(keys []link.RecordID, j int, k link.RecordID) int {
	lo, step := j, 1
	hi := lo + step
	for hi < len(keys) && keys[hi].Compare(k) < 0 {
		lo, step = hi, step*2
		hi = lo + step
	}
	hi = min(hi, len(keys))
	return lo + 1 + searchRecs(hi-lo-1, func(x int) bool { return keys[lo+1+x].Compare(k) >= 0 })
}
