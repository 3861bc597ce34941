package core

import (
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// pace puts r's outgoing message in the pacer's queue: it has granted
// bytes to send. Its age (for the FIFO share) is its handle's order.
func (c *Core) pace(r *rpc) {
	if r.pid == 0 {
		c.lastPID++
		r.pid = c.lastPID
		c.pacing[r.pid] = r
	}
	c.pacer.Ready(r.pid, r.out.toSend(), uint64(r.pid))
}

// resendData retransmits bytes [from, to) of r's outgoing message (whole
// segments): at once without the pacer; with it, through its queue, so
// that a long message's retransmission waits behind shorter messages as
// its first transmission did, one segment at a time, rather than fill
// the link's budget ahead of them.
func (c *Core) resendData(r *rpc, from, to uint32) {
	if c.pacer == nil {
		c.queueData(r, from, to, true)
		return
	}
	if !r.out.queueRexmit(from, to) {
		c.stats.ResendsIgnored++
		return
	}
	c.pace(r)
}

// unpace takes r's outgoing message out of the pacer.
func (c *Core) unpace(r *rpc) {
	if r.pid == 0 {
		return
	}
	c.pacer.Idle(r.pid)
	delete(c.pacing, r.pid)
	r.pid = 0
	r.out.pend = r.out.pend[:0] // the receiver asks again if it must
}

// ethernetFraming is what an Ethernet link spends on each packet beside
// its IP datagram: the header (14 bytes), the frame check sequence (4),
// the preamble and start delimiter (8) and the gap between frames (12).
const ethernetFraming = 38

// wireOverhead is what each packet costs the link beside its Homa bytes:
// the IP header and the link's framing, counted in the pacer's budget
// like the bytes on the wire. (A UDP header, over UDP, is 8 bytes more
// that the core does not know of.) For the smallest packets the framing
// is a third of their time on the wire.
func (c *Core) wireOverhead() int {
	if c.is4 {
		return 20 + ethernetFraming
	}
	return 40 + ethernetFraming
}

// account charges a packet that bypasses the pacer's queue (control,
// retransmission) to its budget.
func (c *Core) account(n int) {
	if c.pacer != nil {
		c.pacer.Sent(n+c.wireOverhead(), int64(c.now))
	}
}

// pump sends DATA packets from the pacer's queue, one at a time in its
// order, while its budget admits them, and sets pacerAt to when it
// admits the next (0: nothing waits).
func (c *Core) pump() {
	now := int64(c.now)
	c.pacerAt = 0
	for {
		id, ok := c.pacer.Next()
		if !ok {
			return
		}
		r := c.pacing[id]
		m := &r.out
		// Retransmissions first, then new bytes (next is at a segment
		// start).
		from, to, rexmit := m.nextRexmit()
		if !rexmit {
			from, to = m.next, m.segUp(m.next+1)
		}
		size := int(to-from) + wire.DataLen + c.wireOverhead()
		if ok, wait := c.pacer.Admit(size, now); !ok {
			c.pacerAt = c.now + max(wait, time.Microsecond)
			return
		}
		c.queueData(r, from, to, rexmit)
		c.pacer.Sent(size, now)
		if rexmit {
			m.rexmitSent(to)
		} else if m.next = to; m.next >= m.granted {
			c.sentAll(r)
		}
		if m.next < m.granted || len(m.pend) > 0 {
			c.pacer.Update(id, m.toSend())
		} else {
			c.pacer.Idle(id)
		}
	}
}
