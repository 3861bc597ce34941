//go:build !linux

package homa

// yieldCPU does nothing where the kernel's placement of woken threads is
// not known (see spinRead).
func yieldCPU() {}
