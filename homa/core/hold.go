package core

import (
	"sync"
	"sync/atomic"
)

// A Hold keeps an outgoing message's bytes alive while packets that point
// into them (Packet.Payload) wait to be written: the core sends a message
// without copying it into packets, so its buffer may go back to Buffers
// only when the core is done with the message and every Output that
// refers to it has been written. The core holds one reference; each
// Output that refers to the buffer holds one, listed in Output.Holds, and
// its caller calls Release on each once it has written (or dropped) the
// Output's packets. Release may be called from any goroutine.
type Hold struct {
	buf  []byte
	pool Buffers
	refs atomic.Int32
}

// holds recycles Holds, which are released on whatever goroutine wrote
// the last packet.
var holds = sync.Pool{New: func() any { return new(Hold) }}

func newHold(buf []byte, pool Buffers) *Hold {
	h := holds.Get().(*Hold)
	h.buf, h.pool = buf, pool
	h.refs.Store(1)
	return h
}

// Release drops one reference; the last returns the buffer to Buffers.
// The Hold must not be used after the caller's reference is released.
func (h *Hold) Release() {
	if h.refs.Add(-1) == 0 {
		h.pool.Put(h.buf)
		h.buf, h.pool = nil, nil
		holds.Put(h)
	}
}

// hold records that out's packets refer to h's buffer, once per Output.
func (o *Output) hold(h *Hold) {
	if n := len(o.Holds); n > 0 && o.Holds[n-1] == h {
		return
	}
	for _, x := range o.Holds {
		if x == h {
			return
		}
	}
	h.refs.Add(1)
	o.Holds = append(o.Holds, h)
}
