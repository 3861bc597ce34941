package ack

// DefaultSeenCapacity is the number of finished ids NewSeen remembers when
// given no capacity: 2 KiB per client port.
const DefaultSeenCapacity = 256

// Seen remembers which RPC ids from one client port this server has
// finished (answered and acknowledged, or reclaimed), so that a
// long-delayed duplicate of a request can never start the RPC again.
//
// Client ids increase per client port, but a server sees only some of
// them (the port also talks to other servers), and concurrent RPCs finish
// in any order. So Seen keeps the largest recently finished ids, sorted,
// in a ring of fixed capacity, plus a floor: every id at or below the
// floor counts as finished. When the ring is full, the smallest id
// leaves it and becomes the floor.
//
// Evicting the smallest rather than the oldest-finished id: both are
// equally safe against a second execution, since every evicted id stays
// at or below the floor. But the floor is also what wrongly refuses new
// RPCs, and evicting the smallest keeps it as low as possible. Evicting
// in finishing order would raise the floor to whatever id finished first,
// possibly a large one, and refuse every older id still to come after a
// single eviction. With the smallest evicted, the floor holds the
// invariant that capacity finished ids lie above it.
//
// The trade-off: a genuinely new RPC whose first packet reaches this
// server only after capacity RPCs with larger ids from the same client
// port have finished here is refused as a duplicate (the client then
// times out). That takes a request delayed in the network across
// capacity complete RPCs, or more than capacity RPCs outstanding at once
// from one client port to this server.
//
// Memory: 8 bytes per remembered id plus a few words, allocated once by
// NewSeen; Finish and Done never allocate. Id 0, which is never a valid
// RPC id on the wire, always counts as done. The zero value is a Seen of
// capacity 0: a floor only, the draft's "rpcid per client such that all
// RPCs with rpcid's less than or equal to this have been processed",
// which refuses any id below the largest finished one.
type Seen struct {
	ring  []uint64 // sorted ids, the smallest at head, wrapping around
	head  int      // index in ring of the smallest remembered id
	n     int      // remembered ids
	floor uint64   // every id <= floor is done; all remembered ids are above it
}

// NewSeen returns an empty Seen remembering up to capacity ids above its
// floor; capacity <= 0 means DefaultSeenCapacity.
func NewSeen(capacity int) *Seen {
	if capacity <= 0 {
		capacity = DefaultSeenCapacity
	}
	return &Seen{ring: make([]uint64, capacity)}
}

// Done reports whether id must not start a new RPC: it was finished, or it
// is at or below the floor.
func (s *Seen) Done(id uint64) bool {
	if id <= s.floor {
		return true
	}
	i := s.search(id)
	return i < s.n && s.at(i) == id
}

// Finish records that the RPC id is done on this server. Finishing an id
// that is already done does nothing.
func (s *Seen) Finish(id uint64) {
	if id <= s.floor {
		return
	}
	i := s.search(id)
	if i < s.n && s.at(i) == id {
		return
	}
	if s.n == len(s.ring) {
		if i == 0 {
			s.floor = id // id is the smallest: it goes straight below the floor
			return
		}
		s.floor = s.at(0)
		s.head = s.wrap(s.head + 1)
		s.n--
		i--
	}
	// Shift the ids above id one slot towards the tail, then place id.
	for j := s.n; j > i; j-- {
		s.ring[s.wrap(s.head+j)] = s.at(j - 1)
	}
	s.ring[s.wrap(s.head+i)] = id
	s.n++
}

// Floor is the largest id evicted so far: every id at or below it is done.
func (s *Seen) Floor() uint64 { return s.floor }

// Len is the number of finished ids remembered above the floor.
func (s *Seen) Len() int { return s.n }

// Cap is the most ids remembered above the floor.
func (s *Seen) Cap() int { return len(s.ring) }

// Reset forgets everything, floor included, keeping the storage. Use it
// only when no packet of the old ids can still arrive.
func (s *Seen) Reset() {
	s.head, s.n, s.floor = 0, 0, 0
}

// search returns the position (0 = smallest) of the first remembered id
// that is >= id, or s.n if there is none.
func (s *Seen) search(id uint64) int {
	lo, hi := 0, s.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.at(mid) < id {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// at returns the remembered id at position i, 0 being the smallest.
func (s *Seen) at(i int) uint64 { return s.ring[s.wrap(s.head+i)] }

// wrap maps a position past the end of the ring back into it.
func (s *Seen) wrap(i int) int {
	if i >= len(s.ring) {
		i -= len(s.ring)
	}
	return i
}
