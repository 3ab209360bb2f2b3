package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// A repository fetch's progress: the bytes its body delivered, watched
// against a floor (fetchRepo).
type progress struct {
	got     atomic.Int64
	waiting atomic.Int32 // > 0 while the fetch waits for its memory share
	waits   atomic.Int64 // the waits begun
}

// wait runs grow (the fetch's memory share growing), which the watch does
// not count against the PDS.
func (p *progress) wait(grow func() error) error {
	p.waits.Add(1)
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	return grow()
}

// progressWindow and progressMin: a PDS that sends less than progressMin
// bytes in any progressWindow (its headers included in the first) is
// given up on; a slow but real one (a few KB a second) sends far more.
// (progressWindow is a variable for the tests.)
var progressWindow = 30 * time.Second

const progressMin = 16 << 10

// errTooSlow: a PDS that stopped sending, or sends too slowly.
var errTooSlow = errors.New("the PDS sends too slowly")

// watch cancels ctx with errTooSlow at the first window of every that
// delivers less than progressMin bytes, but a window in which the fetch
// waited for memory, until ctx ends.
func (p *progress) watch(ctx context.Context, cancel context.CancelCauseFunc, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastWaits := int64(0), int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, waits := p.got.Load(), p.waits.Load()
		if n-last < progressMin && p.waiting.Load() == 0 && waits == lastWaits {
			cancel(fmt.Errorf("%w: %d bytes in %v", errTooSlow, n-last, every))
			return
		}
		last, lastWaits = n, waits
	}
}

// reader counts what r delivers.
func (p *progress) reader(r io.Reader) io.Reader { return progressReader{r, p} }

// cause is err, or why ctx was cancelled when that ended the fetch.
func (p *progress) cause(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errTooSlow) {
		return context.Cause(ctx)
	}
	return err
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.got.Add(int64(n))
	return n, err
}
