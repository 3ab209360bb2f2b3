package bench

import (
	"sync"
	"sync/atomic"
	"time"
)

// memWatch samples the process's resident set while a run goes on, so a
// peak can be told apart: anonymous memory (the heap, the model check's
// maps, a merge's buffers: what the process holds) from the pages of
// mapped files (the table metadata the engine reads in place: page cache
// the kernel takes back under pressure), and the phase it happened in.
// VmHWM alone counts both, at their common peak.
type memWatch struct {
	phase atomic.Pointer[string]
	stop  chan struct{}
	done  sync.WaitGroup

	mu        sync.Mutex
	peakAnon  int64
	peakFile  int64
	anonPhase string
	filePhase string
	atTotal   memSample // the sample with the largest anon + file
}

type memSample struct {
	Anon, File int64
	Phase      string
}

const memWatchEvery = 200 * time.Millisecond

func newMemWatch(phase string) *memWatch {
	w := &memWatch{stop: make(chan struct{})}
	w.setPhase(phase)
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		t := time.NewTicker(memWatchEvery)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *memWatch) setPhase(p string) { w.phase.Store(&p) }

func (w *memWatch) sample() {
	anon, file := rssSplit()
	p := *w.phase.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	if anon > w.peakAnon {
		w.peakAnon, w.anonPhase = anon, p
	}
	if file > w.peakFile {
		w.peakFile, w.filePhase = file, p
	}
	if anon+file > w.atTotal.Anon+w.atTotal.File {
		w.atTotal = memSample{anon, file, p}
	}
}

// close takes a last sample and stops the watch.
func (w *memWatch) close() {
	close(w.stop)
	w.done.Wait()
	w.sample()
}

// report fills the result's memory figures.
func (w *memWatch) report(res *Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res.PeakRSSAnonBytes, res.PeakRSSAnonPhase = w.peakAnon, w.anonPhase
	res.PeakRSSFileBytes, res.PeakRSSFilePhase = w.peakFile, w.filePhase
	res.PeakRSSSampledAnon, res.PeakRSSSampledFile, res.PeakRSSPhase = w.atTotal.Anon, w.atTotal.File, w.atTotal.Phase
}
