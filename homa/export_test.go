package homa

// ReaderWakeups is how many timed waits of e's background reader ended.
func ReaderWakeups(e *Endpoint) uint64 { return e.readerWakeups.Load() }
