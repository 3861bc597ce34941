//go:build !unix

package bench

import "time"

// cpuTime is not measured on this platform: CPU time per RPC reads 0.
func cpuTime() time.Duration { return 0 }
