package ack

import "math/bits"

// DefaultSeenCapacity is the number of client ids a Seen spans when
// given no capacity: 32,768 RPCs of one client port (4 KiB of bits).
const DefaultSeenCapacity = 32768

// Seen remembers which RPC ids from one client port this server has
// finished (answered and acknowledged, or reclaimed), so that a
// long-delayed duplicate of a request can never start the RPC again.
//
// Client ids are even and increase per client port (by 2 per RPC on a
// port of this engine; by 2 per RPC of the whole host on Linux). Seen
// keeps one bit per id over a window of the most recent Cap ids (the id
// space from the largest finished id down), and a floor below the
// window: every id at or below the floor counts as finished. Finishing
// an id beyond the window slides the window up to it, and what it leaves
// behind joins the floor.
//
// The floor is what could wrongly refuse a new RPC, or, were it to let
// one back in, run an old one twice; so the window is wide: in id space
// rather than a count of finished ids, the floor passes an id only when
// the client has issued Cap ids after it. A request delayed in the
// network (or a live RPC starved of its request) for that long is
// refused as a duplicate.
//
// Memory: Cap/8 bytes plus a few words, allocated once by NewSeen;
// Finish and Done never allocate. Id 0, which is never a valid RPC id on
// the wire, always counts as done. The zero value is a Seen of capacity
// 0: a floor only, the draft's "rpcid per client such that all RPCs with
// rpcid's less than or equal to this have been processed", which refuses
// any id at or below the largest finished one.
type Seen struct {
	bits []uint64 // bit i%Cap for the id of index i (id>>1) in the window
	base uint64   // index of the window's first id; every index below is done
	n    int      // finished ids in the window
}

// NewSeen returns an empty Seen spanning capacity ids (rounded up to a
// power of two, at least 64); capacity <= 0 means DefaultSeenCapacity.
func NewSeen(capacity int) *Seen {
	if capacity <= 0 {
		capacity = DefaultSeenCapacity
	}
	w := max(64, 1<<bits.Len(uint(capacity-1)))
	return &Seen{bits: make([]uint64, w/64)}
}

// width is the number of ids the window spans.
func (s *Seen) width() uint64 { return uint64(len(s.bits)) * 64 }

// Done reports whether id must not start a new RPC: it was finished, or it
// is at or below the floor.
func (s *Seen) Done(id uint64) bool {
	k := id >> 1
	switch {
	case id == 0 || k < s.base:
		return true
	case k-s.base >= s.width():
		return false
	}
	return s.bit(k)
}

// Finish records that the RPC id is done on this server. Finishing an id
// that is already done does nothing.
func (s *Seen) Finish(id uint64) {
	k := id >> 1
	if id == 0 || k < s.base {
		return
	}
	if w := s.width(); k-s.base >= w {
		s.slide(k - w + 1)
	}
	if s.width() == 0 || s.bit(k) {
		return
	}
	s.bits[k/64%uint64(len(s.bits))] |= 1 << (k % 64)
	s.n++
}

// slide moves the window's base up to nb: the ids it leaves join the
// floor.
func (s *Seen) slide(nb uint64) {
	w := s.width()
	if nb-s.base >= w {
		clear(s.bits)
		s.n = 0
		s.base = nb
		return
	}
	for ; s.base < nb; s.base++ {
		if s.base%64 == 0 && nb-s.base >= 64 {
			word := &s.bits[s.base/64%uint64(len(s.bits))]
			s.n -= bits.OnesCount64(*word)
			*word = 0
			s.base += 63
			continue
		}
		if s.bit(s.base) {
			s.bits[s.base/64%uint64(len(s.bits))] &^= 1 << (s.base % 64)
			s.n--
		}
	}
}

func (s *Seen) bit(k uint64) bool {
	return s.bits[k/64%uint64(len(s.bits))]&(1<<(k%64)) != 0
}

// Floor is the largest id below the window: every id at or below it is
// done (0 until the window first slides).
func (s *Seen) Floor() uint64 {
	if s.base == 0 {
		return 0
	}
	return s.base<<1 - 1
}

// Len is the number of finished ids in the window.
func (s *Seen) Len() int { return s.n }

// Cap is the number of ids the window spans.
func (s *Seen) Cap() int { return int(s.width()) }

// Reset forgets everything, floor included, keeping the storage. Use it
// only when no packet of the old ids can still arrive.
func (s *Seen) Reset() {
	clear(s.bits)
	s.base, s.n = 0, 0
}
