// Package simnet is a deterministic simulated atproto network for tests
// and benchmarks. It is test support: the node binary never imports it.
//
// # The world
//
// NewWorld(Config{Seed: …}) creates Config.Accounts accounts (about 97%
// did:plc, each with a genesis operation and its sequence number in a PLC
// log; the rest did:web) spread over Config.PDSes PDS hosts, with empty
// repositories. World.Step(n) applies n random operations drawn from one
// seeded generator:
//
//   - record creates (most operations) of app.bsky.feed.post (replies with
//     strong refs reply.root/reply.parent, quotes embed.record, link cards
//     embed.external.uri, images, quotes with media, facets with
//     app.bsky.richtext.facet#link uris, #mention dids and #tag), .like and
//     .repost (strong-ref subject), app.bsky.graph.follow and .block (DID
//     subject), .list and .listitem, app.bsky.actor.profile (rkey "self",
//     pinnedPost), sh.tangled.repo and sh.tangled.feed.star (at-uri
//     subject), com.whtwnd.blog.entry (ogp.url, and URLs inside text, which
//     are not links) and xyz.statusphere.status (no links);
//   - batched creates (a starter-pack follow of 2 to 5 accounts in one
//     commit), updates of posts and profiles, deletes;
//   - account deactivations, takedowns, deletions and reactivations;
//   - handle changes (#identity; a new PLC operation for did:plc).
//
// Record keys are TIDs that increase with simulated time (the profile's is
// "self"). Link targets are skewed: Zipf-ranked popular posts, accounts and
// URLs, about one URL in ten spelled differently from its normal form
// (upper case, default port, dot segment), and a configurable mega target
// (Config.Mega: a post, an account or a URL) that Config.MegaShare of all
// record creates link to.
//
// # The model
//
// World.LiveLinks is the ground truth a backlink index must reproduce: for
// every target, normalised as Eddy normalises (package link), the set of
// live links (source at-uri, Constellation path). Links are found with
// package extract, so the model follows Eddy's extraction rules; which
// links are live is this package's own bookkeeping: a link is live while
// its source record exists and its account is active or deactivated.
// Deactivation keeps the links: the repository still exists and returns
// unchanged on reactivation (AppViews hide it meanwhile, a backlink index
// answers about the network's data). A takedown hides the links until a
// reactivation restores them (the repository is resynced unchanged); an
// account deletion removes them for good.
//
// # Serving
//
// Serve(world) starts, on 127.0.0.1, a PLC directory (GET /export, GET
// /<did>), the PDS hosts (com.atproto.sync.getRepo and friends), a relay
// (listRepos, getRepo, listHosts naming the relay itself as the one host,
// the subscribeRepos firehose) and a Jetstream instance
// (/subscribe, with compress=true using Jetstream's zstd dictionary).
// Streams replay the in-memory event log from a cursor and then follow
// Step live. World.WriteFirehose and World.WriteJetstream write the same
// streams to files ([u32 little-endian length][frame] and JSON lines).
//
// # Determinism
//
// The same Config and the same sequence of Step calls give byte-identical
// frames, Jetstream events, repository CARs and PLC operations. Served
// identity data is the one exception: PLC operations and DID documents
// name PDS hosts by logical endpoints (https://pds<i>.simnet.test) in the
// World and by their real 127.0.0.1 URLs when served, since ports differ
// between runs. did:web documents cannot be served at their real hosts;
// World.DIDDocument and Net.DIDDocument resolve them, the PLC server
// answers GET /did:web:… like a did:plc, and GET /.well-known/did.json
// with the did:web host in the Host header.
//
// # Simplifications
//
//   - Commits are signed for real only in a Verifiable world
//     (Config.Verifiable: K-256, the DID document's #atproto key), and
//     only there does a firehose #commit carry the MST nodes that prove its
//     ops (Sync 1.1); otherwise the signature is 64 bytes derived from the
//     commit and the CAR slice holds the commit and the new record blocks.
//     PLC operations' signatures and rotation keys are random bytes of the
//     right shape. Eddy verifies none of these; Jetstream v2 verifies
//     commits.
//   - Repositories are real (repository format v3, a correct MST whose root
//     is each commit's data).
//   - Accounts all exist before the first step; their creation is logged as
//     an #identity and an #account event each, but the empty first commit
//     of each repository is not (it has no ops). There are no #sync events:
//     reactivation is an #account event only, and Jetstream has no #sync.
//   - Only active accounts write; account 0 (the mega account) is never
//     deactivated, taken down or deleted, and the mega post never deleted.
//   - The getRepo errors are 400 {"error": "RepoNotFound" |
//     "RepoTakendown" | "RepoDeactivated"}, as the reference PDS answers.
//   - Simulated time advances 1 µs to 1 ms per event; Jetstream's time_us
//     is that time (plus the op's index within a commit), unique and
//     increasing. The firehose cursor is exclusive (events after seq N),
//     Jetstream's inclusive (events at or after time_us T).
package simnet
