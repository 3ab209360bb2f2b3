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
	waits   atomic.Int64 // the waits ended
}

// wait runs grow (the fetch's memory share growing), which the watch does
// not count against the PDS.
func (p *progress) wait(grow func() error) error {
	p.waiting.Add(1)
	defer func() { p.waits.Add(1); p.waiting.Add(-1) }()
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
// delivers less than progressMin bytes, until ctx ends. A window in which
// the fetch waited for memory is not counted: not one the wait spans, nor
// the one it ends in (the fetch had only the rest of it; before, a wait
// that ended just before the window's end gave the PDS a moment to send
// its share).
func (p *progress) watch(ctx context.Context, cancel context.CancelCauseFunc, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var w window
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, slow := w.look(p); slow {
			cancel(fmt.Errorf("%w: %d bytes in %v", errTooSlow, n, every))
			return
		}
	}
}

// window is what the watch saw at the end of the last window.
type window struct{ got, waits int64 }

// look ends a window: whether it was too slow, and the bytes it got.
func (w *window) look(p *progress) (int64, bool) {
	waiting := p.waiting.Load() > 0 // before waits: a wait ending between the loads counts
	n, waits := p.got.Load(), p.waits.Load()
	got := n - w.got
	slow := got < progressMin && !waiting && waits == w.waits
	w.got, w.waits = n, waits
	return got, slow
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
