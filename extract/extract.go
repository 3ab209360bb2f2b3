// Package extract finds the links in an atproto record of any lexicon.
//
// A link is a string value that, as a whole, is a valid at-uri, DID,
// http(s) URL or URI of another scheme (link.ParseTarget). Text inside a longer string is not a link;
// CID links, blobs and bytes never are. Records are walked as decoded by
// indigo's atproto/atdata (map[string]any, []any, string, int64, bool, nil,
// atdata.CIDLink, atdata.Bytes, atdata.Blob), in sorted key order, so the
// output is deterministic.
//
// Paths follow Constellation's convention: object keys joined by '.'
// (".reply.parent.uri"); an array element adds "[]", or "[<$type>]" when the
// element is an object with a string $type. A link that is the uri of a
// strong reference (an object of exactly a string uri and a string cid, plus
// optionally $type "com.atproto.repo.strongRef") is marked StrongRef, so seed
// 000's convention can report it at the object's own path ("$.reply.parent").
package extract

import (
	"errors"
	"slices"
	"strconv"

	"github.com/eddy-backlinks/eddy/link"
)

// Limits. What they drop is counted in Stats. The depth and path limits are
// set from real records, not guessed: the deepest real link paths are those
// of Leaflet documents (pub.leaflet.document), whose nested bullet lists add
// ".children[pub.leaflet.blocks.unorderedList#listItem]" (52 bytes, two
// levels) per level of list. Real documents with lists three deep give
// paths of 270-345 bytes at up to 17 levels (extracttest.LeafletDocument
// builds them); lists eight deep give 605 bytes at 27 levels, sixteen deep
// 1,021 bytes at 43 levels, the most these limits admit. A link past them
// is dropped and counted, never silently.
const (
	// DepthMax bounds object/array nesting walked, and the levels of a
	// link's path (PathLevels): it keeps hostile records from costing
	// stack or time.
	DepthMax = 64
	// LinksPerRecordMax bounds the links taken from one record: real records
	// carry a handful (a post with many facets a few dozen); past this a
	// record is spam or an attack on the index's size.
	LinksPerRecordMax = 512
	// PathBytesMax bounds a link's path: paths are interned (one outline
	// each, kept by every node), so their length must stay bounded.
	PathBytesMax = 1024
	// RecordBytesMax bounds a record's encoded size (CBOR or JSON) before
	// decoding; the atproto data model limits records to 1 MiB of CBOR.
	RecordBytesMax = 1 << 20
)

// ErrPathTooLong and ErrPathTooDeep: a path past PathBytesMax or DepthMax.
var (
	ErrPathTooLong = errors.New("path longer than " + strconv.Itoa(PathBytesMax) + " bytes")
	ErrPathTooDeep = errors.New("path deeper than " + strconv.Itoa(DepthMax) + " levels")
)

// PathLevels counts the levels of a path in Constellation's convention: one
// per object key (".key") and one per array element ("[]" or "[$type]").
// Keys are not escaped, so a key holding '.' counts as more than one level:
// the count is never below the nesting the path was found at.
func PathLevels(path string) int { return pathLevels(path) }

func pathLevels[T string | []byte](path T) int {
	n := 0
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '.':
			n++
		case '[':
			n++
			// A $type in brackets is one level, dots and all.
			for i+1 < len(path) && path[i+1] != ']' {
				i++
			}
		}
	}
	return n
}

// CheckPath applies the path limits: ingest indexes a link only at a path
// that passes, and a query's source path is held to the same check, so a
// path that can be asked about is exactly a path that can be indexed.
func CheckPath(path string) error { return checkPath(path) }

func checkPath[T string | []byte](path T) error {
	if len(path) > PathBytesMax {
		return ErrPathTooLong
	}
	if pathLevels(path) > DepthMax {
		return ErrPathTooDeep
	}
	return nil
}

// Link is one link found in a record.
type Link struct {
	Path      string // Constellation convention, e.g. ".reply.parent.uri"
	Target    link.Target
	StrongRef bool
}

// Stats counts what an extraction found and dropped.
type Stats struct {
	Links         int // links returned
	TooDeep       int // subtrees not walked: nesting past DepthMax, or links whose path has more than DepthMax levels
	TooManyLinks  int // links dropped past LinksPerRecordMax
	PathTooLong   int // links dropped: path past PathBytesMax
	TargetTooLong int // link-like strings past link.TargetBytesMax
	Invalid       int // strings beginning "at://", "did:" or "http(s)://" that did not parse (not those of other schemes: ErrNotURI)
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	s.Links += o.Links
	s.TooDeep += o.TooDeep
	s.TooManyLinks += o.TooManyLinks
	s.PathTooLong += o.PathTooLong
	s.TargetTooLong += o.TargetTooLong
	s.Invalid += o.Invalid
}

// Extractor walks records; reuse one per goroutine to save allocations.
type Extractor struct {
	path  []byte
	keys  [][]string // per depth scratch
	links []Link
	stats Stats
}

// Extract returns the links of rec, sorted by path then target. The returned
// slice is reused by the next call.
func (e *Extractor) Extract(rec map[string]any) ([]Link, Stats) {
	e.path = e.path[:0]
	e.links = e.links[:0]
	e.stats = Stats{}
	e.walkMap(rec, 0)
	slices.SortStableFunc(e.links, func(a, b Link) int {
		if a.Path != b.Path {
			if a.Path < b.Path {
				return -1
			}
			return 1
		}
		if a.Target.Norm < b.Target.Norm {
			return -1
		}
		if a.Target.Norm > b.Target.Norm {
			return 1
		}
		return 0
	})
	e.stats.Links = len(e.links)
	return e.links, e.stats
}

// Extract is a convenience wrapper with a fresh Extractor.
func Extract(rec map[string]any) ([]Link, Stats) {
	var e Extractor
	links, st := e.Extract(rec)
	return slices.Clone(links), st
}

func (e *Extractor) scratchKeys(depth int) []string {
	for len(e.keys) <= depth {
		e.keys = append(e.keys, nil)
	}
	return e.keys[depth][:0]
}

func (e *Extractor) walkMap(m map[string]any, depth int) {
	if depth >= DepthMax {
		e.stats.TooDeep++
		return
	}
	keys := e.scratchKeys(depth)
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.keys[depth] = keys
	strong := isStrongRef(m)
	base := len(e.path)
	for _, k := range keys {
		e.path = append(e.path[:base], '.')
		e.path = append(e.path, k...)
		e.walkValue(m[k], depth+1, strong && k == "uri")
	}
	e.path = e.path[:base]
}

func (e *Extractor) walkValue(v any, depth int, strongURI bool) {
	switch x := v.(type) {
	case string:
		e.consider(x, strongURI)
	case map[string]any:
		e.walkMap(x, depth)
	case []any:
		if depth >= DepthMax {
			e.stats.TooDeep++
			return
		}
		base := len(e.path)
		for _, el := range x {
			e.path = e.path[:base]
			if m, ok := el.(map[string]any); ok {
				if t, ok := m["$type"].(string); ok {
					e.path = append(e.path, '[')
					e.path = append(e.path, t...)
					e.path = append(e.path, ']')
				} else {
					e.path = append(e.path, "[]"...)
				}
			} else {
				e.path = append(e.path, "[]"...)
			}
			e.walkValue(el, depth+1, false)
		}
		e.path = e.path[:base]
	}
	// CID links, bytes, blobs, numbers, booleans and null are never links.
}

func (e *Extractor) consider(s string, strongURI bool) {
	if !link.LooksLikeLink(s) {
		return
	}
	t, err := link.ParseTarget(s)
	if err != nil {
		switch err {
		case link.ErrTooLong:
			e.stats.TargetTooLong++
		case link.ErrNotURI: // text such as "Note: …", not a broken link
		default:
			e.stats.Invalid++
		}
		return
	}
	switch checkPath(e.path) {
	case ErrPathTooLong:
		e.stats.PathTooLong++
		return
	case ErrPathTooDeep:
		e.stats.TooDeep++
		return
	}
	if len(e.links) >= LinksPerRecordMax {
		e.stats.TooManyLinks++
		return
	}
	e.links = append(e.links, Link{Path: string(e.path), Target: t, StrongRef: strongURI && t.Kind == link.TargetATURI})
}

// isStrongRef reports whether m is a strong reference: a string uri and a
// string cid, and nothing else but an optional $type of
// com.atproto.repo.strongRef.
func isStrongRef(m map[string]any) bool {
	switch len(m) {
	case 2:
	case 3:
		if t, ok := m["$type"].(string); !ok || t != "com.atproto.repo.strongRef" {
			return false
		}
	default:
		return false
	}
	_, okU := m["uri"].(string)
	_, okC := m["cid"].(string)
	return okU && okC
}
