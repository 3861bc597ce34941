// Package mailbox is where complete Homa messages wait for the
// goroutines that receive them: the contract between a Homa backend (the
// user-space engine, or the kernel module's socket) and Recv.
//
//   - Recv(Any) takes the oldest ready message, request or response, or
//     waits for the next one.
//   - Recv(id) takes the response of client RPC id (which must have been
//     announced with Expect), or waits for it; a response someone waits
//     for by id goes to that goroutine, never to Recv(Any).
//   - A message goes straight to a waiting goroutine when there is one,
//     preferring the goroutine that produced it (it is polling the
//     socket from Recv and takes the message with no hand-off).
//   - A response may come before its RPC is announced (a backend whose
//     reader races the sender): it is queued, and Expect keeps it.
//   - Abort makes a waiter for the id receive the failure, or forgets a
//     queued response; Close wakes everyone with nil.
//
// A Mailbox is not synchronized: its owner guards it with the lock that
// also serializes what produces the messages. Waking a goroutine is a
// send on its buffered channel, which never blocks.
package mailbox

import (
	"context"
	"sync"

	"github.com/homa-go/homa/contract"
)

// Any is the id of Recv calls that take any message.
const Any = 0

// Waiter is a goroutine blocked in Recv. Exactly one message (nil when
// the mailbox closes) is sent on C after the waiter is registered and
// before it is unregistered.
type Waiter struct {
	C        chan *contract.Message
	id       uint64
	listed   bool // in the list of Recv(Any) waiters
	awaiting bool // registered for id
	prev     *Waiter
	next     *Waiter
}

// NewWaiter returns a waiter for Take. Waiters may be reused once they
// have received their message or been cancelled.
func NewWaiter() *Waiter { return &Waiter{C: make(chan *contract.Message, 1)} }

// node is a ready message in the queue.
type node struct {
	m          *contract.Message
	prev, next *node
}

// entry is what the mailbox knows of an announced client RPC.
type entry struct {
	w *Waiter // a goroutine waiting for its response
	n *node   // its response, ready
}

// Mailbox holds ready messages and waiting goroutines.
type Mailbox struct {
	head, tail *node
	free       []*node
	ready      int
	anyHead    *Waiter
	anyTail    *Waiter
	rpcs       map[uint64]entry
	waiting    int // registered waiters
	closed     bool
}

// New returns an empty mailbox.
func New() *Mailbox { return &Mailbox{rpcs: make(map[uint64]entry)} }

// Ready is the number of messages waiting to be received.
func (b *Mailbox) Ready() int { return b.ready }

// Waiting is the number of goroutines waiting for a message.
func (b *Mailbox) Waiting() int { return b.waiting }

// Expected reports how many client RPCs are announced and not yet taken.
func (b *Mailbox) Expected() int { return len(b.rpcs) }

// Expect announces client RPC id: its response (or failure) will be
// delivered, and Recv(id) may wait for it. A response delivered before
// stays queued.
func (b *Mailbox) Expect(id uint64) {
	if _, ok := b.rpcs[id]; !ok && !b.closed {
		b.rpcs[id] = entry{}
	}
}

// Deliver hands m to a waiting goroutine, or queues it: for a response,
// the goroutine waiting for its id; otherwise self, if it waits for any
// message; otherwise the oldest goroutine waiting for any. It returns the
// waiter that took m, or nil when m was queued (or dropped, once closed).
func (b *Mailbox) Deliver(m *contract.Message, self *Waiter) *Waiter {
	if b.closed {
		m.Release()
		return nil
	}
	if !m.IsRequest() {
		if e := b.rpcs[m.ID]; e.w != nil {
			delete(b.rpcs, m.ID)
			e.w.awaiting = false
			b.waiting--
			e.w.C <- m
			return e.w
		}
	}
	w := self
	if w == nil || !w.listed {
		w = b.anyHead
	}
	if w != nil {
		b.unlist(w)
		b.waiting--
		if !m.IsRequest() {
			delete(b.rpcs, m.ID)
		}
		w.C <- m
		return w
	}
	n := b.push(m)
	if !m.IsRequest() {
		b.rpcs[m.ID] = entry{n: n}
	}
	return nil
}

// Take returns the ready message for id (Any: the oldest of all), or
// registers w to wait for it and returns nil, nil: the message will be
// sent on w.C. It fails with an *OpError (Op "recv") wrapping
// contract.ErrUnknownRPC when no client RPC id was announced (or its
// response was taken), or ErrAlreadyWaiting when another goroutine
// waits for id; and with contract.ErrClosed after Close.
func (b *Mailbox) Take(id uint64, w *Waiter) (*contract.Message, error) {
	if b.closed {
		return nil, contract.ErrClosed
	}
	if id == Any {
		if n := b.head; n != nil {
			m := n.m
			b.unqueue(n)
			if !m.IsRequest() {
				delete(b.rpcs, m.ID)
			}
			return m, nil
		}
		w.id = Any
		b.list(w)
		b.waiting++
		return nil, nil
	}
	e, ok := b.rpcs[id]
	switch {
	case !ok:
		return nil, &contract.OpError{Op: "recv", ID: id, Err: contract.ErrUnknownRPC}
	case e.n != nil:
		m := e.n.m
		b.unqueue(e.n)
		delete(b.rpcs, id)
		return m, nil
	case e.w != nil:
		return nil, &contract.OpError{Op: "recv", ID: id, Err: contract.ErrAlreadyWaiting}
	}
	w.id = id
	w.awaiting = true
	b.waiting++
	b.rpcs[id] = entry{w: w}
	return nil, nil
}

// Cancel unregisters w, whose goroutine stopped waiting. It reports
// false when w was no longer registered: its message was sent (or is
// about to be) and must be taken from w.C.
func (b *Mailbox) Cancel(w *Waiter) bool {
	switch {
	case w.listed:
		b.unlist(w)
		b.waiting--
		return true
	case w.awaiting:
		w.awaiting = false
		b.waiting--
		b.rpcs[w.id] = entry{}
		return true
	}
	return false
}

// Await waits for the message of w, which Take registered, or for ctx to
// end. mu is the lock that guards b. It returns the message, nil when the
// mailbox closed, or ctx.Err() when ctx ended first and w was withdrawn;
// a message handed over as ctx ended is kept rather than lost. Both
// backends wait this way, so their Recv ends alike.
func (b *Mailbox) Await(ctx context.Context, mu sync.Locker, w *Waiter) (*contract.Message, error) {
	select {
	case m := <-w.C:
		return Received(m)
	case <-ctx.Done():
	}
	mu.Lock()
	registered := b.Cancel(w)
	mu.Unlock()
	if registered {
		return nil, ctx.Err()
	}
	return Received(<-w.C)
}

// Received is what Recv returns for a message sent on a waiter's
// channel: the message, or contract.ErrClosed for the nil of Close.
func Received(m *contract.Message) (*contract.Message, error) {
	if m == nil {
		return nil, contract.ErrClosed
	}
	return m, nil
}

// Abort ends client RPC id here: a goroutine waiting for it receives
// failure; otherwise a queued response is released, and the id is
// forgotten. It reports whether the id was known.
func (b *Mailbox) Abort(id uint64, failure *contract.Message) bool {
	e, ok := b.rpcs[id]
	if !ok {
		return false
	}
	delete(b.rpcs, id)
	switch {
	case e.w != nil:
		e.w.awaiting = false
		b.waiting--
		e.w.C <- failure
	case e.n != nil:
		e.n.m.Release()
		b.unqueue(e.n)
	}
	return true
}

// Close wakes every waiting goroutine with nil and releases the queued
// messages. Later calls find the mailbox closed.
func (b *Mailbox) Close() {
	if b.closed {
		return
	}
	b.closed = true
	for w := b.anyHead; w != nil; w = b.anyHead {
		b.unlist(w)
		w.C <- nil
	}
	for id, e := range b.rpcs {
		if e.w != nil {
			e.w.awaiting = false
			e.w.C <- nil
		}
		delete(b.rpcs, id)
	}
	b.waiting = 0
	for n := b.head; n != nil; n = b.head {
		n.m.Release()
		b.unqueue(n)
	}
}

func (b *Mailbox) push(m *contract.Message) *node {
	var n *node
	if k := len(b.free); k > 0 {
		n = b.free[k-1]
		b.free = b.free[:k-1]
	} else {
		n = new(node)
	}
	n.m, n.prev, n.next = m, b.tail, nil
	if b.tail != nil {
		b.tail.next = n
	} else {
		b.head = n
	}
	b.tail = n
	b.ready++
	return n
}

// maxFreeNodes bounds the recycled queue nodes.
const maxFreeNodes = 256

func (b *Mailbox) unqueue(n *node) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		b.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		b.tail = n.prev
	}
	*n = node{}
	b.ready--
	if len(b.free) < maxFreeNodes {
		b.free = append(b.free, n)
	}
}

func (b *Mailbox) list(w *Waiter) {
	w.prev, w.next, w.listed = b.anyTail, nil, true
	if b.anyTail != nil {
		b.anyTail.next = w
	} else {
		b.anyHead = w
	}
	b.anyTail = w
}

func (b *Mailbox) unlist(w *Waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		b.anyHead = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		b.anyTail = w.prev
	}
	w.prev, w.next, w.listed = nil, nil, false
}
