package ingest

import "testing"

// The watch's windows: one the fetch spent waiting for memory, in whole
// or in part, is not counted against the PDS; the next whole one is.
func TestProgressWindows(t *testing.T) {
	p := &progress{}
	var w window
	look := func(step string, want bool) {
		t.Helper()
		if n, slow := w.look(p); slow != want {
			t.Fatalf("%s: %d bytes, slow %v, want %v", step, n, slow, want)
		}
	}
	p.got.Add(progressMin)
	look("a window that got its share", false)
	p.got.Add(progressMin - 1)
	look("a window one byte short", true)

	release, done := make(chan struct{}), make(chan struct{})
	go func() { p.wait(func() error { <-release; return nil }); close(done) }()
	for p.waiting.Load() == 0 {
	}
	look("a window the wait began in", false)
	look("a window the wait spans", false)
	close(release)
	<-done
	look("a window the wait ended in", false) // before, this one was counted
	look("the next whole window", true)

	// A wait begun and ended within one window.
	p.wait(func() error { return nil })
	look("a window with a whole wait", false)
	look("the window after it", true)
}
