package rawfloor

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// pinThread keeps the calling goroutine on its thread and the thread on
// one processor until the returned function is called, so that the
// packets it sends to loopback go through one processor's queue, in
// order.
func pinThread(t *testing.T) (unpin func()) {
	t.Helper()
	runtime.LockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	for cpu := range 1024 {
		if was.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	return func() {
		if err := unix.SchedSetaffinity(0, &was); err != nil {
			t.Error(err)
		}
		runtime.UnlockOSThread()
	}
}
