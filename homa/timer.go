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
	dead := e.deadPeers[:0]
	for _, r := range e.clients {
		if e.tickClient(r, now, b) == peerDead {
			dead = append(dead, r.peer)
		}
	}
	for k, r := range e.servers {
		switch e.tickServer(r, now, b) {
		case peerDead:
			dead = append(dead, r.peer)
		case reclaim:
			e.freeServer(k, r)
			e.stats.reclaimed.Add(1)
		}
	}
	for _, p := range dead {
		e.peerTimedOut(p)
	}
	e.deadPeers = dead[:0]
	for _, p := range e.peers {
		if len(p.acks) > 0 && now-p.acksSince >= 1 {
			e.flushAllAcks(p, b)
		}
	}
	e.mu.Unlock()
	e.sendBatch(b)
}

// verdict is what a tick concludes about one RPC.
type verdict uint8

const (
	keep     verdict = iota
	peerDead         // the peer stopped answering RESENDs
	reclaim          // a server RPC whose client went silent
)

// resendVerdict runs r's loss detector and sends the RESEND it asks for.
func (e *Endpoint) resendVerdict(r *rpc, now uint64, b *txBatch) verdict {
	switch r.rs.Tick(now, &e.cfg.Resend) {
	case resend.Resend:
		if !e.queueResend(r, b) {
			// Every granted byte is here: repeat the GRANT, which may
			// have been lost, so that the peer has something to answer.
			e.queueGrant(r, b, r.in.granted, 0)
		}
	case resend.Timeout:
		return peerDead
	}
	return keep
}

// tickClient: a client is owed its response once it has sent every byte
// it may send (the draft: no RESEND while our own granted bytes are
// unsent). It then asks for the first missing range of the response, or
// for all of it when nothing has come.
func (e *Endpoint) tickClient(r *rpc, now uint64, b *txBatch) verdict {
	if r.state != stateActive || r.out.next < r.out.granted {
		return keep
	}
	return e.resendVerdict(r, now, b)
}

// tickServer: a server is owed the request bytes it granted; an answered
// RPC waits for its acknowledgment.
func (e *Endpoint) tickServer(r *rpc, now uint64, b *txBatch) verdict {
	switch r.state {
	case stateActive:
		return e.resendVerdict(r, now, b)
	case stateReplying:
		switch r.ak.Tick(now, &e.cfg.Ack) {
		case ack.NeedAck:
			if r.out.done() {
				e.stats.needAcks.Add(1)
				e.queueBare(wire.TypeNeedAck, r.peer.addr, r.port, r.id, b)
			}
		case ack.Reclaim:
			return reclaim
		}
	}
	return keep
}

// queueResend asks r's peer for the first range of r's incoming message
// that was granted but has not arrived, and reports whether there was
// one. When nothing has arrived, a client does not know the length and
// asks for everything.
func (e *Endpoint) queueResend(r *rpc, b *txBatch) bool {
	off, n := uint32(0), wire.ResendToEnd
	if r.inInit {
		gap, ok := resend.Missing(r.in.spans(), r.in.granted)
		if !ok {
			return false
		}
		off, n = gap.Start, gap.End-gap.Start
	}
	e.stats.resendsSent.Add(1)
	rs := wire.Resend{Common: e.control(r.port, r.id), Offset: off, Length: n, Priority: controlPriority}
	b.add(rs.Append(getBuf(wire.ResendLen)[:0]), r.peer.addr, controlPriority)
	return true
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
