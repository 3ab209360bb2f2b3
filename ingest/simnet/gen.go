package simnet

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
	"github.com/mr-tron/base58"
	"gitlab.com/yawning/secp256k1-voi/secec"

	"github.com/eddy-backlinks/eddy/ingest/event"
)

// Record generators. Every record is built in the atproto data model as
// atdata decodes it (strings, int64, []any, map[string]any, atdata.Blob),
// so the links extracted from it are the links any decoder of its CBOR or
// JSON form yields.

var words = strings.Fields(`the a of and to in is it you that for on with this
	was are be at have not but what all were we when your can said there use
	an each which she do how their if will up other about out many then them
	these so some her would make like him into time has look two more write go
	see number no way could people my than first water been call who oil its
	now find long down day did get come made may part sky blue network protocol
	backlink index relay firehose feed post thread reply quote repost follow
	coffee cat dog morning night weekend music art code rust go garden rain sun
	café naïve 東京 día 🦋 ✨`)

func (w *World) words(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[w.rng.IntN(len(words))])
	}
	return b.String()
}

// ts is the simulated time as an atproto datetime.
func (w *World) ts() string {
	return time.UnixMicro(w.clock).UTC().Format("2006-01-02T15:04:05.000Z")
}

// signingKey draws a K-256 (secp256k1) private key from rng (32 bytes;
// drawn again in the astronomically rare case they are not a valid
// scalar) and returns it with its did:key. Commits are signed with it
// for real (commitBlock), so a verifier that checks signatures against
// the DID document, as Jetstream v2 does, accepts them.
func signingKey(rng *rand.Rand) (*secec.PrivateKey, string) {
	for {
		var b [32]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		k, err := secec.NewPrivateKey(b[:])
		if err != nil {
			continue
		}
		pub, err := atcrypto.ParsePublicBytesK256(k.PublicKey().CompressedBytes())
		if err != nil {
			panic("simnet: public key does not parse: " + err.Error())
		}
		return k, pub.DIDKey()
	}
}

// fakeDIDKey returns a did:key of the secp256k1 multicodec over 33 random
// bytes: well-formed, but not a point on the curve (the PLC rotation
// keys: nothing here signs PLC operations for real).
func fakeDIDKey(rng *rand.Rand) string {
	b := make([]byte, 35)
	b[0], b[1], b[2] = 0xe7, 0x01, 0x02
	for i := 3; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
	return "did:key:z" + base58.Encode(b)
}

// blob returns a blob reference to random (absent) bytes: a raw-codec CID.
func (w *World) blob(mime string) atdata.Blob {
	var seed [8]byte
	for i := range seed {
		seed[i] = byte(w.rng.Uint32())
	}
	d := sha256.Sum256(seed[:])
	c, err := cid.Cast(append([]byte{0x01, 0x55, 0x12, 0x20}, d[:]...))
	if err != nil {
		panic("simnet: " + err.Error())
	}
	return atdata.Blob{Ref: atdata.CIDLink(c), MimeType: mime, Size: 1000 + w.rng.Int64N(900_000)}
}

func strongRef(r ref) map[string]any { return map[string]any{"uri": r.uri, "cid": r.cid} }

// ---- link targets ----

// pickPost returns the index in w.posts of a post to link to, skewed: an
// early post by Zipf rank (the viral ones), or a recent post. There must
// be at least one post.
func (w *World) pickPost() int {
	n := len(w.posts)
	if n == 1 {
		return 0
	}
	if w.rng.IntN(100) < 45 {
		return int(rand.NewZipf(w.rng, 1.2, 8, uint64(n-1)).Uint64())
	}
	return n - 1 - w.rng.IntN(min(n, 3000))
}

// pickAccount returns an account other than a to link to, skewed towards
// low indices (the popular accounts).
func (w *World) pickAccount(a *account) *account {
	n := len(w.accounts)
	i := int(rand.NewZipf(w.rng, 1.2, 4, uint64(n-1)).Uint64())
	if i == a.idx && n > 1 {
		i = (i + 1) % n
	}
	return w.accounts[i]
}

// pickURL returns a URL to link to, spelled as a client might (see spell).
func (w *World) pickURL() string {
	return w.spell(w.urls[rand.NewZipf(w.rng, 1.1, 4, uint64(len(w.urls)-1)).Uint64()])
}

// spell returns u or, one time in ten, another spelling of it that Eddy
// normalises to the same target (upper-case scheme and host, the default
// port, a dot segment).
func (w *World) spell(u string) string {
	if w.rng.IntN(10) != 0 {
		return u
	}
	scheme, rest, _ := strings.Cut(u, "://")
	host, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	switch w.rng.IntN(3) {
	case 0:
		return strings.ToUpper(scheme) + "://" + strings.ToUpper(host) + path
	case 1:
		port := ":443"
		if scheme == "http" {
			port = ":80"
		}
		return scheme + "://" + host + port + path
	default:
		if strings.HasPrefix(path, "/") {
			return scheme + "://" + host + "/." + path
		}
		return u
	}
}

var urlHosts = []string{
	"www.youtube.com", "youtu.be", "github.com", "en.wikipedia.org",
	"ja.wikipedia.org", "www.nytimes.com", "bsky.app", "example.com",
	"news.ycombinator.com", "www.theguardian.com", "arxiv.org",
	"blog.example.org", "medium.com", "tangled.sh", "whtwnd.com",
	"docs.bsky.app", "www.reuters.com", "old.example.net",
}

// makeURLPool makes n distinct URLs; index 0 is the most popular.
func makeURLPool(rng *rand.Rand, n int) []string {
	out := make([]string, 0, n)
	seen := make(map[string]bool, n)
	for len(out) < n {
		host := urlHosts[rng.IntN(len(urlHosts))]
		var u string
		switch host {
		case "www.youtube.com":
			u = "https://" + host + "/watch?v=" + randToken(rng, 11)
		case "youtu.be":
			u = "https://" + host + "/" + randToken(rng, 11) + "?si=" + randToken(rng, 16)
		case "ja.wikipedia.org":
			u = "https://" + host + "/wiki/" + words[rng.IntN(len(words))] + "_" + randToken(rng, 4)
		case "old.example.net":
			u = "http://" + host + "/~" + randToken(rng, 5) + "/index.html"
		case "arxiv.org":
			u = fmt.Sprintf("https://%s/abs/%04d.%05d", host, 2000+rng.IntN(600), rng.IntN(100000))
		default:
			u = "https://" + host + "/" + randToken(rng, 6) + "/" + randToken(rng, 10)
		}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out
}

func randToken(rng *rand.Rand, n int) string {
	const alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	b := make([]byte, n)
	for i := range b {
		b[i] = alpha[rng.IntN(len(alpha))]
	}
	return string(b)
}

// ---- records ----

// Create mix, in parts per thousand.
var createMix = []struct {
	collection string
	weight     int
}{
	{"app.bsky.feed.like", 380},
	{"app.bsky.feed.post", 220},
	{"app.bsky.graph.follow", 160},
	{"app.bsky.feed.repost", 90},
	{"xyz.statusphere.status", 45},
	{"app.bsky.graph.listitem", 30},
	{"app.bsky.graph.block", 20},
	{"sh.tangled.feed.star", 20},
	{"com.whtwnd.blog.entry", 15},
	{"app.bsky.actor.profile", 10},
	{"app.bsky.graph.list", 5},
	{"sh.tangled.repo", 5},
}

// genCreate makes one new record for a (for the profile, once it exists,
// an update).
func (w *World) genCreate(a *account) pendingOp {
	r := w.rng.IntN(1000)
	coll := createMix[0].collection
	for _, m := range createMix {
		if r < m.weight {
			coll = m.collection
			break
		}
		r -= m.weight
	}
	// Fall back when the target kind does not exist yet.
	switch {
	case (coll == "app.bsky.feed.like" || coll == "app.bsky.feed.repost") && len(w.posts) == 0:
		coll = "app.bsky.feed.post"
	case coll == "sh.tangled.feed.star" && len(w.tangled) == 0:
		coll = "sh.tangled.repo"
	case coll == "app.bsky.graph.listitem" && len(a.lists) == 0:
		coll = "app.bsky.graph.list"
	}
	op := pendingOp{action: event.ActionCreate, collection: coll}
	if coll == "app.bsky.actor.profile" {
		op.rkey = "self"
		if _, ok := a.records["app.bsky.actor.profile/self"]; ok {
			op.action = event.ActionUpdate
		}
		op.rec = w.genProfile(a)
		return op
	}
	op.rkey = w.tid(a)
	switch coll {
	case "app.bsky.feed.post":
		op.rec, op.root = w.genPost(a, true)
	case "app.bsky.feed.like", "app.bsky.feed.repost":
		op.rec = map[string]any{"$type": coll, "createdAt": w.ts(), "subject": strongRef(w.posts[w.pickPost()])}
	case "app.bsky.graph.follow", "app.bsky.graph.block":
		op.rec = w.genSubjectDID(a, coll)
	case "app.bsky.graph.list":
		op.rec = map[string]any{"$type": coll, "createdAt": w.ts(), "name": w.words(2),
			"purpose": "app.bsky.graph.defs#curatelist", "description": w.words(6)}
	case "app.bsky.graph.listitem":
		op.rec = map[string]any{"$type": coll, "createdAt": w.ts(), "subject": w.pickAccount(a).did,
			"list": a.lists[w.rng.IntN(len(a.lists))].uri}
	case "sh.tangled.repo":
		op.rec = map[string]any{"$type": coll, "createdAt": w.ts(), "name": randToken(w.rng, 8), "knot": "knot1.tangled.sh"}
	case "sh.tangled.feed.star":
		i := int(rand.NewZipf(w.rng, 1.3, 2, uint64(len(w.tangled)-1)).Uint64())
		op.rec = map[string]any{"$type": coll, "createdAt": w.ts(), "subject": w.tangled[i].uri}
	case "com.whtwnd.blog.entry":
		u := w.pickURL()
		op.rec = map[string]any{"$type": coll, "createdAt": w.ts(), "title": w.words(4), "visibility": "public",
			// A URL inside text is not a link; ogp.url is.
			"content": w.words(20) + " see " + w.pickURL() + " " + w.words(10),
			"ogp":     map[string]any{"url": u, "width": int64(1200), "height": int64(630)}}
	case "xyz.statusphere.status":
		op.rec = map[string]any{"$type": coll, "createdAt": w.ts(), "status": words[len(words)-1-w.rng.IntN(2)]}
	}
	return op
}

// genMega makes a record that links to the mega target.
func (w *World) genMega(a *account) pendingOp {
	op := pendingOp{action: event.ActionCreate, rkey: w.tid(a)}
	r := w.rng.IntN(100)
	switch w.cfg.Mega {
	case MegaAccount:
		mega := w.accounts[0]
		switch {
		case r < 80:
			op.collection = "app.bsky.graph.follow"
		case r < 90:
			op.collection = "app.bsky.graph.block"
		default:
			op.collection = "app.bsky.feed.post"
			op.rec, op.root = w.genPost(a, true)
			facet := map[string]any{
				"index":    map[string]any{"byteStart": int64(0), "byteEnd": int64(1 + len(mega.handle))},
				"features": []any{map[string]any{"$type": "app.bsky.richtext.facet#mention", "did": mega.did}},
			}
			op.rec["text"] = "@" + mega.handle + " " + op.rec["text"].(string)
			op.rec["facets"] = []any{facet}
			return op
		}
		op.rec = map[string]any{"$type": op.collection, "createdAt": w.ts(), "subject": mega.did}
	case MegaURL:
		if r < 80 {
			op.collection = "app.bsky.feed.post"
			op.rec, op.root = w.genPost(a, true)
			op.rec["embed"] = map[string]any{"$type": "app.bsky.embed.external", "external": map[string]any{
				"uri": w.spell(megaURL), "title": w.words(5), "description": w.words(12)}}
		} else {
			op.collection = "com.whtwnd.blog.entry"
			op.rec = map[string]any{"$type": op.collection, "createdAt": w.ts(), "title": w.words(4), "visibility": "public",
				"content": w.words(20), "ogp": map[string]any{"url": w.spell(megaURL)}}
		}
	default:
		mega := strongRef(w.posts[w.megaPost])
		switch {
		case r < 75:
			op.collection = "app.bsky.feed.like"
		case r < 90:
			op.collection = "app.bsky.feed.repost"
		default:
			op.collection = "app.bsky.feed.post"
			op.rec, op.root = w.genPost(a, false)
			op.rec["reply"] = map[string]any{"root": mega, "parent": mega}
			op.root = int32(w.megaPost) + 1
			return op
		}
		op.rec = map[string]any{"$type": op.collection, "createdAt": w.ts(), "subject": mega}
	}
	return op
}

func (w *World) genSubjectDID(a *account, coll string) map[string]any {
	return map[string]any{"$type": coll, "createdAt": w.ts(), "subject": w.pickAccount(a).did}
}

func (w *World) genProfile(a *account) map[string]any {
	rec := map[string]any{"$type": "app.bsky.actor.profile", "createdAt": w.ts(),
		"displayName": w.words(2), "description": w.words(8)}
	if w.rng.IntN(2) == 0 {
		rec["avatar"] = w.blob("image/jpeg")
	}
	if a.lastPost >= 0 && w.rng.IntN(10) < 3 {
		rec["pinnedPost"] = strongRef(w.posts[a.lastPost])
	}
	return rec
}

// genPost makes a post: maybe a reply (when reply is set), maybe with an
// embed (quote, link card, images, quote with images) and facets (links,
// mentions, tags). root is 1 + the index of a reply's thread root, or 0.
func (w *World) genPost(a *account, reply bool) (rec map[string]any, root int32) {
	rec = map[string]any{"$type": "app.bsky.feed.post", "createdAt": w.ts(), "langs": []any{"en"}}
	if reply && len(w.posts) > 0 && w.rng.IntN(100) < 30 {
		p := w.posts[w.pickPost()]
		rec["reply"] = map[string]any{"root": strongRef(w.posts[p.root]), "parent": strongRef(p)}
		root = p.root + 1
	}
	w.postBody(a, rec)
	return rec, root
}

// postBody sets a post's text, facets and embed.
func (w *World) postBody(a *account, rec map[string]any) {
	text := w.words(3 + w.rng.IntN(12))
	var facets []any
	addFacet := func(display string, feature map[string]any) {
		text += " "
		start := len(text)
		text += display
		facets = append(facets, map[string]any{
			"index":    map[string]any{"byteStart": int64(start), "byteEnd": int64(len(text))},
			"features": []any{feature},
		})
	}
	if w.rng.IntN(100) < 15 {
		for i := 0; i <= w.rng.IntN(2); i++ {
			u := w.pickURL()
			display := u[strings.Index(u, "://")+3:]
			if len(display) > 24 {
				cut := 21
				for !utf8.RuneStart(display[cut]) {
					cut--
				}
				display = display[:cut] + "..."
			}
			addFacet(display, map[string]any{"$type": "app.bsky.richtext.facet#link", "uri": u})
		}
	}
	if w.rng.IntN(100) < 12 {
		for i := 0; i <= w.rng.IntN(2); i++ {
			m := w.pickAccount(a)
			addFacet("@"+m.handle, map[string]any{"$type": "app.bsky.richtext.facet#mention", "did": m.did})
		}
	}
	if w.rng.IntN(100) < 5 {
		tag := words[w.rng.IntN(len(words))]
		addFacet("#"+tag, map[string]any{"$type": "app.bsky.richtext.facet#tag", "tag": tag})
	}
	rec["text"] = text
	if facets != nil {
		rec["facets"] = facets
	}
	images := func() map[string]any {
		return map[string]any{"$type": "app.bsky.embed.images", "images": []any{map[string]any{
			"alt": w.words(3), "image": w.blob("image/jpeg"),
			"aspectRatio": map[string]any{"width": int64(1000 + w.rng.IntN(1000)), "height": int64(1000)},
		}}}
	}
	switch r := w.rng.IntN(100); {
	case r < 10 && len(w.posts) > 0:
		rec["embed"] = map[string]any{"$type": "app.bsky.embed.record", "record": strongRef(w.posts[w.pickPost()])}
	case r < 22:
		rec["embed"] = map[string]any{"$type": "app.bsky.embed.external", "external": map[string]any{
			"uri": w.pickURL(), "title": w.words(5), "description": w.words(12)}}
	case r < 30:
		rec["embed"] = images()
	case r < 33 && len(w.posts) > 0:
		rec["embed"] = map[string]any{"$type": "app.bsky.embed.recordWithMedia",
			"record": map[string]any{"$type": "app.bsky.embed.record", "record": strongRef(w.posts[w.pickPost()])},
			"media":  images()}
	}
}

// editPost returns a new version of post r: new text, facets and embed;
// the same thread position and createdAt.
func (w *World) editPost(a *account, r *record) map[string]any {
	old, err := atdata.UnmarshalCBOR(r.ver.cbor)
	if err != nil {
		panic("simnet: own record does not decode: " + err.Error())
	}
	rec := map[string]any{"$type": "app.bsky.feed.post", "createdAt": old["createdAt"], "langs": []any{"en"}}
	if rp, ok := old["reply"]; ok {
		rec["reply"] = rp
	}
	w.postBody(a, rec)
	return rec
}
