package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/internal/backoff"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
)

// fullBucket refuses every new table, as a bucket past its quota does;
// deletes go through.
type fullBucket struct{ objstore.Store }

func (s fullBucket) Put(ctx context.Context, key string, b []byte) error {
	if strings.HasPrefix(key, "tables/") {
		return errors.New("QuotaExceeded: the bucket is full")
	}
	return s.Store.Put(ctx, key, b)
}

// A write path that fails more often than the grace (a bucket refusing
// every new table) still deletes garbage: the leader's collector, and the
// grace it counts, outlive each run. Each run made a collector of its own
// whose grace started again, so nothing was ever deleted, the space a full
// bucket needed included.
func TestGarbageCollectedAcrossWritePathRestarts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newGCFixture(t)
	r1 := f.table("r1")
	f.publish([]lsm.Run{r1}, nil)
	f.publish(nil, []string{"r1"})
	log := &logLines{t: t}
	s := supervised(t, f.node, fullBucket{f.store}, capture(t), log)
	// A grace several runs long: each run fails at its first flush, ~100 ms.
	s.Runner.Config.GCGrace, s.Runner.Config.GCInterval = 3*testGrace, 20*time.Millisecond
	s.RestartBackoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	s.Start(ctx)
	defer s.Stop()
	s.leadership(true) // the node leads already
	waitFor(t, "the replaced table deleted", 30*time.Second, func() error {
		if f.exists(r1) {
			return fmt.Errorf("r1 still in the bucket after %d runs of the write path (garbage %v)", log.count("write path ended while leading"), f.node.FSM.Garbage())
		}
		return nil
	})
	if n := log.count("write path ended while leading"); n < 3 {
		t.Fatalf("deleted after %d failed runs: the runs did not fail as meant", n)
	}
}
