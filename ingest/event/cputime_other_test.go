//go:build !unix

package event

import "time"

func processCPU() time.Duration { return 0 }
