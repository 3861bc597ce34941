package core

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
)

// Work put off the path of a message. Between a request's arrival and
// its delivery, and between a response's arrival and its delivery, the
// core does only what the message needs; the rest waits until the
// shell has nothing to read and calls Idle:
//
//   - freeing the server RPCs that the acknowledgments piggybacked on
//     requests name (a busy client acknowledges its last RPC in its next
//     request, so this would otherwise precede every request's delivery);
//   - returning the structure and buffers of a client RPC whose response
//     just completed (it leaves the RPC table at once: nothing can reach
//     it any more);
//   - allocating the Message structure the next complete message will be
//     handed out in.
//
// Acknowledgments and RPCs wait in bounded lists: when one is full it is
// processed at once, and Tick and Close process them too.

// maxLateAcks and maxLateFrees bound the acknowledgments and the client
// RPCs waiting for Idle.
const (
	maxLateAcks  = 64
	maxLateFrees = 64
)

// lateAck is a piggybacked acknowledgment from host src waiting for Idle.
type lateAck struct {
	src netip.Addr
	ack wire.AckEntry
}

// deferAck puts a piggybacked acknowledgment off until Idle.
func (c *Core) deferAck(src netip.Addr, a wire.AckEntry) {
	if len(c.lateAcks) == maxLateAcks {
		c.runLateAcks()
	}
	c.lateAcks = append(c.lateAcks, lateAck{src, a})
}

func (c *Core) runLateAcks() {
	for i := range c.lateAcks {
		c.acked(c.lateAcks[i].src, c.lateAcks[i].ack)
	}
	clear(c.lateAcks)
	c.lateAcks = c.lateAcks[:0]
}

// freeClientLater forgets client RPC r now, and returns its structure
// and buffers at Idle.
func (c *Core) freeClientLater(r *rpc) {
	c.detach(r)
	delete(c.clients, r.id)
	if h := r.out.hold; h != nil && h.pool == nil {
		c.releaseOut(&r.out) // the caller of SendBorrowed watches the Hold
	}
	if len(c.lateFrees) == maxLateFrees {
		c.runLateFrees()
	}
	c.lateFrees = append(c.lateFrees, r)
}

func (c *Core) runLateFrees() {
	for _, r := range c.lateFrees {
		c.releasePeer(r.peer)
		c.recycle(r)
	}
	clear(c.lateFrees)
	c.lateFrees = c.lateFrees[:0]
}

// runLate does all the work put off until Idle but the Message.
func (c *Core) runLate() {
	c.runLateAcks()
	c.runLateFrees()
}

// IdleWork reports whether Idle has work to do.
func (c *Core) IdleWork() bool {
	return !c.closed && (len(c.lateAcks) > 0 || len(c.lateFrees) > 0 || c.spare == nil)
}

// Idle does the work put off the path of messages. The shell calls it
// when it has nothing to read (and IdleWork says there is work); like
// every call, it may leave results in out.
func (c *Core) Idle(now time.Duration, out *Output) {
	if c.closed {
		return
	}
	c.begin(now, out)
	c.runLate()
	if c.spare == nil {
		c.spare = new(contract.Message)
	}
	c.end()
}

// newMessage returns a zeroed Message: the one Idle prepared, if any.
func (c *Core) newMessage() *contract.Message {
	if m := c.spare; m != nil {
		c.spare = nil
		return m
	}
	return new(contract.Message)
}
