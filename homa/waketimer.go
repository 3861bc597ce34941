package homa

import (
	"sync"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// A wakeTimer wakes the one goroutine that waits in Wait once a deadline
// passes: the endpoint's timer loop (the core's deadlines) and its grace
// loops (see awaitReaders) each own one.
//
// Arming a runtime timer wakes a thread when the process is idle: the
// timer may be earlier than anything the runtime's netpoller sleeps
// for, so the runtime breaks that sleep, or starts a thread to take it;
// that thread then sleeps in the netpoller until the deadline, and
// wakes again then even if the timer was stopped meanwhile. An endpoint
// arms a timer as an idle server's goroutine leaves the socket with a
// request (the grace) and as an idle client's request leaves (its
// RESEND deadline), and stops it a few microseconds later: two thread
// wake-ups an RPC for a timer that never fires. Over a kernel socket on
// Linux those timers are therefore timerfds that the netpoller watches
// like a socket: arming and stopping one is a system call that wakes
// nobody, and only an expiry wakes the goroutine that waits. A system
// call costs a busy endpoint more than a runtime timer does (no thread
// of a busy process needs waking for it), so the grace of a reader that
// did not park is a runtime timer, and the core's timer is not re-armed
// for a deadline that moved a little later (staleKernelTimer).
// Elsewhere, and on any Conn that does not say it is a kernel socket
// (the in-memory network, a test's wrapper: testing/synctest's fake
// clock cannot advance while a goroutine waits on a descriptor),
// timers are the runtime's.
type wakeTimer interface {
	// Reset arms the timer to expire in d (at once when d <= 0), in
	// place of any deadline it had.
	Reset(d time.Duration)
	// Stop disarms the timer. It reports whether it did so before Wait
	// took the expiry of the last Reset; if it did not, Wait returns (or
	// has returned) for that expiry.
	Stop() bool
	// Wait blocks until the timer expires, and reports false once the
	// timer is closed. One goroutine at a time may wait.
	Wait() bool
	// Close ends the timer: Wait returns false, now and from now on.
	// Reset and Stop after Close do nothing.
	Close()
	// Kernel reports a kernel timer: Reset and Stop are system calls.
	Kernel() bool
}

// newWakeTimer returns a disarmed timer for an endpoint on conn: a
// kernel timer where there is one and conn says it is a kernel socket
// (netio.KernelSocket), a runtime timer otherwise.
func newWakeTimer(conn netio.Conn) wakeTimer {
	if k, ok := conn.(netio.KernelSocket); ok && k.KernelSocket() {
		if t := newKernelTimer(); t != nil {
			return t
		}
	}
	return newRuntimeTimer()
}

// runtimeTimer is a wakeTimer on a runtime timer.
type runtimeTimer struct {
	t         *time.Timer
	closed    chan struct{}
	closeOnce sync.Once
}

func newRuntimeTimer() *runtimeTimer {
	t := &runtimeTimer{t: time.NewTimer(time.Hour), closed: make(chan struct{})}
	t.t.Stop()
	return t
}

func (t *runtimeTimer) Reset(d time.Duration) { t.t.Reset(d) }

// Stop relies on the channel timers of Go 1.23 and later: once Stop
// returns, no stale expiry can be received.
func (t *runtimeTimer) Stop() bool { return t.t.Stop() }

func (t *runtimeTimer) Wait() bool {
	select {
	case <-t.t.C:
		return true
	case <-t.closed:
		return false
	}
}

func (t *runtimeTimer) Kernel() bool { return false }

func (t *runtimeTimer) Close() {
	t.closeOnce.Do(func() {
		t.t.Stop()
		close(t.closed)
	})
}
