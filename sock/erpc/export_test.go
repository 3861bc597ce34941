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
