package erpc

// FragPeak is the most transport RPCs one large exchange of r has had in
// flight at once. The owner of r calls it.
func FragPeak(r *Rpc) int { return r.fragPeak }

// OutOfOrder is how many fragments of large requests r has taken ahead
// of one it was missing.
func OutOfOrder(r *Rpc) int {
	r.large.mu.Lock()
	defer r.large.mu.Unlock()
	return r.large.ahead
}

// FragCounts returns r's exactly-once retries and the fragments of large
// requests it sent: atomics, read without a lock (by a network's drop
// function, say).
func FragCounts(r *Rpc) (retries, sent uint64) {
	return r.stats.retries.Load(), r.stats.fragSent.Load()
}
