package simnet

// The world's operations: Step draws each from the seeded generator and
// applies it as one event of the log (a commit, an account or identity
// event).

import (
	"crypto"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/eddy-backlinks/eddy/ingest/event"
	"gitlab.com/yawning/secp256k1-voi/secec"
)

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
	ev.rev, ev.data = a.rev, a.data
	w.setHead(a, ev)
	if w.cfg.Verifiable {
		ev.proof = a.tree.appendProof(nil, ev.ops)
	}
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

// setHead makes a's commit of its current data and rev its head, and ev's
// (nil: a commit no event carries, the empty first one). A Verifiable
// world keeps the signed block (signing again costs ~0.1 ms); a plain one
// derives it again when it is served (signedOrDerived).
func (w *World) setHead(a *account, ev *simEvent) {
	var key *secec.PrivateKey
	if w.cfg.Verifiable {
		key = a.key
	}
	cb := commitBlock(key, a.did, a.data, a.rev)
	a.head = sumCID(cb)
	if w.cfg.Verifiable {
		a.commit = cb
		if ev != nil {
			ev.commit = cb
		}
	}
}

// signedOrDerived is the commit block of did at data and rev: kept (signed), or
// derived (unsigned worlds).
func signedOrDerived(kept []byte, did string, data dagCID, rev string) []byte {
	if kept != nil {
		return kept
	}
	return commitBlock(nil, did, data, rev)
}

// commitBlock encodes a repository commit (version 3) signed with key:
// ECDSA over SHA-256 of the unsigned commit's DAG-CBOR, compact [r|s]
// with low S, the nonce derived from the key and the digest (RFC 6979),
// so the same commit always has the same bytes. With no key the
// signature is 64 bytes derived from the unsigned commit (SHA-512): the
// right shape, verified by nothing.
func commitBlock(key *secec.PrivateKey, did string, data dagCID, rev string) []byte {
	// Canonical key order: did, rev, sig, data, prev, version.
	unsigned := make(cbor, 0, 160)
	unsigned = unsigned.mapHeader(5).text("did").text(did).text("rev").text(rev).
		text("data").link(data).text("prev").null().text("version").uint(3)
	var sig []byte
	if key == nil {
		s := sha512.Sum512(unsigned)
		sig = s[:]
	} else {
		digest := sha256.Sum256(unsigned)
		var err error
		sig, err = key.Sign(secec.RFC6979SHA256(), digest[:], &secec.ECDSAOptions{Hash: crypto.SHA256, Encoding: secec.EncodingCompact})
		if err != nil {
			panic("simnet: signing a commit: " + err.Error())
		}
	}
	b := make(cbor, 0, 240)
	return b.mapHeader(6).text("did").text(did).text("rev").text(rev).
		text("sig").bytes(sig).text("data").link(data).text("prev").null().text("version").uint(3)
}
