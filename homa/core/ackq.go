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

func aqLinks(r *rpc) *links[rpc]       { return &r.aq }
func aqPeerLinks(p *peer) *links[peer] { return &p.aqLinks }

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
	if r.aq.Listed() {
		return
	}
	p := r.peer
	p.ackQ.PushBack(r)
	if !p.aqLinks.Listed() {
		c.ackPeers.PushBack(p)
	}
	c.stats.NeedAcksDeferred++
	c.timers.arm(&c.ackPump, c.at(c.tick+1))
}

// unqueueNeedAck takes r out of its peer's queue, and the peer out of
// the core's when that empties it.
func (c *Core) unqueueNeedAck(r *rpc) {
	if !r.aq.Listed() {
		return
	}
	p := r.peer
	p.ackQ.Remove(r)
	if p.ackQ.Len() == 0 {
		c.ackPeers.Remove(p)
	}
}

// pumpNeedAcks serves the waiting NEED_ACKs: for each waiting peer, the
// heads of its queue while its budget for the tick lasts. A served RPC's
// timer runs at once: it sends its NEED_ACK (or finds the RPC
// acknowledged or due for reclaiming) and sets itself again.
func (c *Core) pumpNeedAcks() {
	for n := c.ackPeers.Len(); n > 0; n-- {
		p := c.ackPeers.Front()
		c.ackPeers.Remove(p)
		for p.ackQ.Len() > 0 && (p.needAckTick != c.tick+1 || p.needAcks < maxNeedAcksPerTick) {
			r := p.ackQ.Front()
			p.ackQ.Remove(r)
			c.rpcTimer(r)
		}
		if p.ackQ.Len() > 0 && !p.aqLinks.Listed() {
			c.ackPeers.PushBack(p)
		}
	}
	if c.ackPeers.Len() > 0 {
		c.timers.arm(&c.ackPump, c.at(c.tick+1))
	}
}
