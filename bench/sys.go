package bench

import (
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the process's CPU time so far (getrusage user+sys).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pageFaults returns the process's minor and major page faults so far (a
// major fault read a page from disk: a mapped meta's page the page cache
// had let go).
func pageFaults() (minor, major int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return ru.Minflt, ru.Majflt
}

// quiesceGC runs a whole collection before a timed phase, so that no
// collection the phases before started (the model check's expectations
// are gigabytes of maps) is still marking during it: its background
// workers would count in the process's CPU time per query and its write
// barriers in the latencies, and a node has no such state.
func quiesceGC() { runtime.GC() }

// loadAvg returns the 1-minute load average (0 where unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// percentile returns the p-th quantile of sorted durations, in µs.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Microsecond)
}

// procStatusBytes reads a "kB" field of /proc/self/status, in bytes (0
// where unknown).
func procStatusBytes(field string) int64 { return procStatusBytesOf("self", field) }

// procStatusBytesOf is procStatusBytes of another process ("self" or a
// PID).
func procStatusBytesOf(pid, field string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v << 10
		}
	}
	return 0
}

// peakRSSBytes is the process's peak resident set so far (VmHWM).
func peakRSSBytes() int64 { return procStatusBytes("VmHWM") }

// rssBytes is the process's resident set now (VmRSS).
func rssBytes() int64 { return procStatusBytes("VmRSS") }

// rssAnonBytes and rssFileBytes split it: anonymous memory (the heap,
// stacks) and the pages of mapped files (mapped table metadata: page
// cache the kernel can take back at any time).
func rssAnonBytes() int64 { return procStatusBytes("RssAnon") }
func rssFileBytes() int64 { return procStatusBytes("RssFile") }

// runtimeMetric reads one of the Go runtime's metrics (KindBad if this
// runtime has no such metric).
func runtimeMetric(name string) metrics.Value {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value
}

// heapLiveBytes is the Go heap's live bytes as of the last collection
// (0 before the first).
func heapLiveBytes() int64 {
	if v := runtimeMetric("/gc/heap/live:bytes"); v.Kind() == metrics.KindUint64 {
		return int64(v.Uint64())
	}
	return 0
}

// gcCPUTime is the Go runtime's estimate of the CPU time its collector
// has spent so far (/cpu/classes/gc/total:cpu-seconds: mark workers,
// assists, pauses, idle-time marking), of whichever code's allocations
// made it run. It is an estimate from wall time and GOMAXPROCS, an upper
// bound rather than the kernel's count, and moves only when a collection
// ends: a figure to see whether the collector matters.
func gcCPUTime() time.Duration {
	if v := runtimeMetric("/cpu/classes/gc/total:cpu-seconds"); v.Kind() == metrics.KindFloat64 {
		return time.Duration(v.Float64() * float64(time.Second))
	}
	return 0
}

// rssSplit is rssAnonBytes and rssFileBytes from one read of the status
// file (memWatch samples it five times a second).
func rssSplit() (anon, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "RssAnon:":
			anon = v << 10
		case "RssFile:":
			file = v << 10
		}
	}
	return anon, file
}

// startCPUProfile writes a CPU profile to path until the returned stop is
// called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
