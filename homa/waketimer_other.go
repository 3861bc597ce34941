//go:build !linux

package homa

// newKernelTimer returns nil: kernel timers are used on Linux only (see
// wakeTimer).
func newKernelTimer() wakeTimer { return nil }
