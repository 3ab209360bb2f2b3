//go:build unix

package event

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) the process has used,
// all threads included (the garbage collector's too).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
