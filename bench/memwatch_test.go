package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// The heap profile: written from a sample after a collection inside the
// profiled window only, rewritten when the live heap grew by more than a
// sixteenth, never after finishProfile, and through a temporary file
// that does not stay behind.
func TestMemWatchHeapProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heap.prof")
	w := newMemWatch("generate", path)
	defer w.close()
	exists := func() bool {
		_, err := os.Stat(path)
		return err == nil
	}
	grow := func() []byte {
		b := bytes.Repeat([]byte{1}, 64<<20)
		runtime.GC()
		w.sample()
		return b
	}
	a := grow()
	if exists() {
		t.Fatal("a profile outside the profiled window")
	}
	w.profiling.Store(true)
	runtime.GC()
	w.sample()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("no gzipped profile in the window: %v, %d bytes", err, len(b))
	}
	if _, err := os.Stat(path + ".tmp"); err == nil {
		t.Fatal("the temporary file stayed")
	}
	os.Remove(path)
	runtime.GC()
	w.sample()
	if exists() {
		t.Fatal("rewritten without the live heap growing")
	}
	c := grow()
	if !exists() {
		t.Fatal("not rewritten when the live heap grew by 64 MiB")
	}
	peak, err := w.finishProfile()
	if err != nil || peak < 128<<20 {
		t.Fatalf("finishProfile: peak %d, %v; want at least 128 MiB, no error", peak, err)
	}
	os.Remove(path)
	d := grow()
	if exists() {
		t.Fatal("written after finishProfile")
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(c)
	runtime.KeepAlive(d)
}

// A heap profile path that cannot be written fails the run at once.
func TestBenchHeapProfileBadPath(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"lsm", "--shape", "backfill", "--links", "60000", "--tmp", t.TempDir(), "--json",
		"--heapprofile", filepath.Join(t.TempDir(), "missing", "heap.prof")}
	if code := run(args, &out, &errb); code == 0 || out.Len() != 0 {
		t.Fatalf("exit %d, output %q; want a failure before the run", code, out.String())
	}
	if bytes.Contains(errb.Bytes(), []byte("links written")) {
		t.Fatalf("the run went on:\n%s", errb.String())
	}
}

// The write phase's collector CPU (write_gc_cpu_s) comes from the
// runtime's estimate, which a collection moves forward.
func TestGCCPUTimeMoves(t *testing.T) {
	before := gcCPUTime()
	keep := make([][]byte, 0, 1024)
	for range 1024 {
		keep = append(keep, make([]byte, 4096))
	}
	runtime.GC()
	runtime.KeepAlive(keep)
	if after := gcCPUTime(); after <= before {
		t.Fatalf("collector CPU %v after a collection, %v before", after, before)
	}
}
