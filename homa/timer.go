package homa

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/resend"
)

// timerLoop drives loss recovery and acknowledgments: one tick every
// Config.Tick, for the whole endpoint.
func (e *Endpoint) timerLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			e.tick()
		case <-e.done:
			return
		}
	}
}

// tick advances the endpoint's clock by one tick and acts on every RPC:
// RESENDs for data that stopped coming, NEED_ACKs for answered requests,
// reclaiming what a vanished client left, and failing the RPCs of peers
// that stopped answering.
//
// Control traffic is budgeted per peer and tick. When a host is
// overloaded, many RPCs to it stall at once; a RESEND and a NEED_ACK for
// each of them every tick would add to the load that stalled them, and
// the retransmissions they cause would add more. So each tick a peer
// gets one RESEND, for the RPC that has waited longest (the others' turn
// comes at later ticks), and at most maxNeedAcksPerTick NEED_ACKs.
func (e *Endpoint) tick() {
	b := e.getBatch()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.sendBatch(b)
		return
	}
	e.now++
	now := e.now
	nominated := e.nominated[:0]
	for _, r := range e.clients {
		if r.state == stateActive && r.out.next >= r.out.granted {
			nominated = e.nominate(r, now, nominated)
		}
	}
	for k, r := range e.servers {
		switch r.state {
		case stateActive:
			nominated = e.nominate(r, now, nominated)
		case stateReplying:
			if e.tickAck(r, now, b) == reclaim {
				e.freeServer(k, r)
				e.stats.reclaimed.Add(1)
			}
		}
	}
	dead := e.deadPeers[:0]
	for _, p := range nominated {
		r := p.resendRPC
		p.resendRPC = nil
		if e.resendVerdict(r, now, b) == peerDead {
			dead = append(dead, p)
		}
	}
	for _, p := range dead {
		e.peerTimedOut(p)
	}
	e.nominated, e.deadPeers = nominated[:0], dead[:0]
	if len(e.solicited) > 0 {
		e.expireSolicited(now)
	}
	e.cutoffs, e.schedLevels = e.est.Cutoffs()
	e.decideGrants(b)
	for _, p := range e.peers {
		if len(p.acks) > 0 && now-p.acksSince >= 1 {
			e.flushAllAcks(p, b)
		}
	}
	e.mu.Unlock()
	e.sendBatch(b)
}

// nominate makes r its peer's RESEND candidate for this tick if r is due
// for one and has waited longer than the current candidate. It returns
// nominated with r's peer appended when the peer had no candidate yet.
func (e *Endpoint) nominate(r *rpc, now uint64, nominated []*peer) []*peer {
	due := r.rs.Due(&e.cfg.Resend)
	if due > now {
		return nominated
	}
	p := r.peer
	if p.resendRPC == nil {
		p.resendRPC, p.resendDue = r, due
		return append(nominated, p)
	}
	if due < p.resendDue || due == p.resendDue && r.id < p.resendRPC.id {
		p.resendRPC, p.resendDue = r, due
	}
	return nominated
}

// verdict is what a tick concludes about one RPC.
type verdict uint8

const (
	keep     verdict = iota
	peerDead         // the peer stopped answering RESENDs
	reclaim          // a server RPC whose client went silent
)

// resendVerdict runs r's loss detector and sends the RESEND it asks for.
// An RPC whose RESENDs go unanswered proves nothing alone (only its
// packets may be lost, or the peer is busy with others): the peer is dead
// when the whole host has been silent for a timeout while at least
// TimeoutResends RESENDs, for any of its RPCs, went to it.
func (e *Endpoint) resendVerdict(r *rpc, now uint64, b *txBatch) verdict {
	switch r.rs.Tick(now, &e.cfg.Resend) {
	case resend.Resend:
		if !e.queueResend(r, b) {
			// Every granted byte is here: repeat the GRANT, which may
			// have been lost, so that the peer has something to answer.
			e.queueGrant(r, b, r.in.granted, r.in.grantPrio)
		}
	case resend.Timeout:
		r.rs.Heard(now) // keep asking, unless the host is dead (below)
	}
	p := r.peer
	if now-p.heard >= uint64(e.cfg.Resend.TimeoutTicks()) && p.resendsUnheard >= e.cfg.Resend.TimeoutResends {
		return peerDead
	}
	return keep
}

// maxNeedAcksPerTick bounds the NEED_ACKs sent to one peer per tick.
const maxNeedAcksPerTick = 8

// tickAck: an answered server RPC waits for its acknowledgment, asking
// for it with NEED_ACK, and is reclaimed after a long silence. A NEED_ACK
// over the peer's budget is skipped; the schedule asks again at a later
// tick.
func (e *Endpoint) tickAck(r *rpc, now uint64, b *txBatch) verdict {
	switch r.ak.Tick(now, &e.cfg.Ack) {
	case ack.NeedAck:
		p := r.peer
		if p.needAckTick != now {
			p.needAckTick, p.needAcks = now, 0
		}
		if r.out.done() && p.needAcks < maxNeedAcksPerTick {
			p.needAcks++
			e.stats.needAcks.Add(1)
			e.queueBare(wire.TypeNeedAck, p.addr, r.port, r.id, b)
		}
	case ack.Reclaim:
		return reclaim
	}
	return keep
}

// maxResendGaps bounds the RESENDs one RPC sends per tick.
const maxResendGaps = 8

// queueResend asks r's peer for the ranges of r's incoming message that
// were granted but have not arrived (each gap in one RESEND, up to
// maxResendGaps), and reports whether there were any. When nothing has
// arrived, a client does not know the length and asks for everything.
func (e *Endpoint) queueResend(r *rpc, b *txBatch) bool {
	var buf [maxResendGaps]resend.Span
	gaps := buf[:0]
	if !r.inInit {
		gaps = append(gaps, resend.Span{Start: 0, End: wire.ResendToEnd})
	} else {
		gaps = resend.Gaps(r.in.spans(), r.in.granted, gaps)
	}
	for _, g := range gaps {
		n := g.End - g.Start
		if !r.inInit {
			n = wire.ResendToEnd
		}
		e.stats.resendsSent.Add(1)
		r.peer.resendsUnheard++
		rs := wire.Resend{Common: e.control(r.port, r.id), Offset: g.Start, Length: n, Priority: controlPriority}
		e.addControl(b, rs.Append(getBuf(wire.ResendLen)[:0]), r.peer.addr)
	}
	return len(gaps) > 0
}

// peerTimedOut ends every RPC with a peer that stopped answering: client
// RPCs fail with ErrPeerTimeout, and requests it had not finished sending
// are forgotten. What the endpoint knows of the peer (cutoffs) stays.
func (e *Endpoint) peerTimedOut(p *peer) {
	if p.dead == e.now {
		return // already done this tick
	}
	p.dead = e.now
	e.stats.peerTimeouts.Add(1)
	for _, r := range e.clients {
		if r.peer == p && r.state == stateActive {
			e.stats.rpcTimeouts.Add(1)
			e.fail(r, ErrPeerTimeout)
		}
	}
	for k, r := range e.servers {
		if r.peer == p && r.state == stateActive {
			e.freeServer(k, r)
		}
	}
}

// flushAllAcks sends every pending acknowledgment to p in explicit ACK
// packets, up to MaxAcks per packet, one server port at a time.
func (e *Endpoint) flushAllAcks(p *peer, b *txBatch) {
	for len(p.acks) > 0 {
		e.flushAcks(p, p.acks[0].ServerPort, b)
	}
}

// freeServer forgets a server RPC. Once the application has seen the
// request, its id is remembered so that a late duplicate of the request
// cannot start it again.
func (e *Endpoint) freeServer(k serverKey, r *rpc) {
	e.unschedule(r)
	e.unpace(r)
	if r.state != stateActive {
		e.seenFor(k.addr, r.port).Finish(r.id ^ 1)
	}
	r.peer.serverRPCs--
	delete(e.servers, k)
	freeRPC(r)
}

// clientKey names one client port of one host.
type clientKey struct {
	addr netip.Addr
	port uint16
}

// maxSeenClients bounds the client ports whose finished ids a server
// remembers; past it, an arbitrary one is forgotten.
const maxSeenClients = 4096

func (e *Endpoint) seenFor(addr netip.Addr, port uint16) *ack.Seen {
	k := clientKey{addr, port}
	if s := e.seen[k]; s != nil {
		return s
	}
	if len(e.seen) >= maxSeenClients {
		for old := range e.seen {
			delete(e.seen, old)
			break
		}
	}
	s := ack.NewSeen(seenPerClient)
	e.seen[k] = s
	return s
}

// seenPerClient is how many finished ids are remembered per client port.
const seenPerClient = 256

// Duplicate protection. ack.Seen knows the last seenPerClient finished
// request ids of a client port exactly, and treats every id at or below
// its floor as finished. At high rates the floor overtakes a live RPC
// whose request was lost, and refusing it would starve the RPC. So an id
// below the floor gets one way back in: the client RESENDs for its
// response (which only a client still waiting does: one that has the
// response has acknowledged it), the server records the id as solicited
// and asks for the request, and accepts it only as a retransmission. A
// delayed copy of the original send carries no retransmit flag.

// maxSolicited bounds the solicited ids; solicitTicks is how long one
// stays valid.
const (
	maxSolicited = 1024
	solicitTicks = 1000
)

// stale reports whether a request packet for client id from (addr, port)
// must not start an RPC: the id is finished here, or below what this
// server remembers and not solicited (retransmit is the packet's flag).
func (e *Endpoint) stale(addr netip.Addr, port uint16, id uint64, retransmit bool) bool {
	s := e.seen[clientKey{addr, port}]
	if s == nil || !s.Done(id) {
		return false
	}
	k := serverKey{addr, id | 1}
	if _, ok := e.solicited[k]; ok && retransmit && id <= s.Floor() {
		delete(e.solicited, k)
		return false
	}
	return true
}

// solicit is called for a client's RESEND about an RPC this server does
// not hold. It reports whether to ask for the request: not if the id is
// known exactly to be finished; if it is below the floor, it becomes
// solicited.
func (e *Endpoint) solicit(addr netip.Addr, port uint16, id uint64) bool {
	s := e.seen[clientKey{addr, port}]
	if s == nil || !s.Done(id) {
		return true
	}
	if id > s.Floor() {
		return false // finished here: the client's RESEND is a stray
	}
	if len(e.solicited) < maxSolicited {
		e.solicited[serverKey{addr, id | 1}] = e.now
	}
	return true
}

// expireSolicited forgets solicitations that were never taken up.
func (e *Endpoint) expireSolicited(now uint64) {
	for k, t := range e.solicited {
		if now-t > solicitTicks {
			delete(e.solicited, k)
		}
	}
}
