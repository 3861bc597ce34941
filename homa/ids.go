package homa

import (
	"sync/atomic"
	"time"
)

// RPC ids must be unique per client host, across every process and socket
// on it, because servers find an RPC by (client address, id). Each endpoint
// owns one Homa port, and ports are reserved host-wide, so the port in the
// top 16 bits makes ids from different endpoints disjoint. The low 48 bits
// count up in steps of 2 (client ids are even) from a start taken from the
// clock, so a process that reuses a port after another exited continues
// above the ids the old one used (it wraps only after years).
const (
	idPortShift = 48
	idSeqMask   = 1<<idPortShift - 1
)

type idSource struct {
	prefix uint64
	next   atomic.Uint64
}

func newIDSource(port uint16, now time.Time) *idSource {
	s := &idSource{prefix: uint64(port) << idPortShift}
	// Microseconds since the epoch, even, inside 48 bits: increasing
	// across restarts as long as a socket issues fewer than one RPC per
	// half microsecond on average.
	start := uint64(now.UnixMicro()) << 1 & idSeqMask
	s.next.Store(start)
	return s
}

// newID returns the next client RPC id: even and increasing.
func (s *idSource) newID() uint64 {
	for {
		seq := s.next.Add(2) & idSeqMask
		if seq != 0 { // id 0 means "none" on the wire (ack fields)
			return s.prefix | seq
		}
	}
}
