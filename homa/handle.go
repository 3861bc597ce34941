package homa

import (
	"encoding/binary"
	"net/netip"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/priority"
)

// handle dispatches one received packet. It runs under e.mu. Every packet
// is untrusted: anything malformed or aimed at state the sender does not
// own is dropped and counted, never trusted further.
func (e *Endpoint) handle(pkt []byte, src netip.Addr, b *txBatch) {
	if e.is4 {
		src = src.Unmap()
	}
	if len(pkt) >= wire.CommonLen && dstPort(pkt) != e.port {
		// The kernel filter passes only our port; this is a stray.
		e.stats.drop(dropOtherPort)
		return
	}
	p := &e.rxPkt
	if err := p.Parse(pkt); err != nil {
		e.stats.drop(dropReasonOf(err))
		return
	}
	e.stats.countRx(p.Type, len(pkt))
	if pr := e.peers[src]; pr != nil {
		pr.heard = e.now // the peer is alive, whatever the packet is about
		pr.resendsUnheard = 0
	}
	switch p.Type {
	case wire.TypeData:
		e.handleData(&p.Data, src, b)
	case wire.TypeGrant:
		e.handleGrant(&p.Grant, src, b)
	case wire.TypeResend:
		e.handleResend(&p.Resend, src, b)
	case wire.TypeCutoffs:
		e.handleCutoffs(&p.Cutoffs, src)
	case wire.TypeAck:
		e.handleAck(&p.Ack, src)
	case wire.TypeRPCUnknown, wire.TypeBusy, wire.TypeNeedAck:
		e.handleBare(&p.Common, src, b)
	default: // FREEZE: a Linux debugging aid, ignored
		e.stats.drop(dropIgnored)
	}
	p.Data.Payload = nil // do not keep the receive buffer reachable
}

// lookup finds the RPC a packet from src belongs to. The packet's sender
// id with the low bit flipped is the local id; a client RPC must also
// match the peer host and port it was sent to, so that no other host can
// touch it.
func (e *Endpoint) lookup(c *wire.Common, src netip.Addr) *rpc {
	id := c.SenderID ^ 1
	var r *rpc
	if id&1 == 0 {
		r = e.clients[id]
	} else {
		r = e.servers[serverKey{src, id}]
	}
	if r == nil || r.peer.addr != src || r.port != c.SrcPort {
		return nil
	}
	// Any packet about the RPC shows the peer is alive.
	r.rs.Heard(e.now)
	r.ak.Heard(e.now)
	return r
}

func (e *Endpoint) handleData(d *wire.Data, src netip.Addr, b *txBatch) {
	off := d.Offset()
	if d.MessageLength == 0 || d.MessageLength > MaxMessage ||
		uint64(off)+uint64(len(d.Payload)) > uint64(d.MessageLength) {
		e.stats.drop(dropBadField)
		return
	}
	if d.Ack.ClientID != 0 && d.SenderID&1 == 0 {
		e.acked(src, d.Ack) // a client's piggybacked acknowledgment
	}
	r := e.lookup(&d.Common, src)
	if r == nil {
		if r = e.newServerRPC(d, src); r == nil {
			return
		}
	}
	if r.state != stateActive {
		e.stats.dupPackets.Add(1)
		return
	}
	if d.CutoffVersion != e.cutoffs.Version &&
		priority.Stale(e.cutoffs.Version, d.CutoffVersion, r.peer.cutoffsSent, e.now) {
		e.queueCutoffs(r.peer, d.SrcPort, r.id, b)
	}
	if !r.inInit {
		r.in.init(d.MessageLength, d.Incoming)
		r.inInit = true
		e.est.Record(d.MessageLength, r.in.granted)
		e.schedule(r)
	} else if d.MessageLength != r.in.length {
		e.stats.drop(dropBadField)
		return
	}
	if r.in.add(off, d.Payload) > 0 {
		r.rs.Progress(e.now)
		if r.gid != 0 {
			e.sched.Received(r.gid, r.in.received)
		}
	} else if len(d.Payload) > 0 {
		e.stats.dupPackets.Add(1)
	}
	if r.in.complete() {
		e.completeIn(r, b)
	}
}

// newServerRPC creates the state for a request whose first packet just
// arrived, or returns nil (counted) when the packet cannot start one.
func (e *Endpoint) newServerRPC(d *wire.Data, src netip.Addr) *rpc {
	id := d.SenderID ^ 1
	if id&1 == 0 {
		// A response for a client RPC we do not have (finished, aborted,
		// or forged): nothing to do.
		e.stats.drop(dropUnknownRPC)
		return nil
	}
	if r := e.servers[serverKey{src, id}]; r != nil {
		// Same host and id from another port: not the sender's RPC.
		e.stats.drop(dropBadField)
		return nil
	}
	if e.stale(src, d.SrcPort, d.SenderID, d.Retransmit != 0) {
		// A late duplicate of a request this server already finished.
		e.stats.drop(dropStale)
		return nil
	}
	p := e.peers[src]
	if len(e.servers) >= e.cfg.MaxServerRPCs ||
		(p == nil && len(e.peers) >= e.cfg.MaxPeers) ||
		(p != nil && p.serverRPCs >= e.cfg.MaxServerRPCsPerPeer) {
		e.stats.drop(dropLimit)
		return nil
	}
	if p == nil {
		p = e.peerFor(src)
	}
	r := newRPC()
	r.id, r.peer, r.port = id, p, d.SrcPort
	r.rs.Start(e.now)
	p.serverRPCs++
	e.stats.serverRPCsStarted.Add(1)
	e.servers[serverKey{src, id}] = r
	return r
}

// completeIn hands a fully received message to the application.
func (e *Endpoint) completeIn(r *rpc, b *txBatch) {
	e.unschedule(r)
	m := &Message{
		ID:   r.id,
		Peer: netip.AddrPortFrom(r.peer.addr, r.port),
		Data: r.in.buf,
	}
	r.in.buf = nil
	if r.isClient() {
		// The server had the whole request, so its bytes are no longer
		// needed; the server may now forget the RPC once told.
		m.Cookie = r.cookie
		e.unpace(r)
		r.out.release()
		r.state = stateDone
		e.stats.rpcsCompleted.Add(1)
		e.stats.hist.message(Received, Response, int(r.in.length))
		e.stats.hist.rpcDone(max(r.out.length, r.in.length), e.stats.since()-r.start)
		if r.peer.addAck(wire.AckEntry{ClientID: r.id, ServerPort: r.port}, e.now) >= wire.MaxAcks {
			e.flushAcks(r.peer, r.port, b)
		}
	} else {
		r.state = stateServing
		e.stats.requestsReceived.Add(1)
		e.stats.hist.message(Received, Request, int(r.in.length))
	}
	e.deliver(r, m)
}

// flushAcks queues an ACK packet for up to MaxAcks pending
// acknowledgments to one server port.
func (e *Endpoint) flushAcks(p *peer, port uint16, b *txBatch) {
	var acks [wire.MaxAcks]wire.AckEntry
	n := p.takeAcks(port, acks[:])
	if n == 0 {
		return
	}
	e.queueAck(p.addr, port, acks[:n], b)
}

// acked frees a server RPC whose client has the whole response.
func (e *Endpoint) acked(src netip.Addr, a wire.AckEntry) {
	if a.ServerPort != e.port {
		e.stats.drop(dropOtherPort)
		return
	}
	key := serverKey{src, a.ClientID | 1}
	r := e.servers[key]
	if r == nil || r.state != stateReplying || !r.out.done() {
		return // unknown, or a claim about a response not yet sent
	}
	e.freeServer(key, r)
	e.stats.serverRPCsFreed.Add(1)
}

func (e *Endpoint) handleGrant(g *wire.Grant, src netip.Addr, b *txBatch) {
	r := e.lookup(&g.Common, src)
	if r == nil {
		e.stats.drop(dropUnknownRPC)
		return
	}
	if r.out.data == nil {
		return // nothing being sent (the response is not ready yet)
	}
	if r.out.grant(g.Offset, min(g.Priority, wire.NumPriorities-1)) {
		e.sendMore(r, b)
	}
}

// handleResend answers a RESEND:
//   - for an RPC it does not know, a client answers RPC_UNKNOWN and a
//     server asks for the request from its start (unless it has finished
//     that RPC already);
//   - a server still receiving the request asks for what it misses, which
//     also repeats a lost GRANT; one whose response is not ready answers
//     BUSY;
//   - otherwise the range is retransmitted with the retransmit flag set.
//     A RESEND also grants up to its end: the receiver's GRANT may have
//     been lost.
//
// Ranges beyond the message are ignored.
func (e *Endpoint) handleResend(rs *wire.Resend, src netip.Addr, b *txBatch) {
	r := e.lookup(&rs.Common, src)
	id := rs.SenderID ^ 1
	switch {
	case r == nil && id&1 == 0:
		e.queueBare(wire.TypeRPCUnknown, src, rs.SrcPort, id, b)
	case r == nil:
		if !e.solicit(src, rs.SrcPort, rs.SenderID) {
			e.stats.drop(dropStale)
			return
		}
		req := wire.Resend{Common: e.control(rs.SrcPort, id), Length: uint32(e.cfg.UnschedBytes), Priority: controlPriority}
		e.addControl(b, req.Append(getBuf(wire.ResendLen)[:0]), src)
	case r.state == stateActive && !r.isClient():
		if e.queueResend(r, b) {
			return
		}
		e.queueGrant(r, b, r.in.granted, r.in.grantPrio)
	case r.out.data == nil:
		e.queueBare(wire.TypeBusy, src, rs.SrcPort, r.id, b)
	case rs.Offset >= r.out.length:
		e.stats.drop(dropBadField)
	default:
		end := min(uint64(rs.Offset)+uint64(rs.Length), uint64(r.out.length))
		if rs.Length == wire.ResendToEnd {
			end = uint64(r.out.length)
		}
		r.out.grant(uint32(end), r.out.schedPrio)
		if from, to := rs.Offset, min(uint32(end), r.out.next); from < to {
			e.stats.retransmits.Add(1)
			e.queueData(r, b, from, to, true)
			e.account(int(to-from) + wire.DataLen)
		}
		e.sendMore(r, b)
	}
}

func (e *Endpoint) handleCutoffs(c *wire.Cutoffs, src netip.Addr) {
	p := e.peers[src]
	if p == nil {
		e.stats.drop(dropUnknownRPC)
		return
	}
	p.cutoffs = priority.Cutoffs{Values: c.Cutoffs, Version: c.Version}
}

// handleAck frees the server RPCs an ACK names: the one in its common
// header, then its entries.
func (e *Endpoint) handleAck(a *wire.Ack, src netip.Addr) {
	if a.SenderID&1 != 0 {
		e.stats.drop(dropBadField) // ACKs come from clients
		return
	}
	e.acked(src, wire.AckEntry{ClientID: a.SenderID, ServerPort: a.DstPort})
	for _, x := range a.Entries() {
		e.acked(src, x)
	}
}

func (e *Endpoint) handleBare(c *wire.Common, src netip.Addr, b *txBatch) {
	r := e.lookup(c, src)
	switch c.Type {
	case wire.TypeNeedAck:
		// A client acknowledges unless it knows the response is
		// incomplete.
		id := c.SenderID ^ 1
		if id&1 != 0 || (r != nil && r.state != stateDone) {
			return
		}
		e.queueAck(src, c.SrcPort, []wire.AckEntry{{ClientID: id, ServerPort: c.SrcPort}}, b)
	case wire.TypeRPCUnknown:
		switch {
		case r == nil:
			e.stats.drop(dropUnknownRPC)
		case r.isClient() && r.state == stateActive:
			// The server lost the request: send it again from the start.
			e.stats.retransmits.Add(1)
			e.queueData(r, b, 0, r.out.next, true)
			e.account(int(r.out.next) + wire.DataLen)
		case !r.isClient():
			e.freeServer(serverKey{src, r.id}, r)
		}
	case wire.TypeBusy:
		// The peer is alive; loss recovery (timers) takes note.
	}
}

// dstPort reads the destination port of a packet PeekType accepted.
func dstPort(pkt []byte) uint16 { return binary.BigEndian.Uint16(pkt[2:4]) }
