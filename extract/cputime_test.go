package extract_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system, all threads, GC included) the
// process has used: per-core throughput on a shared machine is work divided
// by this, not by wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
