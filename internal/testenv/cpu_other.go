//go:build !unix

package testenv

import "time"

// CPU is the CPU time this process has used so far: 0 here, where it is
// not measured.
func CPU() time.Duration { return 0 }
