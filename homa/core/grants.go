package core

// schedule hands r's incoming message to the grant scheduler if it needs
// grants: if it is longer than what its sender sends unscheduled.
func (c *Core) schedule(r *rpc) {
	m := &r.in
	if m.granted >= m.length || r.gid != 0 {
		return
	}
	r.parked = false
	c.lastGID++
	r.gid = c.lastGID
	c.granting[r.gid] = r
	c.sched.Add(r.gid, r.peer.addr, m.length, m.granted, m.received)
	c.armRPC(r, c.at(r.grantDue()))
}

// unschedule takes r's incoming message out of the grant scheduler.
func (c *Core) unschedule(r *rpc) {
	if r.gid == 0 {
		return
	}
	c.sched.Remove(r.gid)
	delete(c.granting, r.gid)
	r.gid = 0
}

// park takes r's message out of the scheduler until it may have grants
// again: its sender left granted bytes unsent too long, or its peer is
// over its memory share. Only r's timer gives the place back (see
// resendDue) when no bytes come to do it: a message that had every byte
// granted to it keeps no timer while it waits in the scheduler, and
// parked without one it would wait for ever, its sender kept patient by
// BUSY. So park sets r's timer to look again an interval from now.
func (c *Core) park(r *rpc) {
	c.unschedule(r)
	r.parked = true
	c.armRPC(r, c.at(c.tick+uint64(c.resendConfig(r).ResendInterval)))
}

// unpark gives a parked message its place in the scheduler back, if its
// peer has room for what it would be granted.
func (c *Core) unpark(r *rpc) {
	if r.parked && c.grantRoom(r, r.in.length) {
		c.schedule(r)
	}
}

// grantRoom reports whether memory allows granting r's message up to
// offset: its peer's share has room for the bytes not yet received.
func (c *Core) grantRoom(r *rpc, offset uint32) bool {
	need := int(min(offset, r.in.length)) - int(r.in.received)
	return r.peer.mem+need <= c.cfg.Limits.RecvMemoryPerPeer
}

// decideGrants asks the scheduler which messages to grant now and queues
// their GRANTs. Every byte granted must have room to land: while the
// storage committed plus every byte granted and not yet received exceeds
// RecvMemory, the worst-ranked newly granted messages are parked rather
// than granted, and so is a message whose peer's share has no room.
func (c *Core) decideGrants() {
	if c.cfg.Budget != nil {
		c.borrowIncoming()
		defer c.repayIncoming()
	}
	c.grants = c.sched.Decide(c.grants[:0])
	if len(c.grants) == 0 {
		return
	}
	grants := c.grants
	for len(grants) > 0 && c.mem+c.sched.Incoming() > c.cfg.Limits.RecvMemory {
		if r := c.granting[grants[len(grants)-1].ID]; r != nil {
			c.park(r)
			c.stats.GrantsDeferred++
		}
		grants = grants[:len(grants)-1]
	}
	_, schedLevels := c.est.Cutoffs()
	for _, g := range grants {
		r := c.granting[g.ID]
		if r == nil {
			continue
		}
		if !c.grantRoom(r, g.Offset) {
			c.park(r)
			c.stats.GrantsDeferred++
			continue
		}
		if old, to := r.in.granted, min(g.Offset, r.in.length); to > old {
			r.in.granted = to
			c.granted(r, old)
		}
		// Scheduled packets stay below the unscheduled levels our
		// cutoffs currently use.
		r.in.grantPrio = min(g.Priority, uint8(schedLevels-1))
		c.stats.GrantsSent++
		c.queueGrant(r, r.in.granted, r.in.grantPrio)
		c.armRPC(r, c.at(r.grantDue()))
	}
}
