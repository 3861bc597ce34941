package homa

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kernelTimer is a wakeTimer on a timerfd, which the runtime's netpoller
// watches as it watches a socket (see wakeTimer).
type kernelTimer struct {
	f  *os.File
	rc syscall.RawConn
	// armed is set by Reset and cleared by whichever comes first of the
	// expiry that Wait reads and Stop: it decides, for each arming,
	// whether Wait returns for it or Stop reports it stopped in time. An
	// expiry Wait reads while the timer is not armed is stale (it came
	// before a Stop that cleared armed first) and is dropped.
	armed atomic.Bool
	// The functions the RawConn runs, made once: a closure made per
	// call would be allocated per call. next is the value set runs
	// with; rerr and buf are Wait's.
	set, stop func(fd uintptr)
	read      func(fd uintptr) bool
	next      atomic.Int64
	rerr      error
	buf       [8]byte // the count of expiries since the last read
}

// newKernelTimer returns a disarmed timerfd timer, or nil when the
// kernel gives none (too many open files, say): the caller then uses a
// runtime timer.
func newKernelTimer() wakeTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "homa-timer") // non-blocking: the netpoller watches it
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	t := &kernelTimer{f: f, rc: rc}
	t.set = func(fd uintptr) {
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(t.next.Load())}
		unix.TimerfdSettime(int(fd), 0, &spec, nil)
	}
	t.stop = func(fd uintptr) {
		var off unix.ItimerSpec
		unix.TimerfdSettime(int(fd), 0, &off, nil)
	}
	t.read = func(fd uintptr) bool {
		_, t.rerr = unix.Read(int(fd), t.buf[:])
		return !errors.Is(t.rerr, unix.EAGAIN)
	}
	return t
}

// Reset and Stop reach the descriptor through the RawConn's Control,
// which holds it open meanwhile: after Close its number may belong to
// another file.

func (t *kernelTimer) Reset(d time.Duration) {
	t.next.Store(int64(max(d, 1))) // a zero value would disarm it
	t.armed.Store(true)
	t.rc.Control(t.set)
}

func (t *kernelTimer) Stop() bool {
	t.rc.Control(t.stop)
	return t.armed.CompareAndSwap(true, false)
}

func (t *kernelTimer) Wait() bool {
	for {
		if err := t.rc.Read(t.read); err != nil || t.rerr != nil {
			return false // closed (a timerfd read fails no other way)
		}
		if t.armed.CompareAndSwap(true, false) {
			return true
		}
	}
}

func (t *kernelTimer) Close() { t.f.Close() }

func (t *kernelTimer) Kernel() bool { return true }
