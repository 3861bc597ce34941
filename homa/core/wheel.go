package core

import (
	"math/bits"
	"time"
)

// timerWheel holds the core's timers: every timer is set to a whole
// tick (Core.at), so those due within wheelSlots ticks of the cursor
// sit in a wheel of one-tick slots, each a list, where arming,
// disarming and firing cost the same however many timers are set; the
// few set further out wait in a heap until the cursor comes within
// reach. With a heap alone, 16,000 RPCs in flight spent 1.5-2 µs of CPU
// an RPC walking it (a cache miss a level), against 0.1 µs at 128.
type timerWheel struct {
	tick time.Duration
	// cursor is the tick of the earliest slot that may hold a timer:
	// every timer due before it has fired. A timer set for an earlier
	// tick goes in the cursor's slot.
	cursor uint64
	slots  []*timer // by tick mod wheelSlots: the first of a list
	busy   []uint64 // a bit a slot: its list is not empty
	n      int      // timers in the wheel
	far    timerHeap
}

// wheelSlots is the wheel's reach in ticks (a power of two): about 2 s
// at the default tick, past the resend, acknowledgment and reclaim
// timers, for 16 KB a core.
const wheelSlots = 2048

func (w *timerWheel) init(tick time.Duration) {
	w.tick = tick
	w.slots = make([]*timer, wheelSlots)
	w.busy = make([]uint64, wheelSlots/64)
}

// len is the number of timers set.
func (w *timerWheel) len() int { return w.n + len(w.far) }

func (w *timerWheel) tickOf(at time.Duration) uint64 { return uint64(max(at, 0) / w.tick) }

// arm makes t fire no later than at.
func (w *timerWheel) arm(t *timer, at time.Duration) {
	if t.idx >= 0 {
		if at >= t.at {
			return
		}
		w.disarm(t)
	}
	t.at = at
	k := max(w.tickOf(at), w.cursor)
	if k-w.cursor >= wheelSlots {
		t.far = true
		w.far.arm(t, at)
		return
	}
	w.link(t, k)
}

// disarm takes t out.
func (w *timerWheel) disarm(t *timer) {
	switch {
	case t.idx < 0:
	case t.far:
		w.far.disarm(t)
		t.far = false
	default:
		w.unlink(t)
	}
}

// link puts t in the slot of tick k.
func (w *timerWheel) link(t *timer, k uint64) {
	s := int(k & (wheelSlots - 1))
	t.idx, t.prev, t.next = s, nil, w.slots[s]
	if t.next != nil {
		t.next.prev = t
	}
	w.slots[s] = t
	w.busy[s>>6] |= 1 << (s & 63)
	w.n++
}

// unlink takes t out of its slot.
func (w *timerWheel) unlink(t *timer) {
	s := t.idx
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		w.slots[s] = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	}
	if w.slots[s] == nil {
		w.busy[s>>6] &^= 1 << (s & 63)
	}
	t.idx, t.prev, t.next = -1, nil, nil
	w.n--
}

// first returns the tick of the earliest slot with a timer, if the
// wheel has any.
func (w *timerWheel) first() (uint64, bool) {
	if w.n == 0 {
		return 0, false
	}
	s := int(w.cursor & (wheelSlots - 1))
	// The words from the cursor's on, around the wheel and back to it.
	word := w.busy[s>>6] &^ (1<<(s&63) - 1)
	for i := range len(w.busy) + 1 {
		wi := (s>>6 + i) % len(w.busy)
		if i > 0 {
			word = w.busy[wi]
		}
		if word != 0 {
			slot := wi<<6 | bits.TrailingZeros64(word)
			return w.cursor + uint64((slot-s+wheelSlots)%wheelSlots), true
		}
	}
	return 0, false // not reached: n > 0
}

// popDue takes out and returns a timer due at now, if any.
func (w *timerWheel) popDue(now time.Duration) *timer {
	nowTick := w.tickOf(now)
	for {
		if k, ok := w.first(); ok && k <= nowTick {
			w.moveTo(k)
			t := w.slots[k&(wheelSlots-1)]
			w.unlink(t)
			return t
		}
		if w.cursor >= nowTick {
			return nil
		}
		w.moveTo(nowTick) // nothing in the wheel is due before now
	}
}

// moveTo moves the cursor up to tick k and brings in the far timers the
// wheel then reaches, so that every far timer stays due after every
// timer in the wheel.
func (w *timerWheel) moveTo(k uint64) {
	w.cursor = k
	for len(w.far) > 0 && w.tickOf(w.far[0].at) < w.cursor+wheelSlots {
		t := w.far[0]
		w.far.disarm(t)
		t.far = false
		w.link(t, max(w.tickOf(t.at), w.cursor))
	}
}

// next is the earliest deadline, if any timer is set: its slot's tick
// (a timer set for an earlier tick than the cursor's is due then).
func (w *timerWheel) next() (time.Duration, bool) {
	if k, ok := w.first(); ok {
		return time.Duration(k) * w.tick, true
	}
	return w.far.next()
}
