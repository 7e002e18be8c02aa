//go:build !unix

package api_test

import "time"

// benchProcessCPU cannot read the process's CPU time on this system.
func benchProcessCPU() (time.Duration, bool) { return 0, false }
