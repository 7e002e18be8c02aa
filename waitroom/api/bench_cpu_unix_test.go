//go:build unix

package api_test

import (
	"syscall"
	"time"
)

// benchProcessCPU returns the user + system CPU time this process has used,
// and whether it could be read.
func benchProcessCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
