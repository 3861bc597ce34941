package core

// Resource accounting: what each peer makes the core hold, against
// Limits, and what is shed when a limit is reached. See Limits.

// setState moves server RPC r to state s, keeping the count of requests
// awaiting replies.
func (c *Core) setState(r *rpc, s rpcState) {
	if r.state == s {
		return
	}
	if !r.isClient() {
		if r.state == stateServing {
			c.pending--
			r.peer.pending--
			c.recallMore(r.peer)
		}
		if s == stateServing {
			c.pending++
			r.peer.pending++
		}
		if r.state == stateReplying {
			c.replying--
			if r.prompt {
				c.prompt--
				r.prompt = false
			}
		}
		if s == stateReplying {
			c.replying++
			r.replied = c.now
			if !r.peer.lateAcks {
				c.prompt++
				r.prompt = true
			}
		}
	}
	r.state = s
}

// enterIncoming counts a new server RPC whose request is arriving, and
// leaveIncoming uncounts it (the request is complete, or the RPC ends).
func (c *Core) enterIncoming(r *rpc) {
	r.incoming = true
	c.incoming++
	r.peer.incoming++
	r.use.incoming++
	c.heavyRPCs.update(r.peer, r.peer.incoming)
}

func (c *Core) leaveIncoming(r *rpc) {
	if !r.incoming {
		return
	}
	r.incoming = false
	c.incoming--
	r.peer.incoming--
	r.use.incoming--
	c.heavyRPCs.update(r.peer, r.peer.incoming)
}

// startReceiving lists r among its peer's RPCs receiving a message, as
// the most recently active; touch marks it active again; stopReceiving
// takes it out.
func (c *Core) startReceiving(r *rpc) {
	r.progressTick = c.tick
	c.receivingList(r).PushBack(r)
}

func (c *Core) touch(r *rpc) {
	r.progressTick = c.tick
	c.receivingList(r).MoveToBack(r)
}

func (c *Core) stopReceiving(r *rpc) { c.receivingList(r).Remove(r) }

func (c *Core) receivingList(r *rpc) *list[rpc] {
	if r.isClient() {
		return &r.peer.receivingClients
	}
	return &r.peer.receivingServers
}

// charge counts n more (or, negative, fewer) bytes of receive storage
// for r's peer.
func (c *Core) charge(r *rpc, n int) {
	if n == 0 {
		return
	}
	c.mem += n
	r.peer.mem += n
	if r.use != nil {
		r.use.mem += n
	}
	c.heavyMem.update(r.peer, r.peer.mem)
}

// admitMemory makes room for n more bytes of storage for r, shedding
// the least recently active messages of r's peer when it is over its
// share, and of the heaviest peer when the whole is over. It reports
// false (nothing changed for r) when no room can be made.
func (c *Core) admitMemory(r *rpc, n int) bool {
	l := &c.cfg.Limits
	p := r.peer
	for p.mem+n > l.RecvMemoryPerPeer {
		if !c.shedMessage(p, r) && !c.shedForPort(p, r.use, n, memOf) {
			return false
		}
	}
	for c.mem+n > l.RecvMemory {
		if h := c.heavyMem.top(); h == nil || !c.shedMessage(h, r) {
			return false
		}
	}
	return true
}

// admitIncoming makes room for a new server RPC from client port port of
// p, shedding an idle request of p when p is at its share (or, when none
// is idle, a request of the port of p holding the most, see fair.go), or of the host with the most
// requests arriving when the whole is at its limit. Requests awaiting
// replies are the application's and cannot be shed: when those are at a
// limit the newcomer was refused before this (atReplyBound), and is
// asked for again when a reply makes room (recall.go).
func (c *Core) admitIncoming(p *peer, port uint16) bool {
	l := &c.cfg.Limits
	if p.incoming >= l.IncomingRPCsPerPeer && !c.shedRequest(p) && !c.shedForPort(p, p.ports[port], 1, incomingOf) {
		return false
	}
	if c.incoming >= l.IncomingRPCs {
		h := c.heavyRPCs.top()
		if h == nil || !c.shedRequest(h) {
			return false
		}
	}
	return true
}

// shedRequest frees p's least recently active incoming server RPC, if it
// made no progress this tick (a request that is moving is not shed for a
// newcomer). Its client will RESEND and start it again.
func (c *Core) shedRequest(p *peer) bool {
	v := p.receivingServers.Front()
	if v == nil || v.progressTick >= c.tick {
		return false
	}
	c.stats.Shed++
	c.freeServer(v, false)
	return true
}

// shedMessage frees the storage of p's least recently active incoming
// message other than keep, if it made no progress this tick: a server
// RPC is forgotten (its client will RESEND), a client RPC's response is
// discarded and fetched again by loss recovery once memory allows.
func (c *Core) shedMessage(p *peer, keep *rpc) bool {
	for _, l := range [...]*list[rpc]{&p.receivingServers, &p.receivingClients} {
		for v := l.Front(); v != nil; v = l.Next(v) {
			if v == keep || v.in.mem == 0 {
				continue
			}
			if v.progressTick >= c.tick {
				break // the rest are newer still
			}
			c.stats.Shed++
			if v.isClient() {
				c.park(v)
				c.letGo(&v.in)
				c.charge(v, -v.in.reset(c.bufs))
			} else {
				c.freeServer(v, false)
			}
			return true
		}
	}
	return false
}
