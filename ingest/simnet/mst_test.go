package simnet

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipfs/go-cid"

	"github.com/eddy-backlinks/eddy/ingest/event"
)

// parseCID turns a CID string of a DAG-CBOR SHA-256 block into a CID.
func parseCID(t *testing.T, s string) dagCID {
	t.Helper()
	c, err := cid.Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Bytes()
	if len(b) != 36 || !bytes.Equal(b[:4], cidPrefix[:]) {
		t.Fatalf("CID %s is not dag-cbor sha-256", s)
	}
	var out dagCID
	copy(out[:], b[4:])
	if out.String() != s {
		t.Fatalf("CID %s renders as %s", s, out.String())
	}
	return out
}

// TestMSTMatchesRealRepos rebuilds the MST of real repositories from
// their keys and values and finds their published root.
func TestMSTMatchesRealRepos(t *testing.T) {
	cars := []string{
		"indigo/atproto/repo/testdata/bnewbold.robocracy.org.20250310005405.car",
		"indigo/testing/testdata/greenground.repo.car",
		"jetstream/corpus/repo.car",
		"php-car/repo.car",
		"rsky/valid_repo.car",
		"indigo/testing/testdata/fakermaker.repo.car",
		"indigo/testing/testdata/paul_staging.repo.car",
	}
	for _, name := range cars {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var kvs []mstKV
		info, err := event.DecodeCAR(b, func(op *event.Op) error {
			kvs = append(kvs, mstKV{Key: op.Collection + "/" + op.RKey})
			kvs[len(kvs)-1].Val = parseCID(t, op.CID)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := buildMST(kvs).String(); got != info.Data {
			t.Errorf("%s: rebuilt MST root %s, CAR's %s", name, got, info.Data)
		}
		var tr mstTree
		for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(len(kvs)) {
			tr.Put(kvs[i].Key, kvs[i].Val)
		}
		if got := tr.Root().String(); got != info.Data {
			t.Errorf("%s: incremental MST root %s, CAR's %s", name, got, info.Data)
		}
	}
}

// TestMSTIncremental holds the in-place tree to the from-scratch build
// through random inserts, updates and deletes.
func TestMSTIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var tr mstTree
	ref := map[string]dagCID{}
	colls := []string{"app.bsky.feed.like", "app.bsky.feed.post", "app.bsky.graph.follow", "a.b.c"}
	var keys []string
	for step := 0; step < 6000; step++ {
		switch r := rng.IntN(10); {
		case r < 6 || len(keys) == 0:
			k := colls[rng.IntN(len(colls))] + "/" + randToken(rng, 1+rng.IntN(13))
			var v dagCID
			v[0], v[1] = byte(step), byte(step>>8)
			if _, ok := ref[k]; !ok {
				keys = append(keys, k)
			}
			ref[k] = v
			tr.Put(k, v)
		case r < 7:
			k := keys[rng.IntN(len(keys))]
			var v dagCID
			v[2] = byte(step)
			ref[k] = v
			tr.Put(k, v)
		default:
			i := rng.IntN(len(keys))
			k := keys[i]
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			delete(ref, k)
			if !tr.Delete(k) {
				t.Fatalf("delete %s: not found", k)
			}
		}
		if step%7 != 0 && step < 5900 {
			continue
		}
		kvs := make([]mstKV, 0, len(ref))
		for k, v := range ref {
			kvs = append(kvs, mstKV{k, v})
		}
		slices.SortFunc(kvs, func(a, b mstKV) int { return strings.Compare(a.Key, b.Key) })
		if got, want := tr.Root(), buildMST(kvs); got != want || tr.Len() != len(kvs) {
			t.Fatalf("step %d (%d keys): root %s, want %s", step, len(kvs), got, want)
		}
		// The walk visits the keys in order.
		var walked []mstKV
		tr.walk(func(dagCID, []byte) {}, func(k string, v dagCID) { walked = append(walked, mstKV{k, v}) })
		if !slices.Equal(walked, kvs) {
			t.Fatalf("step %d: walk differs", step)
		}
	}
	for _, k := range keys {
		tr.Delete(k)
	}
	if tr.Root() != emptyMSTRoot || tr.Len() != 0 {
		t.Fatal("emptied tree is not the empty tree")
	}
	if tr.Delete("a.b.c/x") {
		t.Fatal("delete from empty tree")
	}
}
