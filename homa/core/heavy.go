package core

import "math/bits"

// heavy finds the peer holding the most of a resource, within a factor
// of two: peers sit in buckets by the bit length of what they hold, so
// an update moves a peer only when its holding crosses a power of two,
// and the heaviest is the head of the highest non-empty bucket. Peers
// holding nothing are in no bucket.
type heavy struct {
	buckets [65]list[peer]
	nonzero uint64 // bit b-1 set: bucket b (b >= 1) is not empty
	// pick selects the peer field that holds this index's bucket number.
	bucket func(*peer) *int8
}

func newHeavy(at func(*peer) *links[peer], bucket func(*peer) *int8) heavy {
	h := heavy{bucket: bucket}
	for i := range h.buckets {
		h.buckets[i] = newList(at)
	}
	return h
}

// update files p under its new holding v.
func (h *heavy) update(p *peer, v int) {
	b := int8(0)
	if v > 0 {
		b = int8(bits.Len64(uint64(v)))
	}
	cur := h.bucket(p)
	if *cur == b {
		return
	}
	if *cur > 0 {
		l := &h.buckets[*cur]
		l.Remove(p)
		if l.Len() == 0 {
			h.nonzero &^= 1 << (*cur - 1)
		}
	}
	*cur = b
	if b > 0 {
		h.buckets[b].PushBack(p)
		h.nonzero |= 1 << (b - 1)
	}
}

// top returns a peer of the highest bucket, or nil when none holds any.
func (h *heavy) top() *peer {
	if h.nonzero == 0 {
		return nil
	}
	return h.buckets[bits.Len64(h.nonzero)].Front()
}
