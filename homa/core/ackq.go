package core

// NEED_ACK budget. A server asks a client to acknowledge each answered
// RPC with NEED_ACK, every tick while it says nothing, and sends one
// peer at most maxNeedAcksPerTick of them a tick. A client host with
// thousands of answered RPCs (many client sockets on one host, each
// with hundreds outstanding) would otherwise have the timer of each RPC
// over the budget fire at every tick only to find the budget spent: the
// timer work per tick grew with the RPCs waiting, and so the work per
// RPC with the RPCs in flight. So an RPC whose NEED_ACK is due when its
// peer's budget is spent waits in its peer's queue with only its
// reclaim deadline armed, and peers with waiting RPCs wait in the
// core's queue; each tick the core serves every waiting peer, oldest
// RPC first, while the peer's budget lasts. Waiting costs nothing per
// tick.

// maxNeedAcksPerTick bounds the NEED_ACKs sent to one peer per tick.
const maxNeedAcksPerTick = 8

func aqLinks(r *rpc) *links[rpc] { return &r.aq }

// needAckSlot reports whether p may be sent a NEED_ACK now, and if so
// takes the slot from p's budget for the tick.
func (c *Core) needAckSlot(p *peer) bool {
	if p.needAckTick != c.tick+1 {
		p.needAckTick, p.needAcks = c.tick+1, 0
	}
	if p.needAcks >= maxNeedAcksPerTick {
		return false
	}
	p.needAcks++
	return true
}

// awaitNeedAck queues r, whose NEED_ACK is due, for its turn.
func (c *Core) awaitNeedAck(r *rpc) {
	if c.needAcks.wait(c, r) {
		c.stats.NeedAcksDeferred++
	}
}

// unqueueNeedAck takes r out of the NEED_ACK turns.
func (c *Core) unqueueNeedAck(r *rpc) { c.needAcks.leave(r) }

// pumpNeedAcks serves the waiting NEED_ACKs: for each waiting peer, the
// heads of its queue while its budget for the tick lasts. A served RPC's
// timer runs at once: it sends its NEED_ACK (or finds the RPC
// acknowledged or due for reclaiming) and sets itself again.
func (c *Core) pumpNeedAcks() {
	for n := c.needAcks.peers.Len(); n > 0; n-- {
		p := c.needAcks.peers.Front()
		c.needAcks.peers.Remove(p)
		for p.ackQ.Len() > 0 && (p.needAckTick != c.tick+1 || p.needAcks < maxNeedAcksPerTick) {
			r := p.ackQ.Front()
			p.ackQ.Remove(r)
			c.rpcTimer(r)
		}
		if p.ackQ.Len() > 0 && !c.needAcks.peers.Contains(p) {
			c.needAcks.peers.PushBack(p)
		}
	}
	c.needAcks.again(c)
}
