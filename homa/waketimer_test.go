package homa

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

// timerKinds returns a constructor of each kind of wakeTimer this
// platform has.
func timerKinds(testing.TB) map[string]func() wakeTimer {
	kinds := map[string]func() wakeTimer{"runtime": func() wakeTimer { return newRuntimeTimer() }}
	if k := newKernelTimer(); k != nil {
		k.Close()
		kinds["kernel"] = newKernelTimer
	}
	return kinds
}

// waitFor runs w.Wait and returns its result, failing the test if it
// has not returned within a generous bound (it must not block).
func waitFor(t *testing.T, w wakeTimer) bool {
	t.Helper()
	done := make(chan bool, 1)
	go func() { done <- w.Wait() }()
	select {
	case ok := <-done:
		return ok
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
		return false
	}
}

// A timer fires once per arming, Stop before the expiry keeps Wait from
// returning for it, and Close ends Wait.
func TestWakeTimer(t *testing.T) {
	for name, mk := range timerKinds(t) {
		t.Run(name, func(t *testing.T) {
			w := mk()
			w.Reset(100 * time.Microsecond)
			if !waitFor(t, w) {
				t.Fatal("Wait reported the timer closed")
			}
			if w.Stop() {
				t.Error("Stop reported stopping a timer whose expiry Wait returned for")
			}
			w.Reset(time.Hour)
			if !w.Stop() {
				t.Error("Stop of a timer an hour from expiry reported it expired")
			}
			w.Reset(0) // at once
			if !waitFor(t, w) {
				t.Fatal("Wait reported the timer closed")
			}
			// A stopped arming is never delivered, not even to a Wait
			// that starts after it would have expired.
			w.Reset(time.Millisecond)
			if !w.Stop() {
				t.Fatal("Stop of a timer a millisecond from expiry reported it expired")
			}
			w.Reset(time.Hour)
			got := make(chan bool, 1)
			go func() { got <- w.Wait() }()
			time.Sleep(5 * time.Millisecond)
			w.Close()
			if ok := <-got; ok {
				t.Error("Wait returned for a stopped arming, or early for the next")
			}
			if waitFor(t, w) {
				t.Error("Wait after Close reported an expiry")
			}
			w.Reset(time.Millisecond) // after Close: nothing
			if w.Stop() && waitFor(t, w) {
				t.Error("a closed timer fired")
			}
		})
	}
}

// Whichever of Stop and the expiry comes first decides: Stop reports
// false exactly when Wait returns for the arming. Armings a few
// microseconds long, stopped at random moments around their expiry,
// while a goroutine waits.
func TestWakeTimerStopRace(t *testing.T) {
	for name, mk := range timerKinds(t) {
		t.Run(name, func(t *testing.T) {
			w := mk()
			fires := make(chan struct{}, 1)
			var delivered int
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				for w.Wait() {
					delivered++
					fires <- struct{}{}
				}
			}()
			rng := rand.New(rand.NewPCG(1, 2))
			var stopped, late int
			for range 1000 {
				w.Reset(time.Duration(rng.IntN(30)) * time.Microsecond)
				for end := time.Now().Add(time.Duration(rng.IntN(40)) * time.Microsecond); time.Now().Before(end); {
				}
				if w.Stop() {
					stopped++
					continue
				}
				late++
				select {
				case <-fires: // Wait returned for it
				case <-time.After(10 * time.Second):
					t.Fatal("Stop reported an expiry that Wait did not return for")
				}
			}
			w.Close()
			<-ended
			if delivered != late {
				t.Errorf("Wait returned %d times for %d armings that Stop came too late for (%d stopped in time)", delivered, late, stopped)
			}
			t.Logf("%d armings stopped in time, %d expired first", stopped, late)
		})
	}
}

// An endpoint on a kernel socket takes kernel timers where the platform
// has them; one on the in-memory network, whose time a test may fake,
// or on a wrapper that does not say it is a kernel socket, runtime
// timers.
func TestEndpointTimerKind(t *testing.T) {
	kernel := newKernelTimer() != nil
	if kernel {
		newKernelTimer().Close()
	}
	lo := netip.MustParseAddr("127.0.0.1")
	e := NewEndpoint(udpConn(t), Config{})
	defer e.Close()
	if e.timer.Kernel() != kernel || (e.grace[1] != nil) != kernel || e.grace[0].Kernel() {
		t.Errorf("endpoint on UDP: kernel timer %v, idle grace timer %v, busy grace timer kernel %v; want %v, %v, false",
			e.timer.Kernel(), e.grace[1] != nil, e.grace[0].Kernel(), kernel, kernel)
	}
	n := memnet.New(memnet.Config{})
	defer n.Close()
	mc, err := n.Open(lo, 100)
	if err != nil {
		t.Fatal(err)
	}
	m := NewEndpoint(mc, Config{})
	defer m.Close()
	if m.timer.Kernel() || m.grace[1] != nil {
		t.Error("endpoint on the in-memory network: kernel timers, want runtime timers")
	}
	w := NewEndpoint(wrapped{udpConn(t)}, Config{})
	defer w.Close()
	if w.timer.Kernel() || w.grace[1] != nil {
		t.Error("endpoint on a wrapped UDP socket: kernel timers, want runtime timers")
	}
}

// BenchmarkWakeTimer: what arming and stopping a timer costs its caller
// (the kernel timer's two system calls; the runtime timer's heap update,
// and not the wake-up of another thread it may cause).
func BenchmarkWakeTimer(b *testing.B) {
	for name, mk := range timerKinds(nil) {
		b.Run(name, func(b *testing.B) {
			w := mk()
			defer w.Close()
			for b.Loop() {
				w.Reset(500 * time.Microsecond)
				w.Stop()
			}
		})
	}
}

// wrapped hides every optional capability of its Conn.
type wrapped struct{ netio.Conn }

// udpConn opens a UDP socket on loopback, or skips the test.
func udpConn(t *testing.T) netio.Conn {
	t.Helper()
	c, err := netio.OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, nil)
	if err != nil {
		t.Skipf("no UDP socket on loopback: %v", err)
	}
	return c
}
