package core

// RESEND budget. A RESEND costs its sender a packet, and each RPC is
// asked for up to TimeoutResends times before it ends; so a flood of
// forged first packets from many addresses (each an RPC whose host will
// never answer) would have the core spend its CPU asking silent hosts
// again, and real clients would wait behind it. So each peer gets at
// most one RESEND per tick, and the core at most Limits.ResendsPerTick
// in all. An RPC whose RESEND is due when its peer's or the core's
// budget is spent waits in its peer's queue, and peers with waiting RPCs
// wait in the core's queue; each tick the core serves them in turn, one
// RESEND per peer, while the budget lasts. Within a peer the RPC that
// waited longest goes first, and no host's backlog delays another's by
// more than a turn. Waiting costs nothing per tick (no timer is set
// again for a waiting RPC), and a turn that is waited for is not an
// unanswered RESEND: the peer is not blamed for the core's budget.

func rqLinks(r *rpc) *links[rpc] { return &r.rq }

// resendSlot reports whether p may be sent a RESEND now, and if so takes
// the slot from p's budget and the core's.
func (c *Core) resendSlot(p *peer) bool {
	if p.resendTick == c.tick+1 {
		return false // the peer had its RESEND this tick
	}
	if c.budgetTick != c.tick+1 {
		c.budgetTick, c.resendsLeft = c.tick+1, c.cfg.Limits.ResendsPerTick
	}
	if c.resendsLeft == 0 {
		return false
	}
	c.resendsLeft--
	p.resendTick = c.tick + 1
	return true
}

// awaitResend queues r, whose RESEND is due, for its turn.
func (c *Core) awaitResend(r *rpc) {
	if c.resends.wait(c, r) {
		c.stats.ResendsDeferred++
	}
}

// unqueueResend takes r out of the RESEND turns.
func (c *Core) unqueueResend(r *rpc) { c.resends.leave(r) }

// pumpResends serves the waiting RESENDs: each waiting peer in turn, the
// head of its queue, while the core's budget lasts. A served RPC's
// timer runs at once: it sends its RESEND (or finds it no longer due:
// bytes came meanwhile) and sets itself again.
func (c *Core) pumpResends() {
	for n := c.resends.peers.Len(); n > 0 && c.resendsLeftNow() > 0; n-- {
		p := c.resends.peers.Front()
		c.resends.peers.Remove(p)
		if p.resendTick == c.tick+1 {
			c.resends.peers.PushBack(p) // it had its RESEND this tick
			continue
		}
		r := p.resendQ.Front()
		p.resendQ.Remove(r)
		if p.resendQ.Len() > 0 {
			c.resends.peers.PushBack(p)
		}
		c.rpcTimer(r)
	}
	c.resends.again(c)
}

// resendsLeftNow is what remains of the core's RESEND budget this tick.
func (c *Core) resendsLeftNow() int {
	if c.budgetTick != c.tick+1 {
		return c.cfg.Limits.ResendsPerTick
	}
	return c.resendsLeft
}
