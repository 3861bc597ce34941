package homa

import "time"

// ReaderWakeups is how many timed waits of e's background reader ended.
func ReaderWakeups(e *Endpoint) uint64 { return e.readerWakeups.Load() }

// AcksLeft is how often a reader of e left a batch of acknowledgments to
// be sent after it returned with its message.
func AcksLeft(e *Endpoint) uint64 { return e.acksLeft.Load() }

// GraceArms is how often e armed its background reader's grace timer.
func GraceArms(e *Endpoint) uint64 { return e.graceArms.Load() }

// CPUYields is how often a spinning reader of e gave its thread's
// processor up.
func CPUYields(e *Endpoint) uint64 { return e.cpuYields.Load() }

// AckSpins is how often a reader of e spun for acknowledgments only, and
// how often they came meanwhile.
func AckSpins(e *Endpoint) (spins, caught uint64) { return e.ackSpins.Load(), e.ackCaught.Load() }

// SpinsCut is how many spins e ended because another endpoint of the
// process was parked on its socket and the process has one processor.
func SpinsCut(e *Endpoint) uint64 { return e.spinsCut.Load() }

// ReaderParked reports whether a reader of e is parked on its socket.
func ReaderParked(e *Endpoint) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rxBlocked != nil || e.rxParked.Load()
}

// Pooled reports whether the process's buffer pool, or the cache of one
// of the endpoints in, holds b's memory.
func Pooled(b []byte, in ...*Endpoint) bool {
	c := sizeClass(cap(b))
	holds := func(free [][]byte) bool {
		for _, f := range free {
			if cap(f) > 0 && &f[:1][0] == &b[:1][0] {
				return true
			}
		}
		return false
	}
	for _, e := range in {
		e.mu.Lock()
		cached := c < len(e.cache.classes) && holds(e.cache.classes[c].free)
		e.mu.Unlock()
		if cached {
			return true
		}
	}
	bc := &bufClasses[c]
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return holds(bc.free)
}

// RunDue runs e's timers as a spinning reader would, after d more.
func RunDue(e *Endpoint, d time.Duration) {
	b := e.getBatch()
	e.runDue(e.now()+d, b)
	e.putBatch(b)
}
