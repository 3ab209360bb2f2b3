package bench

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// memWatch samples the process's resident set while a run goes on, so a
// peak can be told apart: anonymous memory (the heap, the model check's
// maps, a merge's buffers: what the process holds) from the pages of
// mapped files (the table metadata the engine reads in place: page cache
// the kernel takes back under pressure), and the phase it happened in.
// VmHWM alone counts both, at their common peak. It also follows the Go
// heap's live bytes (what the last collection found reachable: what a
// memory limit cannot take back, where RSS also holds the collector's
// slack) and, with a profile path, writes a heap profile each time the
// peak of the profiled phase (profiling set: the CPU profile's window,
// --profile-phase) grows by a sixteenth, so the file ends as the profile
// of the largest live heap seen there (within a sixteenth).
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

	peakLive     int64 // the Go heap's live bytes, at most
	livePhase    string
	profile      string      // a heap profile of the peak live heap is written here ("": none)
	profiling    atomic.Bool // ... of the samples taken while this is set (the profiled phase)
	profilePeak  int64       // the live bytes at most in those samples
	profiledLive int64       // the live bytes when the profile was last written
	profileErr   error
}

type memSample struct {
	Anon, File int64
	Phase      string
}

const memWatchEvery = 200 * time.Millisecond

func newMemWatch(phase, heapProfile string) *memWatch {
	w := &memWatch{stop: make(chan struct{}), profile: heapProfile}
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
	live := heapLiveBytes()
	if live > w.peakLive {
		w.peakLive, w.livePhase = live, p
	}
	if w.profile != "" && w.profiling.Load() && live > w.profilePeak {
		w.profilePeak = live
		if w.profileErr == nil && live > w.profiledLive+w.profiledLive/16 {
			w.profiledLive = live
			w.profileErr = writeHeapProfile(w.profile)
		}
	}
}

// writeHeapProfile writes the heap profile (as of the last collection)
// to path, replacing it through a temporary file beside it (removed if
// anything fails).
func writeHeapProfile(path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// close takes a last sample and stops the watch.
func (w *memWatch) close() {
	close(w.stop)
	w.done.Wait()
	w.sample()
}

// finishProfile writes the heap profile now if none was written (a
// profiled phase too short for a sample after a collection still leaves
// one, of the heap as the last collection found it), stops the profile
// (later samples write none), and returns the live bytes at most in the
// profiled phase's samples and the profile's first error.
func (w *memWatch) finishProfile() (peak int64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.profile != "" && w.profiledLive == 0 && w.profileErr == nil {
		w.profileErr = writeHeapProfile(w.profile)
	}
	w.profile = ""
	return w.profilePeak, w.profileErr
}

// report fills the result's memory figures.
func (w *memWatch) report(res *Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res.PeakRSSAnonBytes, res.PeakRSSAnonPhase = w.peakAnon, w.anonPhase
	res.PeakRSSFileBytes, res.PeakRSSFilePhase = w.peakFile, w.filePhase
	res.PeakRSSSampledAnon, res.PeakRSSSampledFile, res.PeakRSSPhase = w.atTotal.Anon, w.atTotal.File, w.atTotal.Phase
	res.PeakHeapLiveBytes, res.PeakHeapLivePhase = w.peakLive, w.livePhase
}
