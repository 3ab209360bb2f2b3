// Package workload generates a deterministic synthetic write workload
// shaped like the atproto network, for benchmarks of the LSM engine (and of
// other stores fed the same links): `eddy-ctl bench lsm` runs it.
//
// Generate(Config{Links: N, Seed: S}) returns N backlinks in write order
// and the revocations interleaved with them; everything follows from the
// seed (math/rand/v2 PCG), so two runs with the same Config write the same
// bytes.
//
// # The model
//
// Time. The workload is a sequence of stamps 1, 2, 3, ...; each stamp is
// one event: a record created with its links (all with sourceRev = the
// stamp), or a record deleted (a link.Revocation of the record with rev =
// the stamp). Stamps increase, so links arrive in stamp order.
//
// Accounts. max(N/20, 64) accounts: 97% did:plc known to the PLC directory
// (their did field is the inline sequence number of the PLC map the
// workload carries, numbers scattered over [1, 50M]), 1% did:plc the map
// does not know and 2% did:web (both outlined through the codec's
// MemOutlines). Activity is Zipf-distributed (s = 1.1, v = 50: the busiest
// account writes about 0.4% of the records), each account with its own TID
// clock id.
//
// Sources. A record's collection is drawn from a few dozen real NSIDs with
// network-like weights (app.bsky.feed.like 55, app.bsky.graph.follow 12,
// app.bsky.feed.post 12, app.bsky.feed.repost 8, app.bsky.graph.block 4,
// app.bsky.graph.listitem 3, then threadgates, profiles, postgates,
// sh.tangled.*, pub.leaflet.*, com.whtwnd.*, fyi.unravel.frontpage.*,
// calendar RSVPs, place.stream chat, ...; see spec.go). Each collection
// has its links at Constellation paths, each present with a probability:
// a like has ".subject.uri" (a strong reference) and sometimes ".via.uri";
// a follow or block ".subject" (a DID); a post any of ".reply.parent.uri",
// ".reply.root.uri" (often the same target as the parent),
// ".embed.record.uri", ".embed.record.record.uri", ".embed.external.uri",
// ".facets[].features[app.bsky.richtext.facet#link].uri" and
// "...#mention].did"; and so on. A draw without any link is discarded. The
// record key is a TID of the event time: 2025-06-01T00:00Z plus 1 ms a
// stamp (plus jitter inside the millisecond), so it increases with the
// stamp; the source is encoded with a link.Codec (link.NewMemOutlines and
// the PLC map).
//
// Targets. One "mega" target, a post, gets exactly MegaLinks links (by
// default min(1,000,000, N/2)), spread evenly over the run: likes (87%),
// reposts (10%) and quotes (3%), one link per record. The other links go
// to about N/8 targets, each link drawn from a pool with Zipf popularity
// (s = 1.1, v = 1): 70% of the targets are records (88% posts, then
// reposts, lists, feed generators, starter packs, tangled repositories,
// leaflet publications, whitewind entries, frontpage posts, calendar
// events; TIDs from the week before the run, authors Zipf-popular), 20%
// accounts (bare DIDs: link.RepoID) and 10% https URLs (hashed:
// link.HashTarget of the normalised URL; YouTube, GitHub, Wikipedia, news
// sites...). Which pool a link draws from follows from its collection and
// path (a like's subject is a post, a follow's an account, an external
// embed a URL). Zipf leaves most of the tail unlinked: at N = 2M, about
// 100k of the 250k targets get links, 92 besides the mega target get more
// than 1,000 (the most popular 92k), and 1.79M links go to records, 195k
// to accounts and 17k to URLs.
//
// Deletes. Each record (mega links included) is deleted with probability
// 0.10, so about 10% of the links end up revoked: half soon after (an
// exponential delay of mean 2,000 stamps), half uniformly up to N stamps
// later; deletes still due when the N links are written come after the
// last link, in due order. There are no updates and no repository-wide
// revocations.
//
// The Workload keeps its own bookkeeping (which links are live, per
// target), so a benchmark can check a store's answers against it, and
// renders every link as strings (Key) for stores that index strings.
package workload

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/eddy-backlinks/eddy/link"
)

// Config sizes a workload.
type Config struct {
	Links int    // backlinks written (N), at least 2
	Seed  uint64 // everything follows from it
	// MegaLinks is the number of links to the mega target; 0 means
	// min(1,000,000, Links/2).
	MegaLinks int
}

// MegaLinksMax is the default size of the mega target.
const MegaLinksMax = 1_000_000

// Rates of the model (see the package comment).
const (
	deleteP         = 0.10
	deleteSoonMean  = 2000 // stamps
	accountsPerLink = 20   // one account per this many links
	targetsPerLink  = 8    // one target per this many links
	targetZipfS     = 1.1
	activityZipfS   = 1.1
	activityZipfV   = 50
	authorZipfV     = 5
)

// Start is the time of stamp 0.
var Start = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

// TargetKind is what a target is.
type TargetKind uint8

const (
	TargetRecord  TargetKind = iota + 1 // an at-uri of a record
	TargetAccount                       // a bare DID
	TargetURL                           // an https URL, stored hashed
)

func (k TargetKind) String() string {
	switch k {
	case TargetRecord:
		return "record"
	case TargetAccount:
		return "account"
	case TargetURL:
		return "url"
	}
	return "unknown"
}

// Target is one link target.
type Target struct {
	ID   link.RecordID
	Kind TargetKind
	Text string // the at-uri, the DID, or the normalised URL
}

// Revocation is a delete of a source record.
type Revocation struct {
	link.Revocation
	// At: the revocation is written just before Links[At] (At ==
	// len(Links): after the last link).
	At int
	// The revoked record's links are Links[First : First+Count].
	First, Count int
}

// Workload is a generated workload and its bookkeeping.
type Workload struct {
	Config Config
	// Codec encodes and renders every string of the workload (its
	// Outlines are a link.MemOutlines, its PLC a *PLCMap).
	Codec *link.Codec
	// Links are the backlinks in write order (stamp order).
	Links []link.Backlink
	// LinkTarget[i] is the index in Targets of Links[i]'s target.
	LinkTarget []int32
	// Revocations in write order; their revs continue the stamps.
	Revocations []Revocation
	// Targets: Targets[Mega] is the mega target.
	Targets []Target
	Mega    int32
	// Accounts and Records are the numbers of accounts and of source
	// records created; Stamps the last stamp used.
	Accounts, Records int
	Stamps            uint64

	revoked   []bool  // by link
	live      []int32 // live links by target
	written   []int32 // links written by target
	liveLinks int
	// byTarget: the indexes of the links of target t are
	// byTargetIdx[byTargetOff[t]:byTargetOff[t+1]], in write order.
	byTargetOff []int32
	byTargetIdx []int32
}

// PLCMap is a link.PLC over a fixed set of did:plc identifiers.
type PLCMap struct {
	seq map[string]uint64
	did map[uint64]string
}

var _ link.PLC = (*PLCMap)(nil)

// NewPLCMap returns an empty map.
func NewPLCMap() *PLCMap { return &PLCMap{seq: map[string]uint64{}, did: map[uint64]string{}} }

// Add records that did's genesis operation has sequence number seq.
func (p *PLCMap) Add(did string, seq uint64) { p.seq[did] = seq; p.did[seq] = did }

// Seq implements link.PLC.
func (p *PLCMap) Seq(did string) (uint64, bool) { s, ok := p.seq[did]; return s, ok }

// DID implements link.PLC.
func (p *PLCMap) DID(seq uint64) (string, bool) { d, ok := p.did[seq]; return d, ok }

// Len is the number of DIDs in the map.
func (p *PLCMap) Len() int { return len(p.seq) }

type account struct {
	did   string
	field uint64 // encoded did field
	clock uint
}

// weighted picks indexes by weight.
type weighted struct {
	cum []float64
}

func newWeighted(ws []float64) weighted {
	w := weighted{cum: make([]float64, len(ws))}
	t := 0.0
	for i, x := range ws {
		t += x
		w.cum[i] = t
	}
	return w
}

func (w weighted) pick(r *rand.Rand) int {
	x := r.Float64() * w.cum[len(w.cum)-1]
	i, _ := slices.BinarySearch(w.cum, x)
	return min(i, len(w.cum)-1)
}

// zipfPool draws target indexes of one pool by Zipf popularity.
type zipfPool struct {
	targets []int32
	z       *rand.Zipf
}

func (p *zipfPool) draw() int32 {
	if len(p.targets) == 1 {
		return p.targets[0]
	}
	return p.targets[p.z.Uint64()]
}

// pending is a delete not yet written.
type pending struct {
	due, seq     uint64
	source       link.RecordID
	first, count int
}

type pendingHeap []pending

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type gen struct {
	r        *rand.Rand
	codec    *link.Codec
	plc      *PLCMap
	accounts []account
	w        *Workload
	seen     map[link.RecordID]bool
}

// Generate builds the workload of cfg.
func Generate(cfg Config) (*Workload, error) {
	if cfg.Links < 2 {
		return nil, errors.New("workload: at least 2 links")
	}
	if cfg.MegaLinks == 0 {
		cfg.MegaLinks = min(MegaLinksMax, cfg.Links/2)
	}
	if cfg.MegaLinks < 0 || cfg.MegaLinks > cfg.Links {
		return nil, fmt.Errorf("workload: %d mega links out of %d", cfg.MegaLinks, cfg.Links)
	}
	plc := NewPLCMap()
	g := &gen{
		r:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		codec: &link.Codec{Outlines: link.NewMemOutlines(), PLC: plc},
		plc:   plc,
		seen:  map[link.RecordID]bool{},
	}
	g.w = &Workload{Config: cfg, Codec: g.codec}
	if err := g.makeAccounts(max(cfg.Links/accountsPerLink, 64)); err != nil {
		return nil, err
	}
	pools, err := g.makeTargets(max(cfg.Links/targetsPerLink, 64))
	if err != nil {
		return nil, err
	}
	if err := g.stream(pools); err != nil {
		return nil, err
	}
	g.w.index()
	return g.w, nil
}

const base32Sort = "abcdefghijklmnopqrstuvwxyz234567"

func (g *gen) makeAccounts(n int) error {
	g.accounts = make([]account, n)
	usedSeq := map[uint64]bool{}
	usedDID := map[string]bool{}
	var b [24]byte
	for i := range g.accounts {
		a := &g.accounts[i]
		a.clock = uint(g.r.IntN(1024))
		switch x := g.r.Float64(); {
		case x < 0.02:
			a.did = fmt.Sprintf("did:web:%s%d.%s", words[g.r.IntN(len(words))], i, []string{"example.com", "blog.example.org", "pds.dev", "social.coop"}[g.r.IntN(4)])
		default:
			for {
				for j := range b {
					b[j] = base32Sort[g.r.IntN(32)]
				}
				a.did = "did:plc:" + string(b[:])
				if !usedDID[a.did] {
					break
				}
			}
			if x >= 0.03 { // 97%: known to the PLC directory
				for {
					seq := 1 + g.r.Uint64N(50_000_000)
					if !usedSeq[seq] {
						usedSeq[seq] = true
						g.plc.Add(a.did, seq)
						break
					}
				}
			}
		}
		usedDID[a.did] = true
		f, err := g.codec.DID(a.did, true)
		if err != nil {
			return err
		}
		a.field = f
	}
	g.w.Accounts = n
	return nil
}

func (g *gen) tid(micros int64, clock uint) (uint64, string) {
	t := syntax.NewTID(micros, clock)
	return t.Integer(), t.String()
}

// recordTarget makes a new record target of a collection by an author.
func (g *gen) recordTarget(author int, nsid string, micros int64) (Target, error) {
	a := &g.accounts[author]
	for {
		v, s := g.tid(micros, a.clock)
		col, err := g.codec.Collection(nsid, true)
		if err != nil {
			return Target{}, err
		}
		id := link.RecordID{RKey: v, Collection: col, DID: a.field}
		if g.seen[id] {
			micros++
			continue
		}
		g.seen[id] = true
		return Target{ID: id, Kind: TargetRecord, Text: "at://" + a.did + "/" + nsid + "/" + s}, nil
	}
}

func (g *gen) addTarget(t Target) int32 {
	g.w.Targets = append(g.w.Targets, t)
	return int32(len(g.w.Targets) - 1)
}

func (g *gen) newZipfPool(targets []int32) *zipfPool {
	p := &zipfPool{targets: targets}
	if len(targets) > 1 {
		p.z = rand.NewZipf(g.r, targetZipfS, 1, uint64(len(targets)-1))
	}
	return p
}

func (g *gen) makeTargets(n int) ([]*zipfPool, error) {
	startMicros := Start.UnixMicro()
	const week = int64(7 * 24 * time.Hour / time.Microsecond)
	authorPerm := g.r.Perm(len(g.accounts))
	authorZipf := rand.NewZipf(g.r, targetZipfS, authorZipfV, uint64(len(g.accounts)-1))

	// The mega target: a post of the most popular author, a day old.
	mega, err := g.recordTarget(authorPerm[0], "app.bsky.feed.post", startMicros-int64(24*time.Hour/time.Microsecond))
	if err != nil {
		return nil, err
	}
	g.w.Mega = g.addTarget(mega)

	pools := make([]*zipfPool, numPools)
	nRecords := int(float64(n) * shareRecords)
	var totalShare float64
	for _, rp := range recordPools {
		totalShare += rp.share
	}
	for _, rp := range recordPools {
		k := max(1, int(float64(nRecords)*rp.share/totalShare))
		idx := make([]int32, k)
		for i := range idx {
			author := authorPerm[authorZipf.Uint64()]
			t, err := g.recordTarget(author, rp.collection, startMicros-g.r.Int64N(week))
			if err != nil {
				return nil, err
			}
			idx[i] = g.addTarget(t)
		}
		pools[rp.pool] = g.newZipfPool(idx)
	}

	nAccounts := max(1, min(int(float64(n)*shareAccounts), len(g.accounts)))
	accPerm := g.r.Perm(len(g.accounts))
	idx := make([]int32, nAccounts)
	for i := range idx {
		a := &g.accounts[accPerm[i]]
		idx[i] = g.addTarget(Target{ID: link.RepoID(a.field), Kind: TargetAccount, Text: a.did})
	}
	pools[poolAccount] = g.newZipfPool(idx)

	nURLs := max(1, int(float64(n)*shareURLs))
	seenURL := map[string]bool{}
	idx = make([]int32, 0, nURLs)
	for len(idx) < nURLs {
		norm, err := link.NormalizeURL(g.url())
		if err != nil {
			return nil, fmt.Errorf("workload: generated URL: %w", err)
		}
		if seenURL[norm] {
			continue
		}
		seenURL[norm] = true
		idx = append(idx, g.addTarget(Target{ID: link.HashTarget(norm), Kind: TargetURL, Text: norm}))
	}
	pools[poolURL] = g.newZipfPool(idx)
	return pools, nil
}

const idChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func (g *gen) randID(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = idChars[g.r.IntN(len(idChars))]
	}
	return string(b)
}

func (g *gen) word() string { return words[g.r.IntN(len(words))] }

func (g *gen) slug() string {
	n := 2 + g.r.IntN(5)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = g.word()
	}
	return strings.Join(parts, "-")
}

// url returns a random https URL shaped like the links people post.
func (g *gen) url() string {
	host := urlHosts[g.r.IntN(len(urlHosts))]
	switch host {
	case "www.youtube.com":
		return "https://" + host + "/watch?v=" + g.randID(11)
	case "youtu.be":
		return "https://" + host + "/" + g.randID(11) + "?si=" + g.randID(16)
	case "github.com", "tangled.sh":
		return "https://" + host + "/" + g.word() + strconv.Itoa(g.r.IntN(100000)) + "/" + g.word()
	case "en.wikipedia.org":
		w := g.word()
		return "https://" + host + "/wiki/" + strings.ToUpper(w[:1]) + w[1:] + "_" + g.word() + "_" + strconv.Itoa(1900+g.r.IntN(126))
	case "arxiv.org":
		return fmt.Sprintf("https://%s/abs/25%02d.%05d", host, 1+g.r.IntN(12), g.r.IntN(100000))
	case "bsky.app":
		return "https://" + host + "/profile/" + g.word() + strconv.Itoa(g.r.IntN(100000)) + ".bsky.social/post/" + strings.ToLower(g.randID(13))
	case "open.spotify.com":
		return "https://" + host + "/track/" + g.randID(22)
	default:
		return fmt.Sprintf("https://%s/2025/%02d/%02d/%s-%d", host, 1+g.r.IntN(12), 1+g.r.IntN(28), g.slug(), g.r.IntN(1_000_000))
	}
}

// stream writes the links and revocations.
func (g *gen) stream(pools []*zipfPool) error {
	w := g.w
	n, megaN := w.Config.Links, w.Config.MegaLinks
	w.Links = make([]link.Backlink, 0, n)
	w.LinkTarget = make([]int32, 0, n)
	w.revoked = make([]bool, n)

	// Encoded collections and locations.
	colWeights := make([]float64, len(collections))
	colCode := make([]uint64, len(collections))
	locCode := make([][]link.Location, len(collections))
	for i, cs := range collections {
		colWeights[i] = cs.weight
		c, err := g.codec.Collection(cs.nsid, true)
		if err != nil {
			return err
		}
		colCode[i] = c
		for _, ls := range cs.links {
			l, err := g.codec.Location(ls.path, ls.strongRef, true)
			if err != nil {
				return err
			}
			locCode[i] = append(locCode[i], l)
		}
	}
	colPick := newWeighted(colWeights)
	choicePick := make([][]weighted, len(collections))
	for i, cs := range collections {
		for _, ls := range cs.links {
			ws := make([]float64, len(ls.to))
			for j, c := range ls.to {
				ws[j] = c.weight
			}
			choicePick[i] = append(choicePick[i], newWeighted(ws))
		}
	}
	megaWeights := make([]float64, len(megaLinks))
	megaCol := make([]uint64, len(megaLinks))
	megaLoc := make([]link.Location, len(megaLinks))
	for i, m := range megaLinks {
		megaWeights[i] = m.weight
		c, err := g.codec.Collection(m.collection, true)
		if err != nil {
			return err
		}
		l, err := g.codec.Location(m.path, m.strongRef, true)
		if err != nil {
			return err
		}
		megaCol[i], megaLoc[i] = c, l
	}
	megaPick := newWeighted(megaWeights)

	actPerm := g.r.Perm(len(g.accounts))
	actZipf := rand.NewZipf(g.r, activityZipfS, activityZipfV, uint64(len(g.accounts)-1))
	startMicros := Start.UnixMicro()

	var due pendingHeap
	var seq uint64
	stamp := uint64(0)
	megaDone := 0

	type out struct {
		target int32
		loc    link.Location
	}
	var outs []out
	var chosen []int32

	emitRecord := func(col uint64, acc int, outs []out) {
		a := &g.accounts[acc]
		micros := startMicros + int64(stamp)*1000 + g.r.Int64N(1000)
		rk, _ := g.tid(micros, a.clock)
		src := link.RecordID{RKey: rk, Collection: col, DID: a.field}
		first := len(w.Links)
		for _, o := range outs {
			w.Links = append(w.Links, link.Backlink{Target: w.Targets[o.target].ID, Source: src, Location: o.loc, SourceRev: stamp})
			w.LinkTarget = append(w.LinkTarget, o.target)
		}
		w.Records++
		if g.r.Float64() < deleteP {
			var delay uint64
			if g.r.IntN(2) == 0 {
				delay = 1 + uint64(g.r.ExpFloat64()*deleteSoonMean)
			} else {
				delay = 1 + g.r.Uint64N(uint64(n))
			}
			seq++
			heap.Push(&due, pending{due: stamp + delay, seq: seq, source: src, first: first, count: len(outs)})
		}
	}
	revoke := func(p pending) {
		w.Revocations = append(w.Revocations, Revocation{
			Revocation: link.Revocation{Source: p.source, Rev: stamp},
			At:         len(w.Links), First: p.first, Count: p.count,
		})
		for i := p.first; i < p.first+p.count; i++ {
			w.revoked[i] = true
		}
	}

	for len(w.Links) < n {
		stamp++
		if len(due) > 0 && due[0].due <= stamp {
			revoke(heap.Pop(&due).(pending))
			continue
		}
		done := len(w.Links)
		megaLeft := megaN - megaDone
		if megaLeft > 0 && (uint64(megaDone) < uint64(megaN)*uint64(done+1)/uint64(n) || n-done <= megaLeft) {
			k := megaPick.pick(g.r)
			emitRecord(megaCol[k], actPerm[actZipf.Uint64()], []out{{w.Mega, megaLoc[k]}})
			megaDone++
			continue
		}
		// A record with at least one link.
		var ci int
		for {
			ci = colPick.pick(g.r)
			cs := &collections[ci]
			outs, chosen = outs[:0], chosen[:0]
			for j := range cs.links {
				ls := &cs.links[j]
				chosen = append(chosen, -1)
				if ls.p < 1 && g.r.Float64() >= ls.p {
					continue
				}
				var t int32
				if ls.sameAs >= 0 && chosen[ls.sameAs] >= 0 && g.r.Float64() < ls.pSame {
					t = chosen[ls.sameAs]
				} else {
					t = pools[ls.to[choicePick[ci][j].pick(g.r)].pool].draw()
				}
				chosen[j] = t
				outs = append(outs, out{t, locCode[ci][j]})
			}
			if len(outs) > 0 {
				break
			}
		}
		if room := n - done - megaLeft; len(outs) > room {
			outs = outs[:room]
		}
		emitRecord(colCode[ci], actPerm[actZipf.Uint64()], outs)
	}
	for len(due) > 0 {
		stamp++
		revoke(heap.Pop(&due).(pending))
	}
	w.Stamps = stamp
	if megaDone != megaN {
		return fmt.Errorf("workload: %d mega links, want %d", megaDone, megaN)
	}
	return nil
}

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
