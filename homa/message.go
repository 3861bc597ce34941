package homa

import "net/netip"

// Message is a complete request or response handed to the application, or
// the failure of a client RPC.
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
	// Err is set when a client RPC failed (Data is nil then).
	Err error

	link links[Message] // in the ready queue; guarded by the endpoint's mutex
}

// IsRequest reports whether the message is a request to be answered with
// Reply (server side) rather than a response (client side).
func (m *Message) IsRequest() bool { return m.ID&1 == 1 }

// Release returns Data to the endpoint's buffer pool. The caller must not
// use Data afterwards. Calling it is optional; it saves an allocation.
func (m *Message) Release() {
	if m.Data != nil {
		putBuf(m.Data)
		m.Data = nil
	}
}

func (m *Message) links() *links[Message] { return &m.link }

// waiter is a goroutine blocked in Recv. Exactly one message is ever sent
// on ch, under the endpoint's mutex, after the waiter is unregistered.
type waiter struct {
	ch   chan *Message
	link links[waiter] // in the endpoint's list of Recv(any) waiters
}

func (w *waiter) links() *links[waiter] { return &w.link }

// getWaiter and putWaiter recycle waiters per endpoint. Not across
// endpoints: a waiter's channel then always belongs to the endpoint's own
// world (which matters to testing/synctest bubbles).
func (e *Endpoint) getWaiter() *waiter {
	if w, _ := e.waiters.Get().(*waiter); w != nil {
		return w
	}
	return &waiter{ch: make(chan *Message, 1)}
}

func (e *Endpoint) putWaiter(w *waiter) { e.waiters.Put(w) }
