package homa

import "time"

// ReaderWakeups is how many timed waits of e's background reader ended.
func ReaderWakeups(e *Endpoint) uint64 { return e.readerWakeups.Load() }

// Pooled reports whether the process's buffer pool holds b's memory.
func Pooled(b []byte) bool {
	bc := &bufClasses[sizeClass(cap(b))]
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for _, f := range bc.free {
		if cap(f) > 0 && &f[:1][0] == &b[:1][0] {
			return true
		}
	}
	return false
}

// RunDue runs e's timers as a spinning reader would, after d more.
func RunDue(e *Endpoint, d time.Duration) {
	b := e.getBatch()
	e.runDue(e.now()+d, b)
	e.putBatch(b)
}
