package homa

import (
	"net/netip"
	"sync"
)

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

	// ready-queue links, guarded by the endpoint's mutex.
	prev, next *Message
	queued     bool
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

// msgQueue is an intrusive FIFO of messages waiting to be received.
type msgQueue struct{ head, tail *Message }

func (q *msgQueue) push(m *Message) {
	m.prev, m.next, m.queued = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = m
	} else {
		q.head = m
	}
	q.tail = m
}

func (q *msgQueue) remove(m *Message) {
	if !m.queued {
		return
	}
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		q.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		q.tail = m.prev
	}
	m.prev, m.next, m.queued = nil, nil, false
}

// waiter is a goroutine blocked in Recv. Exactly one message is ever sent
// on ch, under the endpoint's mutex, after the waiter is unregistered.
type waiter struct {
	ch     chan *Message
	prev   *waiter
	next   *waiter
	listed bool // in a waiterList
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan *Message, 1)} }}

func getWaiter() *waiter  { return waiterPool.Get().(*waiter) }
func putWaiter(w *waiter) { waiterPool.Put(w) }

// waiterList is a FIFO of goroutines waiting for any message.
type waiterList struct{ head, tail *waiter }

func (l *waiterList) push(w *waiter) {
	w.prev, w.next, w.listed = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
}

func (l *waiterList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else if l.head == w {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else if l.tail == w {
		l.tail = w.prev
	}
	w.prev, w.next, w.listed = nil, nil, false
}
