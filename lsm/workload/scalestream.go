package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/eddy-backlinks/eddy/link"
)

// Shape is the order a Stream writes the network in.
type Shape uint8

const (
	// ShapeBackfill: every repository written whole at one stamp (the
	// network's history, HistoryStart to HistoryEnd), then a live tail.
	ShapeBackfill Shape = iota + 1
	// ShapeLive: only a live tail (one event per stamp).
	ShapeLive
)

func (s Shape) String() string {
	switch s {
	case ShapeBackfill:
		return "backfill"
	case ShapeLive:
		return "live"
	}
	return "unknown"
}

// ParseShape parses "backfill" or "live".
func ParseShape(s string) (Shape, error) {
	switch s {
	case "backfill":
		return ShapeBackfill, nil
	case "live":
		return ShapeLive, nil
	}
	return 0, fmt.Errorf("workload: unknown shape %q", s)
}

// StreamConfig sizes a streaming workload.
type StreamConfig struct {
	Links int    // links written in all (backfill, live creates and updates), at least 1000
	Seed  uint64 // everything follows from it
	Shape Shape
	// LiveLinks is the live tail's share of Links in ShapeBackfill; 0
	// means Links/20 (ShapeLive: all of them).
	LiveLinks int
	// MegaLinks is about the number of links to the mega target (a post
	// liked from every corner of the history); 0 means min(1,000,000,
	// Links/4).
	MegaLinks int
	// AccountClocks gives every account one TID clock id (0..1023) for
	// all its records, the model before real TIDs were measured; the
	// default is the network's (see clockAt).
	AccountClocks bool
}

// Rates of the streaming model (see NewStream).
const (
	linksPerAccount  = 700  // the network: ~40M accounts for tens of billions of links
	activityAlpha    = 1.3  // Pareto tail of links per account
	activityCap      = 2000 // the busiest account writes at most this many times the least active's share
	postBucket       = 1024 // posts close in time compete in buckets of this many
	liveDeleteP      = 0.10 // a live record is deleted later with this probability
	liveUpdateP      = 0.30 // an updatable live record (profile, gates, starter pack) is rewritten later
	liveLateMax      = 1 << 21
	backfillDeleteP  = 0.03 // share of live events that delete a record of the backfill
	updateDelayMean  = 5000 // stamps
	msPerStamp       = 1000 // µs: the live tail writes one event per millisecond
	sampleQueryCount = 256
	// poolZipfQ flattens the head of the account, URL and other record
	// pools: P(rank k) ∝ (k+q)^-1.1, so the most followed account gets
	// ~0.3% of the links to accounts (~600k of 1B links: fewer followers
	// than there are accounts), not the ~12% plain Zipf gives it.
	poolZipfQ = 50
	// TID clock ids (clockAt): accounts live on one of pdsHosts hosts
	// (selfHostedP of them on their own), and a host's clock id changes
	// every pdsEpoch µs (a restart of its process).
	pdsHosts    = 100
	selfHostedP = 0.02
	pdsEpoch    = 14 * 24 * 3600 * 1_000_000
)

// Op is one write: a backlink, or (Revoke) a revocation.
type Op struct {
	Revoke     bool
	Link       link.Backlink
	Revocation link.Revocation
	// Revoked, with a revocation: the links its record was written with
	// (SourceRev the rev they were written at), for stores that delete
	// links by key rather than by source (the peers of bench peers).
	// Valid until emit returns.
	Revoked []link.Backlink
}

type sacc struct {
	field   uint64
	created int64 // µs
	clock   uint16
	host    uint32 // the host its repository lives on (clockAt)
}

// SampleTarget is a target whose live links the Stream tracks exactly.
type SampleTarget struct {
	ID   link.RecordID
	Kind string // mega, popular, medium, small, query, account, url, record
	Desc string // what it is, for messages
	// Written counts the links written to it (revoked ones included).
	Written int
	live    map[srcLoc]uint64
}

type srcLoc struct {
	src link.RecordID
	loc link.Location
}

type sampleRef struct {
	t   int32
	loc link.Location
}

// Stream is a streaming workload: Run writes it op by op; its memory does
// not grow with the links written (accounts, a bit of state per pending
// live delete, and the sample's links).
type Stream struct {
	cfg   StreamConfig
	Codec *link.Codec

	acc      []sacc
	cumB     []int64 // cumulative link budgets (activity) by account
	cumR     []int64 // cumulative backfill records by account
	backfill int     // backfill links budget
	accTL    *timeline
	actTL    *timeline

	nPosts, nURLs uint64
	pools         [numPools]uint64 // sizes of the record pools
	poolCol       [numPools]uint64
	codes         *streamCodes
	megaID        link.RecordID
	megaP         float64 // probability that a like of a post likes the mega target
	likeCol       uint64
	likeSubject   link.Location
	updatable     []bool // by collection of the spec

	pcg *rand.PCG
	r   *rand.Rand

	// The sample.
	Sample   []*SampleTarget
	sampleIx map[link.RecordID]int32
	// srcIx holds a source's first link to a sample target, srcMore its
	// others: most sources have one, and a map of values without
	// pointers is not walked by the collector (a slice a source was ~10M
	// small objects for a mega target of 10M links, marked at every
	// collection: the bench's count of it took a tenth more CPU, and its
	// peak RSS was 0.4 GB larger).
	srcIx   map[link.RecordID]sampleRef
	srcMore map[link.RecordID][]sampleRef

	// Counters.
	Written, Revoked         int // links written, links revoked
	Records, Revocations     int
	Updates, BackfillDeletes int
	Repos                    int
	Stamps                   uint64
	BackfillStamps           uint64
}

// NewStream builds the workload's accounts, pools and sample. The model:
//
// Accounts: max(N/700, 64) (the network: ~1 account per 700 links), created
// along the network's growth (HistoryStart to HistoryEnd, see growth), each
// with a share of the links drawn from a Pareto tail (alpha 1.3, capped at
// 2,000 times the least active's): many accounts write little, a few
// write hundreds of thousands of records. 97% did:plc known to the PLC
// directory (inline), 1% did:plc it does not know, 2% did:web (outlined).
//
// Records: the collection mix of spec.go (shares of records: likes 55,
// follows 12, posts 12 (replies, quotes, embeds, facets), reposts 8,
// blocks 4, list items 3, then a long tail of lexicons). In a backfill a
// record's time is uniform over its account's life; a like, repost, reply
// or quote points at a post written shortly before (an exponential delay:
// likes and reposts mean 10 h, so mostly within two days; replies 4 h;
// quotes a day; 5-20% point at any older post), a follow or block at an
// account drawn by Zipf popularity, whenever in the account's life it
// was made.
//
// Targets: posts (7.7% of N of them) are numbered in time order (their
// times follow the network's activity, the integral of its growth); a link
// to a post picks its time, then a post among the postBucket posts of
// that time by Zipf (s 1.1), so every period has its hits and a post's
// links cluster after it. Other records (reposts, lists, feed generators,
// starter packs, ...) and URLs (N/80) are Zipf-popular pools; accounts
// are the accounts themselves. Every identity is a function of its index:
// nothing per target is stored.
//
// Backfill: repository after repository, each whole at one stamp (the
// account's records in the order drawn; no deletes: a backfill is the
// state of today). Live tail (all of ShapeLive; Links/20 after a
// backfill): one event per stamp (1 ms): a new record by an account drawn
// by activity, the delete of a record (each live record is deleted with
// probability 0.1, half soon after, half up to 2M stamps later; 3% of the
// events delete a record of the backfill, each at most once), or the
// update of a profile, gate or starter pack (a revocation and its new links
// at one stamp).
//
// Every record is derived from (seed, account, ordinal) or (seed, stamp)
// alone, so deletes re-derive what they revoke.
func NewStream(cfg StreamConfig) (*Stream, error) {
	if cfg.Links < 1000 {
		return nil, errors.New("workload: a stream has at least 1000 links")
	}
	switch cfg.Shape {
	case ShapeBackfill:
		if cfg.LiveLinks == 0 {
			cfg.LiveLinks = cfg.Links / 20
		}
	case ShapeLive:
		cfg.LiveLinks = cfg.Links
	default:
		return nil, errors.New("workload: no shape")
	}
	if cfg.LiveLinks < 0 || cfg.LiveLinks > cfg.Links {
		return nil, fmt.Errorf("workload: %d live links of %d", cfg.LiveLinks, cfg.Links)
	}
	if cfg.MegaLinks == 0 {
		cfg.MegaLinks = min(MegaLinksMax, cfg.Links/4)
	}
	s := &Stream{
		cfg:      cfg,
		Codec:    &link.Codec{Outlines: link.NewMemOutlines()},
		accTL:    accountsTimeline(),
		actTL:    activityTimeline(),
		sampleIx: map[link.RecordID]int32{},
		srcIx:    map[link.RecordID]sampleRef{},
		srcMore:  map[link.RecordID][]sampleRef{},
	}
	s.backfill = cfg.Links - cfg.LiveLinks
	s.pcg = rand.NewPCG(cfg.Seed, 0)
	s.r = rand.New(s.pcg)
	if err := s.makeAccounts(max(cfg.Links/linksPerAccount, 64)); err != nil {
		return nil, err
	}
	g := &gen{codec: s.Codec}
	codes, err := g.streamCodes()
	if err != nil {
		return nil, err
	}
	s.codes = codes
	s.updatable = make([]bool, len(collections))
	for i, c := range collections {
		switch c.nsid {
		case "app.bsky.actor.profile", "app.bsky.feed.threadgate", "app.bsky.feed.postgate", "app.bsky.graph.starterpack":
			s.updatable[i] = true
		}
		if c.nsid == "app.bsky.feed.like" {
			s.likeCol, s.likeSubject = codes.col[i], codes.loc[i][0]
		}
	}
	nTargets := float64(max(cfg.Links/targetsPerLink, 64))
	var totalShare float64
	for _, rp := range recordPools {
		totalShare += rp.share
	}
	for _, rp := range recordPools {
		s.pools[rp.pool] = uint64(max(1, nTargets*shareRecords*rp.share/totalShare))
		c, err := s.Codec.Collection(rp.collection, true)
		if err != nil {
			return nil, err
		}
		s.poolCol[rp.pool] = c
	}
	s.nPosts = s.pools[poolPost]
	s.nURLs = uint64(max(16, nTargets*shareURLs))
	// The mega target: a post of the most active account, in the middle
	// of the history; a like of a post likes it with probability megaP
	// (likes are ~half the links).
	top := 0
	for a := range s.acc {
		if s.budget(a) > s.budget(top) {
			top = a
		}
	}
	s.megaID = s.recordID(top, s.poolCol[poolPost], s.actTL.at(0.5), 0)
	s.megaP = min(1, float64(cfg.MegaLinks)/(0.5*float64(cfg.Links)))
	s.makeSample()
	return s, nil
}

// onePLC is a link.PLC that knows one DID (accounts are encoded once).
type onePLC struct {
	did string
	seq uint64
}

func (p *onePLC) Seq(did string) (uint64, bool) { return p.seq, did == p.did }
func (p *onePLC) DID(seq uint64) (string, bool) { return p.did, seq == p.seq }

func (s *Stream) makeAccounts(n int) error {
	s.acc = make([]sacc, n)
	s.cumB = make([]int64, n)
	plc := &onePLC{}
	codec := &link.Codec{Outlines: s.Codec.Outlines, PLC: plc}
	weights := make([]float64, n)
	total := 0.0
	var b [24]byte
	for i := range s.acc {
		h := hash3(s.cfg.Seed, 0xacc, uint64(i))
		a := &s.acc[i]
		a.clock = uint16(h & 1023)
		a.host = uint32(mix(h+6) % pdsHosts)
		if unit(mix(h+7)) < selfHostedP {
			a.host = pdsHosts + uint32(i)
		}
		a.created = s.accTL.at(unit(mix(h + 1)))
		x := unit(mix(h + 2))
		var did string
		if x < 0.02 {
			did = fmt.Sprintf("did:web:%s%d.%s", words[h%uint64(len(words))], i, []string{"example.com", "blog.example.org", "pds.dev", "social.coop"}[(h>>8)%4])
		} else {
			hh := mix(h + 3)
			for j := range b {
				if j%12 == 0 {
					hh = mix(hh + uint64(j))
				}
				b[j] = base32Sort[hh&31]
				hh >>= 5
			}
			did = "did:plc:" + string(b[:])
		}
		plc.did, plc.seq = did, 0
		if x >= 0.03 {
			plc.seq = 1 + uint64(i)*32 + (mix(h+4) & 31) // unique, scattered
		} else {
			plc.did = ""
		}
		f, err := codec.DID(did, true)
		if err != nil {
			return err
		}
		a.field = f
		w := math.Min(math.Pow(1-unit(mix(h+5)), -1/activityAlpha), activityCap)
		weights[i] = w
		total += w
	}
	cum := 0.0
	for i, w := range weights {
		cum += w
		s.cumB[i] = int64(cum / total * float64(s.activityLinks()))
	}
	s.cumB[n-1] = int64(s.activityLinks())
	return nil
}

// activityLinks is what the account budgets sum to: the backfill's links,
// or in ShapeLive the live links (the weights of the live tail's draws).
func (s *Stream) activityLinks() int {
	if s.backfill > 0 {
		return s.backfill
	}
	return s.cfg.Links
}

func (s *Stream) budget(a int) int64 {
	if a == 0 {
		return s.cumB[0]
	}
	return s.cumB[a] - s.cumB[a-1]
}

// activeAccount draws an account by its share of the links.
func (s *Stream) activeAccount(u float64) int {
	x := int64(u * float64(s.cumB[len(s.cumB)-1]))
	i, _ := slices.BinarySearch(s.cumB, x+1)
	return min(i, len(s.cumB)-1)
}

// recordID is a record of account a's in collection col at time us (a TID).
func (s *Stream) recordID(a int, col uint64, us int64, jitter uint64) link.RecordID {
	t := syntax.NewTID(us+int64(jitter%1000), s.clockAt(a, us))
	return link.RecordID{RKey: t.Integer(), Collection: col, DID: s.acc[a].field}
}

// clockAt is the clock id of a TID that account a's host wrote at time us.
// Measured on real records (the jetstream corpus of 2026-07: 148 records'
// keys and the 160 keys they link to, every clock id below 32 and all 32
// occurring; repositories' CARs: 11 to 28 clock ids in an account of 30 to
// 184 records), a TID's clock id
// is a 5-bit number that the PDS process draws when it starts and gives
// every record it writes: not the account's, its host's, changing with
// each restart. So here a host draws a new one every pdsEpoch (with its
// own phase), and an account's records carry the clock id of its host at
// their time. With AccountClocks, the account's own id as before.
func (s *Stream) clockAt(a int, us int64) uint {
	if s.cfg.AccountClocks {
		return uint(s.acc[a].clock)
	}
	h := uint64(s.acc[a].host)
	e := (us + int64(mix(h^0x9a5e)%pdsEpoch)) / pdsEpoch
	return uint(hash3(s.cfg.Seed, 0xc10c+h, uint64(e)) & 31)
}

// post returns post p of the pool (time order).
func (s *Stream) post(p uint64) link.RecordID {
	h := hash3(s.cfg.Seed, 0x9057, p)
	us := s.actTL.at((float64(p) + unit(h)) / float64(s.nPosts))
	return s.recordID(s.activeAccount(unit(mix(h+1))), s.poolCol[poolPost], us, 0)
}

// postAt draws a post by time (µs) among its bucket, Zipf-popular.
func (s *Stream) postAt(us int64, u float64) (uint64, link.RecordID) {
	p0 := uint64(s.actTL.frac(us) * float64(s.nPosts))
	nb := (s.nPosts + postBucket - 1) / postBucket
	b := min(p0/postBucket, nb-1)
	return s.postIn(b, zipfRank(u, min(postBucket, s.nPosts-b*postBucket), targetZipfS))
}

// postIn is the post of popularity rank k of bucket b.
func (s *Stream) postIn(b, k uint64) (uint64, link.RecordID) {
	w := min(postBucket, s.nPosts-b*postBucket)
	var off uint64
	if w == postBucket {
		off = (k*2654435761 + mix(b)) % w
	} else {
		off = (k + mix(b)) % w
	}
	p := b*postBucket + off
	return p, s.post(p)
}

// poolRecord is record i of a record pool other than posts.
func (s *Stream) poolRecord(pl pool, i uint64) link.RecordID {
	h := hash3(s.cfg.Seed, 0x7001+uint64(pl), i)
	return s.recordID(s.activeAccount(unit(mix(h+1))), s.poolCol[pl], s.actTL.at(unit(h)), 0)
}

// zipfIndex draws from a pool of n by Zipf popularity (rank 0 the most
// popular, scattered over the indexes).
func zipfIndex(u float64, n, key uint64) uint64 {
	return newPerm(n, key).at(zipfRankQ(u, n, targetZipfS, poolZipfQ))
}

func (s *Stream) accountTarget(rank uint64) link.RecordID {
	a := newPerm(uint64(len(s.acc)), s.cfg.Seed^0xacc7).at(rank)
	return link.RepoID(s.acc[a].field)
}

// urlText is URL i of the pool, normalised.
func (s *Stream) urlText(i uint64) string {
	saved := *s.pcg
	defer func() { *s.pcg = saved }()
	s.pcg.Seed(hash3(s.cfg.Seed, 0x0071, i), i)
	g := &gen{r: s.r}
	for {
		norm, err := link.NormalizeURL(g.url())
		if err == nil {
			return norm
		}
	}
}

func (s *Stream) urlTarget(rank uint64) (link.RecordID, string) {
	t := s.urlText(newPerm(s.nURLs, s.cfg.Seed^0x0071).at(rank))
	return link.HashTarget(t), t
}

// Post-delay models by link: mean delay (hours) and the share pointing at
// any older post.
type delayModel struct {
	meanH float64
	old   float64
}

func delayFor(nsid, path string) delayModel {
	switch {
	case nsid == "app.bsky.feed.like":
		return delayModel{10, 0.10}
	case nsid == "app.bsky.feed.repost":
		return delayModel{10, 0.10}
	case strings.HasPrefix(path, ".reply."):
		return delayModel{4, 0.05}
	case strings.HasPrefix(path, ".embed.record"):
		return delayModel{24, 0.20}
	case path == ".pinnedPost.uri":
		return delayModel{24 * 30, 0.5}
	}
	return delayModel{1, 0.05}
}

type outLink struct {
	target link.RecordID
	loc    link.Location
}

// links draws the links of a record of collection ci written at us (the
// live tail: targets as of HistoryEnd) from s.r into out.
func (s *Stream) links(ci int, us int64, out []outLink) []outLink {
	cs := &collections[ci]
	start := HistoryStart.UnixMicro()
	ref := min(us, HistoryEnd.UnixMicro())
	var chosen [8]int
	for j := range cs.links {
		ls := &cs.links[j]
		chosen[j] = -1
		if ls.p < 1 && s.r.Float64() >= ls.p {
			continue
		}
		if ls.sameAs >= 0 && chosen[ls.sameAs] >= 0 && s.r.Float64() < ls.pSame {
			chosen[j] = chosen[ls.sameAs]
			out = append(out, outLink{out[chosen[ls.sameAs]].target, s.codes.loc[ci][j]})
			continue
		}
		var t link.RecordID
		switch pl := ls.to[s.codes.choicePick[ci][j].pick(s.r)].pool; pl {
		case poolPost:
			if j == 0 && s.codes.col[ci] == s.likeCol && s.r.Float64() < s.megaP {
				t = s.megaID
				break
			}
			dm := delayFor(cs.nsid, ls.path)
			var tp int64
			if s.r.Float64() < dm.old {
				tp = start + int64(s.r.Float64()*float64(ref-start))
			} else {
				tp = ref - int64(s.r.ExpFloat64()*dm.meanH*float64(time.Hour/time.Microsecond))
			}
			_, t = s.postAt(tp, s.r.Float64())
		case poolAccount:
			t = s.accountTarget(zipfRankQ(s.r.Float64(), uint64(len(s.acc)), targetZipfS, poolZipfQ))
		case poolURL:
			t, _ = s.urlTarget(zipfRankQ(s.r.Float64(), s.nURLs, targetZipfS, poolZipfQ))
		default:
			t = s.poolRecord(pl, zipfIndex(s.r.Float64(), s.pools[pl], s.cfg.Seed^uint64(pl)))
		}
		chosen[j] = len(out)
		out = append(out, outLink{t, s.codes.loc[ci][j]})
	}
	return out
}

// backfillRecord derives record k of account a's repository: its source,
// collection and links.
func (s *Stream) backfillRecord(a int, k uint64, out []outLink) (link.RecordID, []outLink) {
	s.pcg.Seed(hash3(s.cfg.Seed, 0xbf, uint64(a)), k)
	acc := &s.acc[a]
	end := HistoryEnd.UnixMicro()
	for {
		ci := s.codes.colPick.pick(s.r)
		us := acc.created + int64(s.r.Float64()*float64(end-acc.created))
		jit := s.r.Uint64()
		out = s.links(ci, us, out[:0])
		if len(out) > 0 {
			return s.recordID(a, s.codes.col[ci], us, jit), out
		}
	}
}

// Run writes the workload, op by op, to emit (which must not keep op).
func (s *Stream) Run(emit func(op *Op) error) error {
	var op Op
	var out []outLink
	add := func(src link.RecordID, rev uint64, ls []outLink) error {
		op.Revoke = false
		for _, l := range ls {
			op.Link = link.Backlink{Target: l.target, Source: src, Location: l.loc, SourceRev: rev}
			s.track(&op.Link)
			if err := emit(&op); err != nil {
				return err
			}
		}
		s.Written += len(ls)
		s.Records++
		return nil
	}
	revoke := func(src link.RecordID, rev, written uint64, ls []outLink) error {
		op.Revoke = true
		op.Revocation = link.Revocation{Source: src, Rev: rev}
		op.Revoked = op.Revoked[:0]
		for _, l := range ls {
			op.Revoked = append(op.Revoked, link.Backlink{Target: l.target, Source: src, Location: l.loc, SourceRev: written})
		}
		s.trackRevoke(&op.Revocation)
		s.Revocations++
		return emit(&op)
	}
	stamp, err := s.runBackfill(add, out)
	if err != nil {
		return err
	}
	s.BackfillStamps = stamp
	return s.runLive(stamp, add, revoke, out)
}

// runBackfill writes every repository whole at one stamp (ShapeBackfill)
// and returns the last stamp.
func (s *Stream) runBackfill(add func(link.RecordID, uint64, []outLink) error, out []outLink) (uint64, error) {
	stamp := uint64(0)
	if s.cfg.Shape == ShapeBackfill {
		s.cumR = make([]int64, len(s.acc))
		var recs int64
		for a := range s.acc {
			stamp++
			budget := s.budget(a)
			var written int64
			var k uint64
			for ; written < budget; k++ {
				var src link.RecordID
				src, out = s.backfillRecord(a, k, out)
				if err := add(src, stamp, out); err != nil {
					return 0, err
				}
				written += int64(len(out))
			}
			if k > 0 {
				s.Repos++
			}
			recs += int64(k)
			s.cumR[a] = recs
		}
	}
	return stamp, nil
}

// LiveLinks is the number of live links at the end of Run.
func (s *Stream) LiveLinks() int { return s.Written - s.Revoked }

// Accounts is the number of accounts.
func (s *Stream) Accounts() int { return len(s.acc) }

// Targets is the number of targets in the pools (posts, other records,
// accounts, URLs) and the mega target.
func (s *Stream) Targets() int {
	n := uint64(len(s.acc)) + s.nURLs + 1
	for _, p := range s.pools {
		n += p
	}
	return int(n)
}

// AccountDIDs calls fn with every account's DID field (an inline did:plc
// sequence number, or an outline).
func (s *Stream) AccountDIDs(fn func(field uint64)) {
	for i := range s.acc {
		fn(s.acc[i].field)
	}
}

// URLs calls fn with every URL of the pool, its target ID and its text
// (for stores keyed by text; the links carry the ID only).
func (s *Stream) URLs(fn func(id link.RecordID, text string)) {
	for i := range s.nURLs {
		t := s.urlText(i)
		fn(link.HashTarget(t), t)
	}
}
