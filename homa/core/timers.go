package core

import "time"

// The core's timers. Every RPC and every peer has one timer, set to the
// earliest tick it may have something to do; the timers live in a
// wheel of one-tick slots (wheel.go), whose earliest busy slot is the
// next deadline of the whole core.
//
// Timers are lazy: an event that moves an owner's work later (a DATA
// packet that shows progress) leaves its timer alone, and the timer,
// when it fires, finds nothing due yet and sets itself again. Only an
// event that makes work due earlier moves a timer, so the per-packet
// path does no timer work.

// timer is one timer: an RPC's, a peer's, or (neither set) one of the
// core's own.
type timer struct {
	at   time.Duration
	idx  int // its slot in the wheel, or, far, its place in the heap; -1 when not set
	far  bool
	prev *timer // its neighbours in its wheel slot
	next *timer
	rpc  *rpc
	peer *peer
}

// timerHeap is a min-heap of timers by at: the timers the wheel does
// not reach yet (see timerWheel).
type timerHeap []*timer

// arm makes t fire no later than at.
func (h *timerHeap) arm(t *timer, at time.Duration) {
	if t.idx >= 0 {
		if at < t.at {
			t.at = at
			h.up(t.idx)
		}
		return
	}
	t.at = at
	t.idx = len(*h)
	*h = append(*h, t)
	h.up(t.idx)
}

// disarm takes t out of the heap.
func (h *timerHeap) disarm(t *timer) {
	i := t.idx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	t.idx = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

// next is the earliest deadline, if any timer is set.
func (h timerHeap) next() (time.Duration, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[0].at, true
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h timerHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h[r].at < h[c].at {
			c = r
		}
		if h[i].at <= h[c].at {
			return
		}
		h.swap(i, c)
		i = c
	}
}
