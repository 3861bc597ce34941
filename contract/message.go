package contract

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

// SetData makes data the message's Data, held in backing (which may be
// larger: a receive buffer holding one packet's message), a buffer
// from pool, to which Release returns it. A nil pool leaves the buffer
// to the garbage collector. It is for backends, which build the
// messages they deliver; an application has no use for it.
func (m *Message) SetData(data, backing []byte, pool Buffers) {
	m.Data, m.backing, m.pool = data, backing, pool
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

// Buffers is where a backend gets and returns the byte slices of packets
// and messages. It must be safe for concurrent use: the application
// releases messages from any goroutine. Get(n) returns a slice of length
// n; Put takes back a slice from Get (any other may be ignored).
type Buffers interface {
	Get(n int) []byte
	Put(b []byte)
}

// BatchRequest is one request of a batch sent at once: where it goes,
// its bytes, and the cookie its response carries back.
type BatchRequest struct {
	Dst    netip.AddrPort
	Data   []byte
	Cookie uint64
}

// BatchResponse is one response of a batch sent at once: the RPC it
// answers (the client's host and the RPC's id) and its bytes.
type BatchResponse struct {
	Peer netip.Addr
	ID   uint64
	Data []byte
}
