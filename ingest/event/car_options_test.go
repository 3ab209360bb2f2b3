package event

import (
	"reflect"
	"testing"
)

// TestDecodeCARNoCID: with NoCID every op is the one DecodeCAR yields but
// for an empty CID, and CARInfo (Missing's CIDs included) is unchanged, on
// every CAR of the shared test set and on a partial repository.
func TestDecodeCARNoCID(t *testing.T) {
	files := []string{"indigo/testing/testdata/repo_slice.car"}
	for _, s := range loadCARSummary(t) {
		files = append(files, s.file)
	}
	for _, f := range files {
		b := readTD(t, f)
		var want, got []Op
		wantInfo, wantErr := DecodeCAR(b, func(o *Op) error { want = append(want, *o); return nil })
		gotInfo, gotErr := DecodeCARWith(b, CAROptions{NoCID: true}, func(o *Op) error { got = append(got, *o); return nil })
		if (wantErr == nil) != (gotErr == nil) || !reflect.DeepEqual(wantInfo, gotInfo) {
			t.Fatalf("%s: info %+v, %v; with NoCID %+v, %v", f, wantInfo, wantErr, gotInfo, gotErr)
		}
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %d ops, with NoCID %d", f, len(want), len(got))
		}
		for i := range want {
			if got[i].CID != "" || want[i].CID == "" {
				t.Fatalf("%s: op %d CID %q, with NoCID %q", f, i, want[i].CID, got[i].CID)
			}
			w := want[i]
			w.CID = ""
			if !reflect.DeepEqual(w, got[i]) {
				t.Fatalf("%s: op %d differs:\n%+v\n%+v", f, i, want[i], got[i])
			}
		}
	}
}
