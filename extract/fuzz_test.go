package extract

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/eddy-backlinks/eddy/link"
)

// FuzzExtract feeds arbitrary JSON records to the extractor. Invariants: no
// panic; limits hold; every link's target is already normalised (parsing its
// Norm again gives the same Norm and kind).
func FuzzExtract(f *testing.F) {
	b, err := os.ReadFile("../testdata/constellation/links_crate_vectors.json")
	if err != nil {
		f.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		f.Fatal(err)
	}
	for _, c := range v.CollectLinks {
		f.Add([]byte(c.Record))
	}
	f.Add([]byte(`{"subject":{"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza","uri":"at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/3mpsjbtci2c2o"}}`))
	f.Add([]byte(`{"a":[{"$type":"x.y#z","u":"HTTPS://Ex.com:443/a/../b?%61#x"},["did:web:a.b"]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := atdata.UnmarshalJSON(data)
		if err != nil {
			return
		}
		var e Extractor
		links, st := e.Extract(rec)
		if len(links) > LinksPerRecordMax || st.Links != len(links) {
			t.Fatalf("%d links, stats %+v", len(links), st)
		}
		for _, l := range links {
			if len(l.Path) > PathBytesMax {
				t.Fatalf("path too long: %q", l.Path)
			}
			again, err := link.ParseTarget(l.Target.Norm)
			if err != nil || again.Norm != l.Target.Norm || again.Kind != l.Target.Kind {
				t.Fatalf("target %q not stable: %+v %v", l.Target.Norm, again, err)
			}
		}
	})
}
