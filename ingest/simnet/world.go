package simnet

import (
	"crypto/sha512"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/syntax"

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
	sigKey  string // did:key of the (simulated) signing key
	rotKey  string // did:key of the (simulated) rotation key
	clockID uint
	status  string
	renames int

	records map[string]*record // by path
	list    []*record          // the same records, for random picks
	tree    mstTree
	rev     string
	data    dagCID // MST root of the latest commit
	head    dagCID // latest commit

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
	a.sigKey = fakeDIDKey(w.rng)
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
	a.head = sumCID(commitBlock(a.did, a.data, a.rev))
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

// Step applies n random operations, each one event in the log: record
// creates (most), batched creates, updates of posts and profiles, deletes,
// account deactivations, takedowns, reactivations and deletions, and handle
// changes.
func (w *World) Step(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := len(w.events)
	for i := 0; i < n; i++ {
		w.step()
		w.steps++
	}
	if len(w.events) != before {
		close(w.notify)
		w.notify = make(chan struct{})
	}
}

// Operation mix, in parts per thousand.
const (
	pmCreate   = 849
	pmBatch    = 10
	pmUpdate   = 40
	pmDelete   = 80
	pmAccount  = 6
	pmIdentity = 15
)

func (w *World) step() {
	r := w.rng.IntN(1000)
	switch {
	case r < pmCreate:
	case r < pmCreate+pmBatch:
		if w.batchFollow() {
			return
		}
	case r < pmCreate+pmBatch+pmUpdate:
		if w.update() {
			return
		}
	case r < pmCreate+pmBatch+pmUpdate+pmDelete:
		if w.deleteRecord() {
			return
		}
	case r < pmCreate+pmBatch+pmUpdate+pmDelete+pmAccount:
		if w.accountEvent() {
			return
		}
	default:
		if w.identityEvent() {
			return
		}
	}
	w.create()
}

// pickAuthor returns an active account, skewed towards the most active.
func (w *World) pickAuthor() *account {
	z := rand.NewZipf(w.rng, 1.1, 4, uint64(len(w.accounts)-1))
	for try := 0; try < 8; try++ {
		a := w.accounts[w.activity[z.Uint64()]]
		if a.status == StatusActive {
			return a
		}
	}
	start := w.rng.IntN(len(w.accounts))
	for i := range w.accounts {
		a := w.accounts[(start+i)%len(w.accounts)]
		if a.status == StatusActive {
			return a
		}
	}
	return w.accounts[0] // the mega account is always active
}

func (w *World) create() {
	a := w.pickAuthor()
	var op pendingOp
	if w.rng.Float64() < w.cfg.MegaShare && !(w.cfg.Mega == MegaAccount && a.idx == 0) {
		op = w.genMega(a)
	} else {
		op = w.genCreate(a)
	}
	w.commit(a, []pendingOp{op})
}

// batchFollow follows several accounts in one commit, as following a
// starter pack does.
func (w *World) batchFollow() bool {
	a := w.pickAuthor()
	k := 2 + w.rng.IntN(4)
	ops := make([]pendingOp, 0, k)
	for i := 0; i < k; i++ {
		ops = append(ops, pendingOp{action: event.ActionCreate, collection: "app.bsky.graph.follow", rkey: w.tid(a), rec: w.genSubjectDID(a, "app.bsky.graph.follow")})
	}
	w.commit(a, ops)
	return true
}

// update rewrites a post or the profile of an active account.
func (w *World) update() bool {
	a := w.pickAuthor()
	if len(a.list) == 0 {
		return false
	}
	for try := 0; try < 8; try++ {
		r := a.list[w.rng.IntN(len(a.list))]
		var rec map[string]any
		switch r.collection {
		case "app.bsky.feed.post":
			if w.megaPost >= 0 && w.posts[w.megaPost].uri == "at://"+a.did+"/"+r.path() {
				continue
			}
			rec = w.editPost(a, r)
		case "app.bsky.actor.profile":
			rec = w.genProfile(a)
		default:
			continue
		}
		w.commit(a, []pendingOp{{action: event.ActionUpdate, collection: r.collection, rkey: r.rkey, rec: rec}})
		return true
	}
	return false
}

func (w *World) deleteRecord() bool {
	a := w.pickAuthor()
	if len(a.list) == 0 {
		return false
	}
	r := a.list[w.rng.IntN(len(a.list))]
	if w.megaPost >= 0 && w.posts[w.megaPost].uri == "at://"+a.did+"/"+r.path() {
		return false
	}
	w.commit(a, []pendingOp{{action: event.ActionDelete, collection: r.collection, rkey: r.rkey}})
	return true
}

// accountEvent changes the hosting status of an account other than the
// mega account: 40% of the time it reactivates a deactivated or taken-down
// account (when there is one); otherwise an active account is deactivated
// (50%), taken down (30%) or deleted (20%).
func (w *World) accountEvent() bool {
	n := len(w.accounts)
	if n < 2 {
		return false
	}
	if w.rng.IntN(10) < 4 {
		start := 1 + w.rng.IntN(n-1)
		for i := 0; i < n-1; i++ {
			a := w.accounts[1+(start-1+i)%(n-1)]
			if a.status == StatusDeactivated || a.status == StatusTakendown {
				w.setStatus(a, StatusActive)
				return true
			}
		}
	}
	for try := 0; try < 8; try++ {
		a := w.accounts[1+w.rng.IntN(n-1)]
		if a.status != StatusActive {
			continue
		}
		switch r := w.rng.IntN(10); {
		case r < 5:
			w.setStatus(a, StatusDeactivated)
		case r < 8:
			w.setStatus(a, StatusTakendown)
		default:
			w.setStatus(a, StatusDeleted)
		}
		return true
	}
	return false
}

func (w *World) setStatus(a *account, status string) {
	if status == StatusDeleted {
		w.records -= len(a.list)
		a.records = nil
		a.list = nil
		a.tree = mstTree{}
	}
	a.status = status
	w.tick()
	w.appendEvent(&simEvent{kind: evAccount, did: a.did, active: status == StatusActive, status: status})
}

// identityEvent gives an active or deactivated account a new handle (a
// new PLC operation for did:plc).
func (w *World) identityEvent() bool {
	for try := 0; try < 8; try++ {
		a := w.accounts[w.rng.IntN(len(w.accounts))]
		if a.status == StatusDeleted || a.status == StatusTakendown {
			continue
		}
		a.renames++
		now := w.tick()
		if a.web {
			a.handle = fmt.Sprintf("user%d-%d.web.simnet.test", a.idx, a.renames)
		} else {
			a.handle = fmt.Sprintf("user%d-%d.%s", a.idx, a.renames, pdsHost(a.pds))
			head := a.plcHead
			w.newPLCOp(a, now, &head)
		}
		w.appendEvent(&simEvent{kind: evIdentity, did: a.did, handle: a.handle})
		return true
	}
	return false
}

// pendingOp is one record operation about to be committed.
type pendingOp struct {
	action     event.Action
	collection string
	rkey       string
	rec        map[string]any // nil for deletes
	root       int32          // for a reply: 1 + index of its thread root in World.posts
}

// commit applies ops to a's repository as one commit and logs it.
func (w *World) commit(a *account, ops []pendingOp) {
	ev := &simEvent{kind: evCommit, did: a.did, since: a.rev, prevData: a.data}
	ev.ops = make([]simOp, 0, len(ops))
	for _, p := range ops {
		path := p.collection + "/" + p.rkey
		old := a.records[path]
		so := simOp{action: p.action, collection: w.str(p.collection), rkey: p.rkey}
		if old != nil {
			so.prev = old.ver
		}
		switch p.action {
		case event.ActionDelete:
			if old == nil {
				continue
			}
			a.tree.Delete(path)
			last := a.list[len(a.list)-1]
			a.list[old.pos] = last
			last.pos = old.pos
			a.list = a.list[:len(a.list)-1]
			delete(a.records, path)
			w.records--
		default:
			b, err := atdata.MarshalCBOR(p.rec)
			if err != nil {
				panic("simnet: generated record does not encode: " + err.Error())
			}
			v := &version{cid: sumCID(b), cbor: b}
			so.ver = v
			r := old
			if r == nil {
				r = &record{collection: so.collection, rkey: p.rkey, pos: len(a.list)}
				a.records[path] = r
				a.list = append(a.list, r)
				w.records++
				so.action = event.ActionCreate
			} else {
				so.action = event.ActionUpdate
			}
			r.ver = v
			r.links = w.links(p.rec)
			a.tree.Put(path, v.cid)
			if so.action == event.ActionCreate {
				w.noteRef(a, r, p.root)
			}
		}
		ev.ops = append(ev.ops, so)
	}
	a.data = a.tree.Root()
	a.rev = w.tid(a)
	a.head = sumCID(commitBlock(a.did, a.data, a.rev))
	ev.rev, ev.data = a.rev, a.data
	w.tick()
	w.appendEvent(ev)
}

// noteRef records a new post, list or tangled repo as a link target for
// later records. root is 1 + the index of a reply's thread root in
// w.posts, 0 for a post that starts a thread.
func (w *World) noteRef(a *account, r *record, root int32) {
	uri := "at://" + a.did + "/" + r.path()
	switch r.collection {
	case "app.bsky.feed.post":
		if root == 0 {
			root = int32(len(w.posts))
		} else {
			root--
		}
		w.posts = append(w.posts, ref{uri: uri, cid: r.ver.cid.String(), root: root})
		a.lastPost = len(w.posts) - 1
	case "app.bsky.graph.list":
		a.lists = append(a.lists, ref{uri: uri, cid: r.ver.cid.String()})
	case "sh.tangled.repo":
		w.tangled = append(w.tangled, ref{uri: uri, cid: r.ver.cid.String()})
	}
}

// links extracts rec's distinct (target, path) pairs with Eddy's rules.
func (w *World) links(rec map[string]any) []mlink {
	ls, _ := w.ex.Extract(rec)
	if len(ls) == 0 {
		return nil
	}
	out := make([]mlink, 0, len(ls))
	for _, l := range ls {
		m := mlink{target: w.str(l.Target.Norm), path: w.str(l.Path)}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// commitBlock encodes a signed repository commit (version 3). The
// signature is 64 bytes derived from the unsigned commit (SHA-512), not a
// real signature: nothing in Eddy verifies it.
func commitBlock(did string, data dagCID, rev string) []byte {
	// Canonical key order: did, rev, sig, data, prev, version.
	unsigned := make(cbor, 0, 160)
	unsigned = unsigned.mapHeader(5).text("did").text(did).text("rev").text(rev).
		text("data").link(data).text("prev").null().text("version").uint(3)
	sig := sha512.Sum512(unsigned)
	b := make(cbor, 0, 240)
	return b.mapHeader(6).text("did").text(did).text("rev").text(rev).
		text("sig").bytes(sig[:]).text("data").link(data).text("prev").null().text("version").uint(3)
}

// ---- Read access ----

// Config returns the configuration in effect (defaults filled in).
func (w *World) Config() Config { return w.cfg }

// Steps returns the number of operations applied by Step so far.
func (w *World) Steps() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.steps
}

// RecordCount returns the number of records in the repositories of
// accounts that are not deleted (taken-down and deactivated accounts'
// records count).
func (w *World) RecordCount() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.records
}

// Now returns the simulated time.
func (w *World) Now() time.Time {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return time.UnixMicro(w.clock).UTC()
}

func (a *account) snapshot() Account {
	return Account{DID: a.did, Handle: a.handle, PDS: a.pds, PLCSeq: a.plcSeq, Status: a.status, Rev: a.rev, Head: a.head.String()}
}

// Accounts returns every account, deleted ones included, in creation order.
func (w *World) Accounts() []Account {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]Account, len(w.accounts))
	for i, a := range w.accounts {
		out[i] = a.snapshot()
	}
	return out
}

// Account returns the account of did.
func (w *World) Account(did string) (Account, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	a, ok := w.byDID[did]
	if !ok {
		return Account{}, false
	}
	return a.snapshot(), true
}

// Records returns the current records of did's repository in MST (path)
// order: none for a deleted or unknown account. A deactivated or
// taken-down account keeps its records.
func (w *World) Records(did string) []Record {
	w.mu.RLock()
	defer w.mu.RUnlock()
	a, ok := w.byDID[did]
	if !ok {
		return nil
	}
	out := make([]Record, 0, len(a.list))
	for _, r := range a.list {
		out = append(out, Record{Collection: r.collection, RKey: r.rkey, CID: r.ver.cid.String(), CBOR: r.ver.cbor})
	}
	slices.SortFunc(out, func(x, y Record) int {
		return strings.Compare(x.Collection+"/"+x.RKey, y.Collection+"/"+y.RKey)
	})
	return out
}

// Mega returns the mega target, normalised.
func (w *World) Mega() string { return w.megaTarget }

// linkLive says whether the records of an account in this status are live
// links: only an active account's. A deactivated or taken-down account's
// repository is not served (getRepo answers RepoDeactivated or
// RepoTakendown, AppViews hide it), so no index can know its records; its
// links come back when a reactivation restores the repository. Deleted
// accounts' are gone for good.
func linkLive(status string) bool {
	return status == StatusActive
}

// LiveLinks returns THE MODEL: for every normalised target (at-uri, DID or
// URL, as link.ParseTarget spells it) the set of live links to it, sorted
// by source then path. A link is live when its source record exists and
// its account is active (see linkLive). Links are found
// with package extract; a record linking one target twice at one path
// counts once.
func (w *World) LiveLinks() map[string][]LinkRef {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make(map[string][]LinkRef)
	for _, a := range w.accounts {
		if !linkLive(a.status) {
			continue
		}
		for _, r := range a.list {
			if len(r.links) == 0 {
				continue
			}
			src := "at://" + a.did + "/" + r.path()
			for _, l := range r.links {
				out[l.target] = append(out[l.target], LinkRef{Source: src, Path: l.path})
			}
		}
	}
	for _, refs := range out {
		slices.SortFunc(refs, func(x, y LinkRef) int {
			if c := strings.Compare(x.Source, y.Source); c != 0 {
				return c
			}
			return strings.Compare(x.Path, y.Path)
		})
	}
	return out
}

// Targets returns every target with at least one live link, sorted.
func (w *World) Targets() []string {
	ll := w.LiveLinks()
	out := make([]string, 0, len(ll))
	for t := range ll {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
