package core

import "net/netip"

// Message is a complete request or response handed to the application,
// or the failure of a client RPC.
type Message struct {
	// ID is the RPC id as this endpoint knows it: even for an RPC this
	// endpoint started (a response), odd for one it serves (a request).
	ID uint64
	// Peer is the other end: its host and Homa port.
	Peer netip.AddrPort
	// Cookie is the completion cookie given to Send (responses only).
	Cookie uint64
	// Data is the message. It belongs to the receiver; Release recycles it.
	Data []byte
	// Err is set when a client RPC failed (Data is nil then). It is an
	// *OpError wrapping the cause (ErrPeerTimeout, ErrAborted, ...).
	Err error

	pool    Buffers // where Data goes back on Release (nil: the GC)
	backing []byte  // the buffer that holds Data (a receive buffer may hold more)
}

// IsRequest reports whether the message is a request to be answered with
// Reply (server side) rather than a response (client side).
func (m *Message) IsRequest() bool { return m.ID&1 == 1 }

// Release returns Data to the buffer pool it came from. The caller must
// not use Data afterwards. Calling it is optional; it saves an
// allocation.
func (m *Message) Release() {
	if m.Data != nil {
		if m.pool != nil {
			b := m.backing
			if b == nil {
				b = m.Data
			}
			m.pool.Put(b)
		}
		m.Data, m.backing = nil, nil
	}
}

// TakeData hands Data over to the caller, who owns it from now on:
// Release no longer recycles it. Passing it to SendOwned or ReplyOwned
// sends it on without a copy (an echo server's reply, a proxy's
// forward), and the endpoint recycles it when done. A message that
// arrived in one packet may sit inside a larger receive buffer: its
// bytes are then copied into a buffer of their own (cheap, at most one
// packet), so that what the caller gets can be recycled.
func (m *Message) TakeData() []byte {
	d := m.Data
	if m.pool != nil && d != nil && cap(d) != cap(m.backing) {
		own := m.pool.Get(len(d))
		copy(own, d)
		m.pool.Put(m.backing)
		d = own
	}
	m.Data, m.backing = nil, nil
	return d
}

// Buffers is where the core gets and returns the byte slices of packets
// and messages. It must be safe for concurrent use: the application
// releases messages from any goroutine. Get(n) returns a slice of length
// n; Put takes back a slice from Get (any other may be ignored).
type Buffers interface {
	Get(n int) []byte
	Put(b []byte)
}

// heapBuffers allocates from the Go heap and leaves freed slices to the
// garbage collector.
type heapBuffers struct{}

func (heapBuffers) Get(n int) []byte { return make([]byte, n) }
func (heapBuffers) Put([]byte)       {}

// Packet is a packet the core asks to transmit: Buf, then Payload.
type Packet struct {
	// Buf is the packet's Homa header (for DATA) or the whole packet,
	// from the core's Buffers. The caller owns it once handed over and
	// returns it with Buffers.Put after sending.
	Buf []byte
	// Payload, for DATA, is the message's bytes the packet carries,
	// sent after Buf in the same datagram: it points into the message,
	// which one of Output.Holds keeps alive until the caller releases it.
	Payload []byte
	// Addr is the destination host.
	Addr netip.Addr
	// Priority is the network priority, 0 (lowest) to 7.
	Priority uint8
}

// Output collects what one call into the core produced: packets to
// transmit, in order; messages for the application (complete requests and
// responses, and failed client RPCs), in order; and the holds on the
// message buffers the packets point into. The caller drains and reuses
// it; the core only appends.
type Output struct {
	Packets  []Packet
	Messages []*Message
	Holds    []*Hold
}

// Reset empties o, keeping its capacity. The caller has taken the
// packets and released (or taken) the holds.
func (o *Output) Reset() {
	clear(o.Packets)
	o.Packets = o.Packets[:0]
	clear(o.Messages)
	o.Messages = o.Messages[:0]
	clear(o.Holds)
	o.Holds = o.Holds[:0]
}
