package extract_test

import (
	"slices"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/extract/extracttest"
)

// A Leaflet document with bullet lists nested eight deep (real ones nest
// three deep and give paths of 270-338 bytes): every link is found at its
// path, none is dropped, and the paths are longer than the 256 bytes the
// first limit allowed.
func TestLeafletNestedLists(t *testing.T) {
	for _, depth := range []int{3, 8, 16} {
		js, want := extracttest.LeafletDocument("did:plc:leafletauthor0000000000", "at://did:plc:leafletauthor0000000000/pub.leaflet.publication/3lpub", "t", depth)
		rec, err := atdata.UnmarshalJSON(js)
		if err != nil {
			t.Fatal(err)
		}
		got, st := extract.Extract(rec)
		if st.Links != len(want) || st.TooDeep+st.PathTooLong+st.TooManyLinks+st.TargetTooLong+st.Invalid != 0 {
			t.Fatalf("depth %d: %+v, want %d links and nothing dropped", depth, st, len(want))
		}
		var have, exp []string
		longest, levels := 0, 0
		for _, l := range got {
			have = append(have, l.Path+" "+l.Target.Norm+" "+strongMark(l.StrongRef))
			longest = max(longest, len(l.Path))
			levels = max(levels, extract.PathLevels(l.Path))
		}
		for _, l := range want {
			exp = append(exp, l.Path+" "+l.Target+" "+strongMark(l.StrongRef))
		}
		slices.Sort(have)
		slices.Sort(exp)
		if !slices.Equal(have, exp) {
			t.Fatalf("depth %d:\n got %q\nwant %q", depth, have, exp)
		}
		t.Logf("lists %d deep: %d links, longest path %d bytes, %d levels", depth, len(got), longest, levels)
		if depth >= 8 && longest <= 512 {
			t.Fatalf("depth %d: longest path %d bytes; the test means to exercise paths past 512", depth, longest)
		}
	}
}

func strongMark(b bool) string {
	if b {
		return "strong"
	}
	return "-"
}

// Paths past the limits are refused by CheckPath, and the extractor counts
// the links it drops for them.
func TestPathLimits(t *testing.T) {
	deep := ""
	for range extract.DepthMax {
		deep += ".a"
	}
	if err := extract.CheckPath(deep); err != nil {
		t.Fatalf("%d levels: %v", extract.DepthMax, err)
	}
	if err := extract.CheckPath(deep + "[]"); err != extract.ErrPathTooDeep {
		t.Fatalf("%d levels: %v, want ErrPathTooDeep", extract.DepthMax+1, err)
	}
	if n := extract.PathLevels(".facets[app.bsky.richtext.facet].features[].uri"); n != 5 {
		t.Fatalf("levels %d, want 5 (a $type in brackets is one level)", n)
	}
	long := "." + string(make([]byte, extract.PathBytesMax))
	if err := extract.CheckPath(long); err != extract.ErrPathTooLong {
		t.Fatalf("%d bytes: %v", len(long), err)
	}
}
