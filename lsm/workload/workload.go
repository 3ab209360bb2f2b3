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
//
// # Streaming
//
// Generate holds every link (about 20M fit); NewStream (scalestream.go)
// writes a workload of any size op by op in memory O(accounts + sample):
// the network's history as a backfill (every repository whole at one
// stamp) then a live tail, or the live tail alone, and keeps exact live
// links for a sample of targets only (docs/scale.md).
package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

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
