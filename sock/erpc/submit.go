package erpc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Work from other goroutines reaches an Rpc through its submit queue: a
// bounded FIFO of functions that the event loop runs between messages,
// as it runs continuations, so that they may call every method of the
// Rpc. The loop waits in Socket.Recv with a context that a submitter
// cancels (the wake-up); the context is made again only after it fired,
// so a loop that gets no submissions pays one atomic load per message.
type submitQueue struct {
	mu    sync.Mutex
	q     []func()
	spare []func()
	wake  context.CancelFunc // ends the loop's wait; nil when spent or no loop
	n     atomic.Int32       // len(q), read by the loop without the lock
}

// Submit hands fn to the Rpc's event loop, which runs it in order with
// the other submissions, between messages. Inside fn the Rpc may be used
// as by its owner: EnqueueRequest, CreateSession, DestroySession, ... So
// a background handler (on a worker goroutine) issues nested requests
// with
//
//	r := h.Rpc()
//	err := r.Submit(func() {
//		if err := r.EnqueueRequest(s, reqType, req, resp, cont, h); err != nil {
//			// answer h with the failure
//		}
//	})
//
// and answers from the continuation. Any goroutine may call Submit; a
// loop waiting for messages is woken. fn runs only while the owner runs
// the event loop. Submit fails with ErrQueueFull (retryable) when
// Config.SubmitQueue functions wait already, and with ErrClosed once the
// Rpc is closed; functions still queued at the close run during it, and
// see ErrClosed from the methods they call.
func (r *Rpc) Submit(fn func()) error {
	if fn == nil {
		return fmt.Errorf("erpc: Submit of a nil function")
	}
	if r.closed.Load() {
		return ErrClosed
	}
	sq := &r.sub
	sq.mu.Lock()
	if len(sq.q) >= r.cfg.SubmitQueue {
		sq.mu.Unlock()
		r.stats.submitFull.Add(1)
		return ErrQueueFull
	}
	sq.q = append(sq.q, fn)
	sq.n.Store(int32(len(sq.q)))
	wake := sq.wake
	sq.wake = nil
	sq.mu.Unlock()
	if wake != nil {
		wake()
	}
	return nil
}

// runSubmitted runs the functions submitted so far. The owner calls it.
func (r *Rpc) runSubmitted() {
	sq := &r.sub
	if sq.n.Load() == 0 {
		return
	}
	sq.mu.Lock()
	q := sq.q
	sq.q, sq.spare = sq.spare[:0], nil
	sq.n.Store(0)
	sq.mu.Unlock()
	for i, fn := range q {
		q[i] = nil
		fn()
		r.drain()
	}
	sq.mu.Lock()
	if sq.spare == nil {
		sq.spare = q[:0]
	}
	sq.mu.Unlock()
}

// armWake returns the context the loop waits with: parent, ended early
// by the next Submit. prev is the one used last; it is kept unless it
// has ended.
func (r *Rpc) armWake(parent, prev context.Context) context.Context {
	if prev != nil && prev.Err() == nil {
		return prev
	}
	ctx, cancel := context.WithCancel(parent)
	sq := &r.sub
	sq.mu.Lock()
	sq.wake = cancel
	sq.mu.Unlock()
	return ctx
}

// disarmWake forgets the loop's wake-up when the loop returns.
func (r *Rpc) disarmWake() {
	sq := &r.sub
	sq.mu.Lock()
	wake := sq.wake
	sq.wake = nil
	sq.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// Who is using the owner-only side of an Rpc. The methods for the owner
// claim it, so that a second goroutine calling one while the owner is
// busy is refused with ErrNotOwner instead of racing.
const (
	useIdle int32 = iota // nobody
	useCall              // an owner-only method, outside the event loop
	useLoop              // the event loop runs: messages, handlers, continuations
	useRecv              // the event loop waits for a message
)

// acquire claims the Rpc for an owner-only method named op. It reports
// whether it took the claim (to be given back with release); inside the
// event loop (a handler or continuation calling) there is nothing to
// take.
func (r *Rpc) acquire(op string) (held bool, err error) {
	switch r.use.Load() {
	case useLoop:
		return false, nil // a handler or continuation: the common case, no write
	case useIdle:
		if r.use.CompareAndSwap(useIdle, useCall) {
			return true, nil
		}
	}
	r.stats.notOwner.Add(1)
	return false, &OwnerError{Op: op}
}

func (r *Rpc) release(held bool) {
	if held {
		r.use.Store(useIdle)
	}
}

// mustAcquire is acquire for methods that return no error: misuse
// panics.
func (r *Rpc) mustAcquire(op string) bool {
	held, err := r.acquire(op)
	if err != nil {
		panic(err)
	}
	return held
}

// OwnerError reports an owner-only method of an Rpc called from a second
// goroutine while the owner was using the Rpc. It matches ErrNotOwner.
type OwnerError struct {
	Op string // the method, e.g. "EnqueueRequest"
}

func (e *OwnerError) Error() string {
	return "erpc: Rpc." + e.Op + " called from a goroutine other than the Rpc's owner while the owner uses it " +
		"(event loop or another method running); hand the work to the owner with Rpc.Submit"
}

func (e *OwnerError) Is(target error) bool { return target == ErrNotOwner }
