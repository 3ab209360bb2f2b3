// Package extracttest builds records for tests of extraction and of the
// whole index: records shaped like real ones, with the links they carry
// written out independently of the extractor.
package extracttest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Link is a link a test record carries: its path in Constellation's
// convention and its target as the index stores it (normalised).
type Link struct {
	Path      string
	Target    string
	StrongRef bool
}

// Leaflet's lexicon names (pub.leaflet.*), as real documents carry them.
const (
	leafletDocument = "pub.leaflet.document"
	leafletLinear   = "pub.leaflet.pages.linearDocument"
	leafletBlock    = "pub.leaflet.pages.linearDocument#block"
	leafletList     = "pub.leaflet.blocks.unorderedList"
	leafletListItem = "pub.leaflet.blocks.unorderedList#listItem"
	leafletText     = "pub.leaflet.blocks.text"
	leafletWebsite  = "pub.leaflet.blocks.website"
	leafletBskyPost = "pub.leaflet.blocks.bskyPost"
	leafletFacet    = "pub.leaflet.richtext.facet"
	leafletLink     = "pub.leaflet.richtext.facet#link"
	leafletDID      = "pub.leaflet.richtext.facet#didMention"
	leafletAtURI    = "pub.leaflet.richtext.facet#atMention"
)

// LeafletDocument returns a pub.leaflet.document by author whose one page
// holds a website block, a Bluesky post block and an unordered list nested
// depth levels deep, each list item's text carrying a link, a DID mention
// and an at-uri mention (the shape of real Leaflet posts with nested
// bullet lists, whose paths are the longest seen on the network), as
// record JSON, with every link it carries. tag makes its targets unique to
// one document.
func LeafletDocument(author, publication, tag string, depth int) ([]byte, []Link) {
	var links []Link
	add := func(path, target string, strong bool) {
		links = append(links, Link{Path: path, Target: target, StrongRef: strong})
	}
	page := ".pages[" + leafletLinear + "].blocks[" + leafletBlock + "].block"

	site := fmt.Sprintf("https://example.com/%s/site", tag)
	add(page+".src", site, false)
	post := fmt.Sprintf("at://%s/app.bsky.feed.post/3lqzyxwvuts2%c", author, 'a'+len(tag)%26)
	add(page+".postRef.uri", post, true)

	// The list, from its deepest item up.
	var item map[string]any
	for level := depth; level >= 1; level-- {
		path := page + strings.Repeat(".children["+leafletListItem+"]", level) + ".content.facets[" + leafletFacet + "].features"
		uri := fmt.Sprintf("https://example.com/%s/level/%d", tag, level)
		did := fmt.Sprintf("did:web:%s-level-%d.example.com", tag, level)
		at := fmt.Sprintf("at://%s/pub.leaflet.document/%s-level-%d", author, tag, level)
		add(path+"["+leafletLink+"].uri", uri, false)
		add(path+"["+leafletDID+"].did", did, false)
		add(path+"["+leafletAtURI+"].atURI", at, false)
		text := fmt.Sprintf("level %d: a link, a mention and a document", level)
		it := map[string]any{
			"$type": leafletListItem,
			"content": map[string]any{
				"$type":     leafletText,
				"plaintext": text,
				"facets": []any{map[string]any{
					"$type": leafletFacet,
					"index": map[string]any{"byteStart": 9, "byteEnd": 15},
					"features": []any{
						map[string]any{"$type": leafletLink, "uri": uri},
						map[string]any{"$type": leafletDID, "did": did},
						map[string]any{"$type": leafletAtURI, "atURI": at},
					},
				}},
			},
			"children": []any{},
		}
		if item != nil {
			it["children"] = []any{item}
		}
		item = it
	}
	blocks := []any{
		map[string]any{"$type": leafletBlock, "block": map[string]any{"$type": leafletWebsite, "src": site, "title": "a site"}},
		map[string]any{"$type": leafletBlock, "block": map[string]any{"$type": leafletBskyPost, "postRef": map[string]any{
			"uri": post, "cid": "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm"}}},
	}
	if item != nil {
		blocks = append(blocks, map[string]any{"$type": leafletBlock, "block": map[string]any{"$type": leafletList, "children": []any{item}}})
	}
	rec := map[string]any{
		"$type":       leafletDocument,
		"title":       "Nested lists, " + tag,
		"author":      author,
		"publication": publication,
		"publishedAt": "2026-11-30T12:00:00.000Z",
		"pages":       []any{map[string]any{"$type": leafletLinear, "blocks": blocks}},
	}
	add(".author", author, false)
	add(".publication", publication, false)
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	return b, links
}
