package simnet

// The world's state (accounts, repositories, identity, the event log) and
// its creation; its operations are in step.go, read access and the model
// in model.go.

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"gitlab.com/yawning/secp256k1-voi/secec"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
)

// Account statuses, as the firehose's #account events and listRepos spell
// them. An active account has status "".
const (
	StatusActive      = ""
	StatusDeactivated = "deactivated"
	StatusTakendown   = "takendown"
	StatusDeleted     = "deleted"
)

// MegaKind says what the world's mega target is.
type MegaKind uint8

const (
	// MegaPost: the first post of the first account (created before any
	// step), liked, reposted, replied to and quoted.
	MegaPost MegaKind = iota
	// MegaAccount: the first account's DID, followed, blocked, mentioned
	// and listed.
	MegaAccount
	// MegaURL: an https URL, linked from posts' link cards and facets and
	// from blog entries.
	MegaURL
)

// Config configures a World. The zero value of each field selects its
// default.
type Config struct {
	Seed int64
	// Accounts is the number of accounts, all created before the first
	// step (default 200). Account 0 is the mega account: it is never
	// deactivated, taken down or deleted.
	Accounts int
	// PDSes is the number of PDS hosts the accounts are spread over
	// (default 2).
	PDSes int
	// WebPercent is the share of accounts with a did:web DID, in percent
	// (default 3; negative for none). The others are did:plc.
	WebPercent int
	// Mega is the kind of the mega target; MegaShare the share of record
	// creates that link to it (default 0.02; negative for none), on top of
	// the links it gets as any other target (the mega post and account are
	// also the most popular by rank).
	Mega      MegaKind
	MegaShare float64
	// Start is the simulated time of the first event (default
	// 2026-01-01T00:00:00Z). Simulated time advances 1 µs to 1 ms per
	// event, never with the wall clock.
	Start time.Time
	// Verifiable makes the firehose pass a Sync 1.1 verifier (Jetstream
	// v2's, indigo's repo.VerifyCommitMessage): every commit is signed for
	// real with its account's K-256 key (the DID document's #atproto key)
	// and every #commit carries the MST nodes that prove its ops. Without
	// it a commit's signature is 64 bytes derived from the commit and the
	// CAR slice holds no MST nodes: the same world (the same records,
	// record CIDs, MST roots, revs and keys; other commit CIDs) built four times faster in a quarter of the
	// memory (TestScale: 7 s and 250 MiB against 30 s and 1 GiB).
	Verifiable bool
}

func (c *Config) defaults() {
	if c.Accounts <= 0 {
		c.Accounts = 200
	}
	if c.PDSes <= 0 {
		c.PDSes = 2
	}
	if c.WebPercent == 0 {
		c.WebPercent = 3
	}
	if c.WebPercent < 0 {
		c.WebPercent = 0
	}
	if c.MegaShare == 0 {
		c.MegaShare = 0.02
	}
	if c.MegaShare < 0 {
		c.MegaShare = 0
	}
	if c.Start.IsZero() {
		c.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
}

// Account is a snapshot of one account.
type Account struct {
	DID    string
	Handle string
	// PDS is the index of the PDS hosting the account (0 ≤ PDS <
	// Config.PDSes).
	PDS int
	// PLCSeq is the PLC directory sequence number of the DID's genesis
	// operation; 0 for did:web.
	PLCSeq int64
	Status string // StatusActive, StatusDeactivated, StatusTakendown or StatusDeleted
	Rev    string // revision (TID) of the repository's latest commit
	Head   string // CID of the latest commit
}

// Active reports whether the account is active.
func (a Account) Active() bool { return a.Status == StatusActive }

// Record is one record of a repository.
type Record struct {
	Collection string
	RKey       string
	CID        string
	CBOR       []byte // the record block; must not be modified
}

// URI returns the record's at-uri given its repository's DID.
func (r Record) URI(did string) string { return "at://" + did + "/" + r.Collection + "/" + r.RKey }

// LinkRef is one live link to a target: the linking record and the
// Constellation path of the link in it (extract.Link.Path).
type LinkRef struct {
	Source string // at-uri of the linking record
	Path   string
}

// version is one immutable version of a record.
type version struct {
	cid  dagCID
	cbor []byte
}

// mlink is one link of the model: a normalised target and a path.
type mlink struct{ target, path string }

type record struct {
	collection, rkey string
	ver              *version
	links            []mlink // distinct (target, path) pairs
	pos              int     // index in account.list
}

func (r *record) path() string { return r.collection + "/" + r.rkey }

type account struct {
	idx     int
	did     string
	handle  string
	web     bool
	pds     int
	plcSeq  int64
	plcHead dagCID
	key     *secec.PrivateKey // the repository's signing key
	sigKey  string            // its did:key (in the DID document)
	rotKey  string            // did:key of the (simulated) rotation key
	clockID uint
	status  string
	renames int

	records map[string]*record // by path
	list    []*record          // the same records, for random picks
	tree    mstTree
	rev     string
	data    dagCID // MST root of the latest commit
	head    dagCID // latest commit
	commit  []byte // latest commit's signed block (Verifiable worlds; else derived: signedOrDerived)

	lists    []ref // own app.bsky.graph.list records (ever created)
	lastPost int   // index in World.posts of the latest own post, -1 if none
}

// ref is a record that others may link to by strong reference.
type ref struct {
	uri  string
	cid  string
	root int32 // for posts: index of the thread root in World.posts (itself for a top-level post)
}

// World is a simulated atproto network: accounts, repositories, identity,
// and the log of every event in relay order. All methods are safe for
// concurrent use; servers (Serve) read while Step writes.
type World struct {
	mu  sync.RWMutex
	cfg Config
	rng *rand.Rand

	clock int64 // simulated time, µs since the epoch

	accounts []*account
	byDID    map[string]*account
	activity []int // account indices by activity rank (rank 0 posts most)

	events []*simEvent
	notify chan struct{} // closed and replaced when events are appended
	plc    []*plcOp

	posts   []ref    // every post ever created, in creation order
	tangled []ref    // every sh.tangled.repo record ever created
	urls    []string // URL pool, canonical spellings, by popularity rank

	megaTarget string
	megaPost   int // index in posts when Mega is MegaPost

	records int // records in repositories of accounts not deleted
	steps   int

	ex     extract.Extractor
	intern map[string]string
}

// NewWorld creates a world of cfg.Accounts accounts with empty
// repositories (and, for MegaPost, the mega post). Each account's creation
// is in the event log as an #identity and an #account event; each did:plc's
// genesis operation is in the PLC log.
func NewWorld(cfg Config) *World {
	cfg.defaults()
	w := &World{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed_51_4e7)),
		clock:    cfg.Start.UnixMicro(),
		byDID:    make(map[string]*account, cfg.Accounts),
		notify:   make(chan struct{}),
		intern:   make(map[string]string),
		megaPost: -1,
	}
	w.urls = makeURLPool(w.rng, 2000)
	for i := 0; i < cfg.Accounts; i++ {
		w.createAccount(i)
	}
	w.activity = w.rng.Perm(cfg.Accounts)
	switch cfg.Mega {
	case MegaAccount:
		w.megaTarget = w.accounts[0].did
	case MegaURL:
		w.megaTarget = megaURL
	default:
		a := w.accounts[0]
		rec, _ := w.genPost(a, false)
		w.commit(a, []pendingOp{{action: event.ActionCreate, collection: "app.bsky.feed.post", rkey: w.tid(a), rec: rec}})
		w.megaPost = a.lastPost
		w.megaTarget = w.posts[w.megaPost].uri
	}
	return w
}

const megaURL = "https://mega.example.com/"

// createAccount creates account i with its DID, handle and empty
// repository, and logs its creation.
func (w *World) createAccount(i int) {
	a := &account{
		idx:      i,
		pds:      w.rng.IntN(w.cfg.PDSes),
		clockID:  uint(w.rng.IntN(1024)),
		records:  make(map[string]*record),
		lastPost: -1,
	}
	a.key, a.sigKey = signingKey(w.rng)
	a.rotKey = fakeDIDKey(w.rng)
	now := w.tick()
	if i > 0 && w.rng.IntN(100) < w.cfg.WebPercent {
		a.web = true
		a.did = fmt.Sprintf("did:web:user%d.web.simnet.test", i)
		a.handle = fmt.Sprintf("user%d.web.simnet.test", i)
	} else {
		a.handle = fmt.Sprintf("user%d.%s", i, pdsHost(a.pds))
		op := w.newPLCOp(a, now, nil)
		a.did = op.did
		a.plcSeq = op.seq
	}
	// The empty repository's first commit, made when the account is
	// created; the firehose does not carry it (it has no ops).
	a.data = emptyMSTRoot
	a.rev = w.tid(a)
	w.setHead(a, nil)
	w.accounts = append(w.accounts, a)
	w.byDID[a.did] = a
	w.appendEvent(&simEvent{kind: evIdentity, did: a.did, handle: a.handle})
	w.appendEvent(&simEvent{kind: evAccount, did: a.did, active: true})
}

// pdsHost is the host name of PDS i in identities (handles, PLC
// operations): the servers substitute their real URLs.
func pdsHost(i int) string { return fmt.Sprintf("pds%d.simnet.test", i) }

// tick advances the simulated clock by 1 µs to 1 ms and returns it.
func (w *World) tick() int64 {
	w.clock += 1 + w.rng.Int64N(1000)
	return w.clock
}

// tid returns a fresh TID for account a: the simulated time advanced by
// one microsecond, so TIDs increase with simulated time.
func (w *World) tid(a *account) string {
	w.clock++
	return syntax.NewTID(w.clock, a.clockID).String()
}

func (w *World) str(s string) string {
	if v, ok := w.intern[s]; ok {
		return v
	}
	w.intern[s] = s
	return s
}
