package s3_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// A bucket that stops answering: the S3 store's errors wrap
// ErrUnavailable; a Guard calls it down after GuardFailures probes and
// then refuses reads at once (not after the client's retries), lets
// writes through, and calls it up again at the first probe it answers.
func TestGuardBucketDown(t *testing.T) {
	endpoint, _, _ := miniotest.StartMinIO(t)
	fw := miniotest.NewForwarder(t, endpoint)
	ctx := context.Background()
	g := objstore.NewGuard(newStore(t, fw.Addr(), uniquePrefix(t.Name())))
	if err := g.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := g.Probe(ctx, 2*time.Second); err != nil {
		t.Fatalf("probe of a reachable store: %v", err)
	}

	fw.Cut()
	// The store's own error, before the guard knows: unavailable.
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err := g.Get(sctx, "k")
	cancel()
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("get from an unreachable store: %v, want ErrUnavailable", err)
	}
	for i := range objstore.GuardFailures {
		if down, _, _ := g.Down(); down {
			t.Fatalf("down after %d failed probes", i)
		}
		if err := g.Probe(ctx, 300*time.Millisecond); err == nil {
			t.Fatal("a probe of an unreachable store succeeded")
		}
	}
	down, since, perr := g.Down()
	if !down || since.IsZero() || perr == nil {
		t.Fatalf("after %d failed probes: down %v since %v (%v)", objstore.GuardFailures, down, since, perr)
	}
	t0 := time.Now()
	if _, err := g.GetRange(ctx, "k", 0, 1); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("get range while down: %v", err)
	}
	if _, err := g.Get(ctx, "k"); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("get while down: %v", err)
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Fatalf("reads while down took %v: they were sent", d)
	}

	fw.Restore()
	if err := g.Probe(ctx, 5*time.Second); err != nil {
		t.Fatalf("probe after the store came back: %v", err)
	}
	if down, _, _ := g.Down(); down {
		t.Fatal("still down after a probe succeeded")
	}
	if b, err := g.Get(ctx, "k"); err != nil || string(b) != "v" {
		t.Fatalf("get after the store came back: %q, %v", b, err)
	}
}
