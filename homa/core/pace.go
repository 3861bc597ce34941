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
	c.pacer.Ready(r.pid, r.out.length-r.out.next, uint64(r.pid))
}

// unpace takes r's outgoing message out of the pacer.
func (c *Core) unpace(r *rpc) {
	if r.pid == 0 {
		return
	}
	c.pacer.Idle(r.pid)
	delete(c.pacing, r.pid)
	r.pid = 0
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
		n := m.segUp(m.next+1) - m.next // next is at a segment start
		size := int(n) + wire.DataLen + c.wireOverhead()
		if ok, wait := c.pacer.Admit(size, now); !ok {
			c.pacerAt = c.now + max(wait, time.Microsecond)
			return
		}
		c.queueData(r, m.next, m.next+n, false)
		m.next += n
		c.pacer.Sent(size, now)
		if m.next < m.granted {
			c.pacer.Update(id, m.length-m.next)
		} else {
			c.pacer.Idle(id)
			c.sentAll(r)
		}
	}
}
