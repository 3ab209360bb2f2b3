package simnet

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/repo"
)

// TestVerifiableFirehose holds a Verifiable world to a Sync 1.1 verifier:
// indigo's repo.VerifyCommitMessage (every op's CID read from the MST in
// the commit's CAR slice, the ops inverted over those nodes give
// prevData) and repo.VerifyCommitSignature (the commit signed with the
// DID document's #atproto key), for every #commit of the log; and every
// repository's getRepo CAR loads, its commit signed with the same key.
// A world that is not Verifiable fails both, so the test can tell.
func TestVerifiableFirehose(t *testing.T) {
	ctx := context.Background()
	w := NewWorld(Config{Seed: 7, Accounts: 150, Verifiable: true})
	w.Step(4000)
	dir := directoryOf(t, w)

	commits, ops := 0, 0
	err := w.FirehoseFrames(0, func(seq int64, f []byte) error {
		c := commitOf(t, f)
		if c == nil {
			return nil
		}
		commits++
		ops += len(c.Ops)
		if _, err := repo.VerifyCommitMessage(ctx, c); err != nil {
			t.Fatalf("seq %d (%s, %d ops): %v", seq, c.Repo, len(c.Ops), err)
		}
		if err := repo.VerifyCommitSignature(ctx, dir, c); err != nil {
			t.Fatalf("seq %d (%s): signature: %v", seq, c.Repo, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if commits < 3000 {
		t.Fatalf("only %d commits", commits)
	}
	repos := 0
	for _, a := range w.Accounts() {
		car, err := w.RepoCAR(a.DID)
		if err != nil {
			continue // not active: getRepo refuses it
		}
		if _, err := repo.VerifyCommitSignatureFromCar(ctx, dir, car); err != nil {
			t.Fatalf("getRepo %s: %v", a.DID, err)
		}
		commit, r, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(car))
		if err != nil {
			t.Fatalf("getRepo %s: %v", a.DID, err)
		}
		root, err := r.MST.RootCID()
		if err != nil || root.String() != commit.Data.String() {
			t.Fatalf("getRepo %s: MST root %v (%v), commit data %s", a.DID, root, err, commit.Data)
		}
		repos++
	}
	t.Logf("%d commits (%d ops) verified with proofs and signatures, %d repositories", commits, ops, repos)

	// Not Verifiable: the same world fails the verifier.
	plain := NewWorld(Config{Seed: 7, Accounts: 150})
	plain.Step(200)
	refused := 0
	err = plain.FirehoseFrames(0, func(seq int64, f []byte) error {
		if c := commitOf(t, f); c != nil {
			_, err1 := repo.VerifyCommitMessage(ctx, c)
			err2 := repo.VerifyCommitSignature(ctx, dir, c)
			if err1 != nil && err2 != nil {
				refused++
			}
		}
		return nil
	})
	if err != nil || refused < 150 {
		t.Fatalf("a plain world's commits: %d refused by both checks (%v)", refused, err)
	}
}

// commitOf decodes a firehose frame's #commit, or nil for another kind.
func commitOf(t *testing.T, f []byte) *comatproto.SyncSubscribeRepos_Commit {
	t.Helper()
	h := frameHeader("#commit")
	if !bytes.HasPrefix(f, h) {
		return nil
	}
	var c comatproto.SyncSubscribeRepos_Commit
	if err := c.UnmarshalCBOR(bytes.NewReader(f[len(h):])); err != nil {
		t.Fatal(err)
	}
	return &c
}

// directoryOf is an identity directory of w's DID documents, parsed by
// indigo as a resolver would.
func directoryOf(t *testing.T, w *World) identity.Directory {
	t.Helper()
	dir := identity.NewMockDirectory()
	for _, a := range w.Accounts() {
		doc, ok := w.DIDDocument(a.DID)
		if !ok {
			t.Fatalf("no DID document for %s", a.DID)
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var d identity.DIDDocument
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		dir.Insert(identity.ParseIdentity(&d))
	}
	return dir
}
