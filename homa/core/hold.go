package core

import (
	"sync/atomic"

	"github.com/homa-go/homa/contract"
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
	pool contract.Buffers // nil: the bytes are borrowed (SendBorrowed), not recycled
	refs atomic.Int32
	// free is set once the last reference is gone and the buffer is back
	// in pool: the core may then use the Hold again.
	free atomic.Bool
}

// Release drops one reference; the last returns the buffer to Buffers.
// The Hold must not be used after the caller's reference is released.
func (h *Hold) Release() {
	if h.refs.Add(-1) == 0 {
		if h.pool != nil {
			h.pool.Put(h.buf)
		}
		// A retired Hold waiting for its next message must not keep the
		// buffer reachable: the pool may have let it go.
		h.buf = nil
		h.free.Store(true)
	}
}

// Done reports whether every reference is gone: nothing will read the
// bytes any more.
func (h *Hold) Done() bool { return h.free.Load() }

// Holds are recycled by the core itself, without a lock: when the core
// drops its own reference (the message is done), the Hold waits among
// the retired ones until its last reference is gone, which the goroutine
// that writes the last packet reports through free, and then serves
// another message. maxRetiredHolds bounds the Holds kept; retiredScan is
// how many of the oldest a new message looks at.
const (
	maxRetiredHolds = 64
	retiredScan     = 8
)

// holdFor returns the Hold, with the core's reference, that keeps data
// alive while packets point into it, or nil for a message below
// ZeroCopyMin, which is copied into its packets.
func (c *Core) holdFor(data []byte) *Hold {
	if len(data) < ZeroCopyMin {
		return nil
	}
	var h *Hold
	for i, r := range c.retired[:min(len(c.retired), retiredScan)] {
		if r.free.Load() {
			h = r
			c.retired = append(c.retired[:i], c.retired[i+1:]...)
			break
		}
	}
	if h == nil {
		h = new(Hold)
	}
	h.free.Store(false)
	h.buf, h.pool = data, c.shared
	h.refs.Store(1)
	return h
}

// releaseOut drops the core's reference to m's bytes: they go back to
// Buffers once no packet waiting to be written points into them.
func (c *Core) releaseOut(m *outMsg) {
	switch {
	case m.hold != nil:
		m.hold.Release()
		// A borrowed message's Hold went to the caller, who watches it:
		// it is not used again.
		if m.hold.pool != nil && len(c.retired) < maxRetiredHolds {
			c.retired = append(c.retired, m.hold)
		}
	case m.data != nil:
		c.bufs.Put(m.data)
	}
	m.hold, m.data = nil, nil
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
