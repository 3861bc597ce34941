package homa

// schedule hands r's incoming message to the grant scheduler if it needs
// grants: if it is longer than what its sender sends unscheduled.
func (e *Endpoint) schedule(r *rpc) {
	m := &r.in
	if m.granted >= m.length {
		return
	}
	e.lastGID++
	r.gid = e.lastGID
	e.granting[r.gid] = r
	e.sched.Add(r.gid, r.peer.addr, m.length, m.granted, m.received)
}

// unschedule takes r's incoming message out of the grant scheduler.
func (e *Endpoint) unschedule(r *rpc) {
	if r.gid == 0 {
		return
	}
	e.sched.Remove(r.gid)
	delete(e.granting, r.gid)
	r.gid = 0
}

// decideGrants asks the scheduler which messages to grant now and queues
// their GRANTs.
func (e *Endpoint) decideGrants(b *txBatch) {
	e.grants = e.sched.Decide(e.grants[:0])
	for _, g := range e.grants {
		r := e.granting[g.ID]
		if r == nil {
			continue
		}
		r.in.granted = max(r.in.granted, min(g.Offset, r.in.length))
		// Scheduled packets stay below the unscheduled levels our
		// cutoffs currently use.
		r.in.grantPrio = min(g.Priority, uint8(e.schedLevels-1))
		e.stats.grantsSent.Add(1)
		e.queueGrant(r, b, r.in.granted, r.in.grantPrio)
	}
}
