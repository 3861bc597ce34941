package mailbox

import (
	"errors"
	"testing"

	"github.com/homa-go/homa/contract"
	"pgregory.net/rapid"
)

func req(id uint64) *contract.Message  { return &contract.Message{ID: id | 1} }
func resp(id uint64) *contract.Message { return &contract.Message{ID: id &^ 1} }

// got returns what w received, or nil if nothing was sent to it.
func got(w *Waiter) *contract.Message {
	select {
	case m := <-w.C:
		return m
	default:
		return nil
	}
}

func TestContract(t *testing.T) {
	b := New()
	b.Expect(10)
	b.Expect(12)
	// A response someone waits for by id goes to that waiter, never to
	// Recv(Any).
	any1, by10 := NewWaiter(), NewWaiter()
	if m, err := b.Take(Any, any1); m != nil || err != nil {
		t.Fatalf("Take(Any) on an empty mailbox: %v, %v", m, err)
	}
	if m, err := b.Take(10, by10); m != nil || err != nil {
		t.Fatalf("Take(10): %v, %v", m, err)
	}
	if b.Waiting() != 2 {
		t.Fatalf("%d waiting, want 2", b.Waiting())
	}
	if b.Deliver(resp(10), nil) != by10 || got(by10) == nil || got(any1) != nil {
		t.Fatal("the response for 10 did not go to its waiter")
	}
	// Another goroutine's Take for the same id: refused.
	by12a, by12b := NewWaiter(), NewWaiter()
	b.Take(12, by12a)
	if _, err := b.Take(12, by12b); !errors.Is(err, contract.ErrAlreadyWaiting) {
		t.Fatalf("second waiter for 12: %v", err)
	}
	// Cancelled: the id is still expected; its response is then queued.
	if !b.Cancel(by12a) || b.Waiting() != 1 {
		t.Fatalf("Cancel: waiting %d", b.Waiting())
	}
	// Recv(Any) takes requests and responses nobody waits for by id; the
	// goroutine that produced a message gets it first when it waits for any.
	self := NewWaiter()
	b.Take(Any, self)
	if b.Deliver(req(1), self) != self || got(self) == nil || got(any1) != nil {
		t.Fatal("a request did not go to the producing goroutine")
	}
	if b.Deliver(resp(12), nil) != any1 || got(any1) == nil {
		t.Fatal("a response nobody waits for by id did not go to Recv(Any)")
	}
	if _, err := b.Take(12, NewWaiter()); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Fatalf("Take(12) after Recv(Any) took it: %v", err)
	}
	// Nobody waiting: queued, oldest first; Take(id) takes a response
	// from the middle.
	b.Expect(14)
	b.Expect(16)
	b.Deliver(req(3), nil)
	b.Deliver(resp(14), nil)
	b.Deliver(resp(16), nil)
	if b.Ready() != 3 {
		t.Fatalf("%d ready, want 3", b.Ready())
	}
	if m, _ := b.Take(16, NewWaiter()); m == nil || m.ID != 16 {
		t.Fatalf("Take(16) = %v", m)
	}
	if m, _ := b.Take(Any, NewWaiter()); m == nil || m.ID != 3 {
		t.Fatalf("Take(Any) = %v, want the request", m)
	}
	// Abort: a waiter gets the failure; a queued response is dropped.
	b.Expect(18)
	by18 := NewWaiter()
	b.Take(18, by18)
	fail := &contract.Message{ID: 18, Err: contract.ErrAborted}
	if !b.Abort(18, fail) || got(by18) != fail {
		t.Fatal("the waiter of an aborted RPC did not get the failure")
	}
	if !b.Abort(14, nil) || b.Ready() != 0 {
		t.Fatalf("aborting a queued response left %d ready", b.Ready())
	}
	if b.Abort(14, nil) {
		t.Fatal("a second Abort knew the id")
	}
	// A response before its Expect stays queued.
	b.Deliver(resp(20), nil)
	b.Expect(20)
	if m, _ := b.Take(20, NewWaiter()); m == nil || m.ID != 20 {
		t.Fatalf("early response: %v", m)
	}
	// Close wakes every waiter with nil.
	b.Expect(22)
	w1, w2 := NewWaiter(), NewWaiter()
	b.Take(Any, w1)
	b.Take(22, w2)
	b.Close()
	if m, ok := <-w1.C; m != nil || !ok {
		t.Fatal("Recv(Any) not woken by Close")
	}
	if m, ok := <-w2.C; m != nil || !ok {
		t.Fatal("Recv(22) not woken by Close")
	}
	if _, err := b.Take(Any, NewWaiter()); !errors.Is(err, contract.ErrClosed) || b.Waiting() != 0 {
		t.Fatalf("after Close: %v, %d waiting", err, b.Waiting())
	}
}

// TestExactlyOnce: under any sequence of operations, every delivered
// message reaches exactly one taker (a waiter or a Take) or is dropped by
// Abort or Close, no waiter gets two messages, and the waiting count is
// the number of registered waiters.
func TestExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := New()
		var waiters []*Waiter
		received := map[*contract.Message]int{}
		delivered := map[*contract.Message]bool{}
		nextID := uint64(2)
		var expected []uint64
		for range rapid.IntRange(1, 80).Draw(t, "ops") {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				b.Expect(nextID)
				expected = append(expected, nextID)
				nextID += 2
			case 1:
				var m *contract.Message
				if len(expected) > 0 && rapid.Bool().Draw(t, "response") {
					m = resp(rapid.SampledFrom(expected).Draw(t, "id"))
				} else {
					m = req(nextID)
					nextID += 2
				}
				var self *Waiter
				if len(waiters) > 0 && rapid.Bool().Draw(t, "self") {
					self = rapid.SampledFrom(waiters).Draw(t, "w")
				}
				delivered[m] = true
				b.Deliver(m, self)
			case 2, 3:
				id := uint64(Any)
				if len(expected) > 0 && rapid.Bool().Draw(t, "byID") {
					id = rapid.SampledFrom(expected).Draw(t, "id")
				}
				w := NewWaiter()
				if m, err := b.Take(id, w); m != nil {
					received[m]++
				} else if err == nil {
					waiters = append(waiters, w)
				}
			case 4:
				if len(waiters) > 0 {
					i := rapid.IntRange(0, len(waiters)-1).Draw(t, "i")
					w := waiters[i]
					if !b.Cancel(w) {
						if m := got(w); m != nil {
							if m.Err == nil {
								received[m]++
							}
						} else {
							t.Fatal("Cancel says served, but nothing was sent")
						}
					}
					waiters = append(waiters[:i], waiters[i+1:]...)
				}
			case 5:
				if len(expected) > 0 {
					b.Abort(rapid.SampledFrom(expected).Draw(t, "id"), &contract.Message{Err: contract.ErrAborted})
				}
			}
			live := 0
			for _, w := range waiters {
				if len(w.C) > 1 {
					t.Fatal("a waiter got two messages")
				}
				if w.listed || w.awaiting {
					live++
				}
			}
			if live != b.Waiting() {
				t.Fatalf("Waiting() = %d, %d registered", b.Waiting(), live)
			}
		}
		for _, w := range waiters {
			if m := got(w); m != nil && m.Err == nil {
				received[m]++
			}
		}
		for m, n := range received {
			if n > 1 {
				t.Fatalf("message %d received %d times", m.ID, n)
			}
			if !delivered[m] {
				t.Fatalf("message %d received but never delivered", m.ID)
			}
		}
	})
}
