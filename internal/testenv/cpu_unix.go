//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// CPU is the CPU time (user and system) this process has used so far; 0 if
// the system does not say.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
