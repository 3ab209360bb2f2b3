package workload

// The shape of the network: which collections write links, where in their
// records, and to what kind of target. Weights are relative shares of
// records (not links); they follow the mix of the live network closely
// enough for compression and query costs (likes dominate, then follows,
// posts, reposts, blocks, list items; a long tail of other lexicons).

// pool names a set of targets of one kind.
type pool uint8

const (
	poolPost pool = iota // app.bsky.feed.post records
	poolRepost
	poolFeedGen
	poolList
	poolStarterPack
	poolTangledRepo
	poolLeafletPub
	poolWhtwndEntry
	poolFrontpagePost
	poolCalendarEvent
	poolSmokesignalEvent
	poolAccount // bare DIDs
	poolURL     // https URLs (hashed targets)
	numPools
)

// recordPools are the pools of record targets: their collection and their
// share of the record targets.
var recordPools = []struct {
	pool       pool
	collection string
	share      float64
}{
	{poolPost, "app.bsky.feed.post", 88},
	{poolRepost, "app.bsky.feed.repost", 4},
	{poolFeedGen, "app.bsky.feed.generator", 1},
	{poolList, "app.bsky.graph.list", 2},
	{poolStarterPack, "app.bsky.graph.starterpack", 1},
	{poolTangledRepo, "sh.tangled.repo", 1},
	{poolLeafletPub, "pub.leaflet.publication", 0.5},
	{poolWhtwndEntry, "com.whtwnd.blog.entry", 1},
	{poolFrontpagePost, "fyi.unravel.frontpage.post", 0.5},
	{poolCalendarEvent, "community.lexicon.calendar.event", 0.5},
	{poolSmokesignalEvent, "events.smokesignal.calendar.event", 0.5},
}

// Shares of all targets by kind (the mega target aside).
const (
	shareRecords  = 0.70
	shareAccounts = 0.20
	shareURLs     = 0.10
)

// choice is a weighted pool.
type choice struct {
	pool   pool
	weight float64
}

// linkSpec is one link a record of a collection may hold.
type linkSpec struct {
	path      string  // Constellation's path
	strongRef bool    // the uri of a strong reference {uri, cid}
	p         float64 // probability that a record holds it
	to        []choice
	// sameAs, if >= 0, is the index of an earlier spec of the collection
	// whose target this link reuses with probability pSame (a reply's
	// root is often its parent).
	sameAs int
	pSame  float64
}

// collectionSpec is one source collection.
type collectionSpec struct {
	nsid   string
	weight float64
	links  []linkSpec
}

func one(p pool) []choice { return []choice{{p, 1}} }

func spec(path string, strongRef bool, p float64, to []choice) linkSpec {
	return linkSpec{path: path, strongRef: strongRef, p: p, to: to, sameAs: -1}
}

var likeTargets = []choice{
	{poolPost, 95.5}, {poolFeedGen, 1.5}, {poolList, 0.3}, {poolStarterPack, 0.3},
	{poolWhtwndEntry, 1}, {poolLeafletPub, 0.4}, {poolRepost, 1},
}

// collections is the source mix. A record always holds at least one link:
// a record whose draws give none draws again.
var collections = []collectionSpec{
	{"app.bsky.feed.like", 55, []linkSpec{
		spec(".subject.uri", true, 1, likeTargets),
		spec(".via.uri", true, 0.06, one(poolRepost)),
	}},
	{"app.bsky.feed.repost", 8, []linkSpec{
		spec(".subject.uri", true, 1, one(poolPost)),
		spec(".via.uri", true, 0.04, one(poolRepost)),
	}},
	{"app.bsky.graph.follow", 12, []linkSpec{
		spec(".subject", false, 1, one(poolAccount)),
	}},
	{"app.bsky.feed.post", 12, []linkSpec{
		spec(".reply.parent.uri", true, 0.45, one(poolPost)),
		{path: ".reply.root.uri", strongRef: true, p: 0.45, to: one(poolPost), sameAs: 0, pSame: 0.5},
		spec(".embed.record.uri", true, 0.06, one(poolPost)),
		spec(".embed.record.record.uri", true, 0.02, one(poolPost)),
		spec(".embed.external.uri", false, 0.07, one(poolURL)),
		spec(".facets[].features[app.bsky.richtext.facet#link].uri", false, 0.08, one(poolURL)),
		spec(".facets[].features[app.bsky.richtext.facet#mention].did", false, 0.10, one(poolAccount)),
	}},
	{"app.bsky.graph.block", 4, []linkSpec{
		spec(".subject", false, 1, one(poolAccount)),
	}},
	{"app.bsky.graph.listitem", 3, []linkSpec{
		spec(".subject", false, 1, one(poolAccount)),
		spec(".list", false, 1, one(poolList)),
	}},
	{"app.bsky.graph.listblock", 0.2, []linkSpec{
		spec(".subject", false, 1, one(poolList)),
	}},
	{"app.bsky.feed.threadgate", 0.6, []linkSpec{
		spec(".post", false, 1, one(poolPost)),
		spec(".allow[app.bsky.feed.threadgate#listRule].list", false, 0.1, one(poolList)),
		spec(".hiddenReplies[]", false, 0.05, one(poolPost)),
	}},
	{"app.bsky.feed.postgate", 0.3, []linkSpec{
		spec(".post", false, 1, one(poolPost)),
		spec(".detachedEmbeddingUris[]", false, 0.2, one(poolPost)),
	}},
	{"app.bsky.graph.starterpack", 0.05, []linkSpec{
		spec(".list", false, 1, one(poolList)),
		spec(".feeds[].uri", false, 0.3, one(poolFeedGen)),
	}},
	{"app.bsky.actor.profile", 0.4, []linkSpec{
		spec(".pinnedPost.uri", true, 0.5, one(poolPost)),
		spec(".joinedViaStarterPack.uri", true, 0.3, one(poolStarterPack)),
	}},
	{"app.bsky.graph.verification", 0.03, []linkSpec{
		spec(".subject", false, 1, one(poolAccount)),
	}},
	{"app.bsky.feed.generator", 0.02, []linkSpec{
		spec(".did", false, 1, one(poolAccount)),
	}},
	{"sh.tangled.feed.star", 0.2, []linkSpec{
		spec(".subject", false, 1, one(poolTangledRepo)),
	}},
	{"sh.tangled.graph.follow", 0.1, []linkSpec{
		spec(".subject", false, 1, one(poolAccount)),
	}},
	{"sh.tangled.repo.issue", 0.05, []linkSpec{
		spec(".repo", false, 1, one(poolTangledRepo)),
	}},
	{"sh.tangled.repo.pull", 0.03, []linkSpec{
		spec(".targetRepo", false, 1, one(poolTangledRepo)),
	}},
	{"sh.tangled.knot.member", 0.01, []linkSpec{
		spec(".subject", false, 1, one(poolAccount)),
	}},
	{"pub.leaflet.document", 0.05, []linkSpec{
		spec(".publication", false, 1, one(poolLeafletPub)),
		spec(".author", false, 0.5, one(poolAccount)),
	}},
	{"pub.leaflet.graph.subscription", 0.1, []linkSpec{
		spec(".publication", false, 1, one(poolLeafletPub)),
	}},
	{"com.whtwnd.blog.entry", 0.02, []linkSpec{
		spec(".ogp.url", false, 0.3, one(poolURL)),
		spec(".blobs[].url", false, 0.1, one(poolURL)),
	}},
	{"fyi.unravel.frontpage.vote", 0.05, []linkSpec{
		spec(".subject.uri", true, 1, []choice{{poolFrontpagePost, 1}}),
	}},
	{"fyi.unravel.frontpage.post", 0.02, []linkSpec{
		spec(".url", false, 1, one(poolURL)),
	}},
	{"community.lexicon.calendar.rsvp", 0.03, []linkSpec{
		spec(".subject.uri", true, 1, one(poolCalendarEvent)),
	}},
	{"events.smokesignal.calendar.rsvp", 0.02, []linkSpec{
		spec(".subject.uri", true, 1, one(poolSmokesignalEvent)),
	}},
	{"place.stream.chat.message", 0.3, []linkSpec{
		spec(".streamer", false, 1, one(poolAccount)),
		spec(".facets[].features[app.bsky.richtext.facet#mention].did", false, 0.05, one(poolAccount)),
	}},
	{"blue.linkat.board", 0.01, []linkSpec{
		spec(".cards[].url", false, 1, one(poolURL)),
	}},
}

// Links to the mega target: one link each.
var megaLinks = []struct {
	collection string
	path       string
	strongRef  bool
	weight     float64
}{
	{"app.bsky.feed.like", ".subject.uri", true, 87},
	{"app.bsky.feed.repost", ".subject.uri", true, 10},
	{"app.bsky.feed.post", ".embed.record.uri", true, 3},
}

// urlShapes make realistic https URLs; %s is filled with random words
// and ids.
var urlHosts = []string{
	"www.youtube.com", "youtu.be", "github.com", "en.wikipedia.org", "www.nytimes.com",
	"www.theguardian.com", "substack.com", "open.spotify.com", "www.twitch.tv", "bsky.app",
	"www.washingtonpost.com", "arxiv.org", "www.bbc.co.uk", "medium.com", "www.reddit.com",
	"news.ycombinator.com", "www.instagram.com", "tangled.sh", "leaflet.pub", "whtwnd.com",
}

var words = []string{
	"atproto", "backlinks", "federation", "protocol", "garden", "river", "election", "climate",
	"music", "science", "open", "source", "design", "rust", "golang", "policy", "weather",
	"football", "art", "photo", "review", "news", "update", "release", "notes", "index",
}
