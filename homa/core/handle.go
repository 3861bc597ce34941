package core

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/priority"
)

// Handle processes one received packet from host src at time now. pkt is
// only read during the call. Every packet is untrusted: anything
// malformed, or aimed at state the sender does not own, is dropped and
// counted, never trusted further.
func (c *Core) Handle(pkt []byte, src netip.Addr, now time.Duration, out *Output) {
	if c.closed {
		return
	}
	c.begin(now, out)
	c.rx = rxPacket{buf: pkt}
	c.handle(pkt, c.canon(src))
	c.rx = rxPacket{}
	c.end()
}

// Inbound is a packet for HandleBatch: a Homa packet from host Addr,
// or, when Unreachable is set, an ICMP report that a packet sent to Addr
// was not delivered, Buf holding the start of that packet as the report
// quoted it (see Unreachable).
//
// With Own set, the caller lets the core keep Buf (a buffer from the
// core's Buffers, with its whole capacity) as the storage of the
// message it belongs to, rather than copy the payload out of it: the
// core then sets Buf to nil, and the buffer goes back to Buffers when
// the message is done with it.
//
// Land, when not empty, is the part of the packet the read put in one
// of the regions Lend returned: the packet is then Buf[:wire.DataLen],
// Land, and the rest of Buf (see land.go). Buf must have room for the
// whole packet.
type Inbound struct {
	Buf         []byte
	Land        []byte
	Addr        netip.Addr
	Unreachable Unreachability
	Own         bool
}

// HandleBatch processes several packets at once: grant decisions and
// pacing are taken once for the batch. It handles them in SRPT order,
// not arrival order: packets other than DATA first, then each message's
// DATA, fewest remaining bytes first (see rxorder.go). It ends the loan
// of Lend.
func (c *Core) HandleBatch(pkts []Inbound, now time.Duration, out *Output) {
	defer c.endLoan()
	if c.closed {
		return
	}
	c.begin(now, out)
	c.settleLanding(pkts)
	order := c.rxOrder(pkts) // SRPT: see rxorder.go
	for k := range pkts {
		i := k
		if order != nil {
			i = int(order[k].idx)
		}
		p := &pkts[i]
		if p.Unreachable != 0 {
			c.unreachable(p.Unreachable, p.Buf, c.canon(p.Addr))
			continue
		}
		c.rx = rxPacket{buf: p.Buf, land: p.Land, own: p.Own}
		c.handle(p.Buf, c.canon(p.Addr))
		if c.rx.kept {
			p.Buf = nil
		}
	}
	c.rx = rxPacket{}
	c.end()
}

// rxPacket is the packet being handled: its buffer, whether the core may
// keep it, and whether it did.
type rxPacket struct {
	buf       []byte
	land      []byte // the payload, received in place (see land.go)
	own, kept bool
}

func (c *Core) handle(pkt []byte, src netip.Addr) {
	if len(pkt) < wire.CommonLen {
		c.drop(contract.DropShort)
		return
	}
	if binary.BigEndian.Uint16(pkt[2:4]) != c.port {
		c.drop(contract.DropOtherPort) // the kernel filter passes only our port; a stray
		return
	}
	p := &c.rxPkt
	if err := p.Parse(pkt); err != nil {
		c.drop(dropReasonOf(err))
		return
	}
	c.stats.countRx(p.Type, len(pkt)+len(c.rx.land))
	switch p.Type {
	case wire.TypeData:
		if c.rx.land != nil {
			p.Data.Payload = c.rx.land
		}
		c.handleData(&p.Data, src)
	case wire.TypeGrant:
		c.handleGrant(&p.Grant, src)
	case wire.TypeResend:
		c.handleResend(&p.Resend, src)
	case wire.TypeCutoffs:
		c.handleCutoffs(&p.Cutoffs, src)
	case wire.TypeAck:
		c.handleAck(&p.Ack, src)
	case wire.TypeRPCUnknown, wire.TypeBusy, wire.TypeNeedAck:
		c.handleBare(&p.Common, src)
	default: // FREEZE: a Linux debugging aid, ignored
		c.drop(contract.DropIgnored)
	}
	p.Data.Payload = nil // do not keep the receive buffer reachable
}

func (c *Core) drop(r contract.DropReason) { c.stats.Drops[r]++ }

// lookup finds the RPC a packet from src belongs to: the packet's sender
// id with the low bit flipped is the local id, and the RPC's peer host
// and port must be the packet's, so that no other host or port can touch
// it. Any packet about an RPC shows its peer is alive for it.
func (c *Core) lookup(h *wire.Common, src netip.Addr) *rpc {
	id := h.SenderID ^ 1
	var r *rpc
	if id&1 == 0 {
		r = c.clients[id]
	} else {
		r = c.servers.get(src, id)
	}
	if r == nil || r.peer.addr != src || r.port != h.SrcPort {
		return nil
	}
	switch h.Type {
	case wire.TypeData, wire.TypeGrant, wire.TypeBusy:
		r.rs.Alive(c.tick)
	default:
		r.rs.Heard(c.tick)
	}
	r.ak.Heard(c.tick)
	r.unknownTick = 0
	return r
}

func (c *Core) handleData(d *wire.Data, src netip.Addr) {
	off := d.Offset()
	if d.MessageLength == 0 || d.MessageLength > contract.MaxMessage || len(d.Payload) == 0 ||
		uint64(off)+uint64(len(d.Payload)) > uint64(d.MessageLength) {
		c.drop(contract.DropBadField)
		return
	}
	if d.Ack.ClientID != 0 && d.SenderID&1 == 0 {
		c.deferAck(src, d.Ack) // a client's piggybacked acknowledgment (idle.go)
	}
	// A message that fits in one packet completes in this call: it
	// never waits among the messages being received, for grants or for
	// its resend timer, and skips their bookkeeping.
	whole := off == 0 && uint32(len(d.Payload)) == d.MessageLength
	r := c.lookup(&d.Common, src)
	if r == nil {
		if r = c.newServerRPC(d, src, whole); r == nil {
			return
		}
	}
	if r.state != stateActive {
		c.stats.DuplicatePackets++
		return
	}
	if cut, _ := c.est.Cutoffs(); d.CutoffVersion != cut.Version &&
		priority.Stale(cut.Version, d.CutoffVersion, r.peer.cutoffsSent, c.tick) {
		c.queueCutoffs(r.peer, d.SrcPort, r.id)
	}
	if !r.inInit {
		r.in.init(d.MessageLength, d.Incoming)
		r.inInit = true
		c.est.Record(d.MessageLength, r.in.granted)
		if !whole {
			c.startReceiving(r)
			c.schedule(r)
		}
	} else if d.MessageLength != r.in.length {
		c.drop(contract.DropBadField)
		return
	}
	end := off + uint32(len(d.Payload))
	if !r.in.fresh(off, end) {
		c.stats.DuplicatePackets++
		return
	}
	keep, need := r.in.plan(d.Payload, c.rx.buf, c.rx.own)
	if need > 0 && !c.admitMemory(r, need) {
		c.drop(contract.DropMemory)
		if !r.isClient() && r.in.received == 0 {
			c.freeServer(r, false) // nothing of it is held: its client will retry
		}
		return
	}
	c.storing(&r.in)
	_, committed := r.in.store(off, d.Payload, c.rx.buf, keep, c.bufs)
	c.charge(r, committed)
	c.rx.kept = keep
	c.landed(r, off, end)
	r.rs.Progress(c.tick)
	c.arrived(r, off, d.Retransmit != 0)
	if !whole {
		c.touch(r)
	}
	if r.gid != 0 {
		c.sched.Received(r.gid, r.in.received)
	} else if r.parked {
		c.unpark(r)
	}
	if r.in.complete() {
		c.completeIn(r)
	}
}

// newServerRPC creates the state for a request whose first packet just
// arrived, or returns nil (counted) when the packet cannot start one.
func (c *Core) newServerRPC(d *wire.Data, src netip.Addr, whole bool) *rpc {
	id := d.SenderID ^ 1
	if id&1 == 0 {
		// A response for a client RPC we do not have (finished, aborted,
		// or forged): nothing to do.
		c.drop(contract.DropUnknownRPC)
		return nil
	}
	if c.servers.get(src, id) != nil {
		// Same host and id from another port: not the sender's RPC.
		c.drop(contract.DropBadField)
		return nil
	}
	if c.stale(src, d.SrcPort, d.SenderID, d.Retransmit != 0) {
		// A late duplicate of a request this server already finished.
		c.drop(contract.DropStale)
		return nil
	}
	p := c.peerFor(src)
	if p == nil {
		c.drop(contract.DropLimit)
		return nil
	}
	c.lapseReservations()
	if !c.reservedFor(p, d.SrcPort, id) && c.atReplyBound(p) {
		c.drop(contract.DropLimit)
		if d.Retransmit == 0 { // see Refused retransmissions in recall.go
			c.refuse(p, d.SrcPort, id, d.MessageLength)
		}
		return nil
	}
	if !c.admitIncoming(p, d.SrcPort) {
		c.drop(contract.DropLimit)
		return nil
	}
	c.admitted(p, d.SrcPort, id)
	r := c.newRPC()
	r.id, r.peer, r.port = id, p, d.SrcPort
	r.use = p.useOf(d.SrcPort)
	r.rs.Start(c.tick)
	c.holdPeer(p)
	c.stats.ServerRPCsStarted++
	c.servers.add(r)
	if !whole {
		c.enterIncoming(r)
		c.armRPC(r, c.at(r.rs.Due(&p.resend)))
	}
	return r
}

// completeIn hands a fully received message to the application.
func (c *Core) completeIn(r *rpc) {
	c.unschedule(r)
	c.stopReceiving(r)
	r.parked = false
	old := r.in.mem
	c.handOver(&r.in)
	data, backing, mem := r.in.take(c.bufs)
	m := c.newMessage()
	*m = contract.Message{ID: r.id, Peer: r.peerAddrPort()}
	m.SetData(data, backing, c.shared)
	if r.isClient() {
		// The server had the whole request, so the RPC is over here;
		// the server may forget it once told. The response is the
		// application's.
		m.Cookie = r.cookie
		c.charge(r, -old)
		c.stats.RPCsCompleted++
		c.stats.hist.message(contract.Received, contract.Response, int(r.in.length))
		c.stats.hist.rpcDone(max(r.out.length, r.in.length), c.now-r.start)
		p := r.peer
		eager := len(c.clients) == 1 && c.think.done(c.now) // see quiet.go
		if p.addAck(wireAck(r), c.tick) >= ackBacklog || eager {
			c.flushAcks(p, r.port)
		}
		if len(p.acks) > 0 {
			c.timers.arm(&p.timer, c.at(p.acksDue()))
		}
		c.out.Messages = append(c.out.Messages, m)
		c.freeClientLater(r)
		return
	}
	// The request counts against memory until the application takes it.
	r.in.mem = mem
	c.charge(r, mem-old)
	c.leaveIncoming(r)
	c.setState(r, stateServing)
	c.stats.RequestsReceived++
	c.stats.hist.message(contract.Received, contract.Request, int(r.in.length))
	c.out.Messages = append(c.out.Messages, m)
}

func wireAck(r *rpc) wire.AckEntry { return wire.AckEntry{ClientID: r.id, ServerPort: r.port} }

// flushAcks queues an ACK packet for up to MaxAcks pending
// acknowledgments to one server port.
func (c *Core) flushAcks(p *peer, port uint16) {
	n := p.takeAcks(port, c.ackScratch[:])
	if n > 0 {
		c.queueAck(p.addr, port, c.ackScratch[:n])
	}
	c.acksTaken(p)
}

// acked frees a server RPC whose client has the whole response. Client
// ids are unique per host, so an acknowledgment names its RPC by host and
// id; the port is that of the packet that carries it only for the
// acknowledgment in an ACK's header.
func (c *Core) acked(src netip.Addr, a wire.AckEntry) {
	if a.ServerPort != c.port {
		c.drop(contract.DropOtherPort)
		return
	}
	r := c.servers.get(src, a.ClientID|1)
	if r == nil {
		return
	}
	// Whatever the server RPC's state: the client needs nothing more of
	// it (it has the response, or closed its socket), as with Linux.
	if r.state == stateReplying && r.out.unsched >= r.out.length {
		// A response sent whole at once: its acknowledgment's delay is
		// the client's (see AwaitsAcks).
		r.peer.lateAcks = c.now-r.replied > promptAck
	}
	c.stats.ServerRPCsFreed++
	c.freeServer(r, true)
}

func (c *Core) handleGrant(g *wire.Grant, src netip.Addr) {
	r := c.lookup(&g.Common, src)
	if r == nil {
		c.drop(contract.DropUnknownRPC)
		return
	}
	if r.out.data == nil {
		return // nothing being sent (the response is not ready yet)
	}
	if r.out.grant(g.Offset, min(g.Priority, wire.NumPriorities-1)) {
		c.sendMore(r)
	}
}

// handleResend answers a RESEND:
//   - for an RPC it does not know, a client answers RPC_UNKNOWN and a
//     server asks for the request from its start (unless it has finished
//     that RPC already);
//   - a server whose response is not ready (its request may still be
//     arriving) answers BUSY, as Linux does: its own loss detection asks
//     for what it misses, and asking on the client's RESEND would fetch
//     again granted bytes that are on their way;
//   - otherwise the range is retransmitted with the retransmit flag set,
//     clamped to the bytes already sent (a RESEND "to the end", from a
//     receiver that has nothing, gets the unscheduled bytes), each byte
//     at most once per resend interval, and at most one copy of the
//     message per rexmitWindowIntervals intervals. A RESEND with a finite
//     range also grants up to its end: the receiver's GRANT may have
//     been lost.
func (c *Core) handleResend(rs *wire.Resend, src netip.Addr) {
	r := c.lookup(&rs.Common, src)
	id := rs.SenderID ^ 1
	switch {
	case r == nil && id&1 == 0:
		c.queueBare(wire.TypeRPCUnknown, src, rs.SrcPort, id)
	case r == nil && c.refused(src, rs.SrcPort, id):
		// The request waits for room and will be asked for (recall.go):
		// the client need not send it again meanwhile.
		c.queueBare(wire.TypeBusy, src, rs.SrcPort, id)
	case r == nil:
		if !c.solicit(src, rs.SrcPort, rs.SenderID) {
			c.drop(contract.DropStale)
			return
		}
		req := wire.Resend{Common: c.control(rs.SrcPort, id), Length: uint32(c.unschedTo(src)), Priority: controlPriority}
		c.addControl(req.Append(c.bufs.Get(wire.ResendLen)[:0]), src)
	case r.out.data == nil:
		c.queueBare(wire.TypeBusy, src, rs.SrcPort, r.id)
	case rs.Offset >= r.out.length:
		c.drop(contract.DropBadField)
	default:
		r.askedBack()
		c.retransmit(r, rs)
	}
}

// rexmitWindowIntervals is the budget window of retransmissions, in
// resend intervals (100 ms by default): at most one copy of a message is
// retransmitted in it, so a stream of RESENDs for a whole large message
// costs its sender at most that.
const rexmitWindowIntervals = 20

// retransmit answers a RESEND for r's outgoing message (see handleResend).
func (c *Core) retransmit(r *rpc, rs *wire.Resend) {
	m := &r.out
	end := uint32(min(uint64(rs.Offset)+uint64(rs.Length), uint64(m.length)))
	if rs.Length == wire.ResendToEnd {
		end = max(m.segUp(m.unsched), rs.Offset) // the receiver has nothing
	} else {
		m.grant(end, m.schedPrio)
	}
	// Just under the receiver's RESEND interval, so that its next
	// round is answered even when it comes a little early.
	interval := c.at(uint64(c.cfg.Resend.ResendInterval)) - c.cfg.Tick/2
	window := c.at(uint64(rexmitWindowIntervals * c.cfg.Resend.ResendInterval))
	if from, to, ok := m.allowRexmit(rs.Offset, min(end, m.next), c.now, interval, window); ok {
		c.stats.Retransmits++
		c.resendData(r, from, to)
	} else if rs.Offset < min(end, m.next) {
		c.stats.ResendsIgnored++
	}
	c.sendMore(r)
}

// handleAck frees the server RPCs an ACK names: the one in its common
// header, then its entries.
func (c *Core) handleAck(a *wire.Ack, src netip.Addr) {
	if a.SenderID&1 != 0 {
		c.drop(contract.DropBadField) // ACKs come from clients
		return
	}
	c.acked(src, wire.AckEntry{ClientID: a.SenderID, ServerPort: a.DstPort})
	for _, x := range a.Entries() {
		c.acked(src, x)
	}
}

func (c *Core) handleBare(h *wire.Common, src netip.Addr) {
	id := h.SenderID ^ 1
	if h.Type == wire.TypeRPCUnknown {
		// Looked up without counting as a sign of life: the peer says
		// it does not know the RPC.
		c.handleUnknown(h, src, id)
		return
	}
	r := c.lookup(h, src)
	switch h.Type {
	case wire.TypeNeedAck:
		// A client acknowledges unless it knows the response is
		// incomplete.
		if id&1 != 0 || r != nil {
			return
		}
		c.queueAck(src, h.SrcPort, []wire.AckEntry{{ClientID: id, ServerPort: h.SrcPort}})
	case wire.TypeBusy:
		// The peer is alive for the RPC (lookup took note) and
		// answered its RESEND.
		if r != nil {
			c.answered(r)
		}
	}
}

// handleUnknown: a server that lost our request gets it again from the
// start; a client that does not know a server RPC makes the server stop
// sending and forget the RPC after a grace period (a forged RPC_UNKNOWN
// cannot then end an RPC whose client still asks for it).
// unknownGrace is how long (in ticks) a server RPC whose client said
// RPC_UNKNOWN is kept, in case the claim was forged: a client still
// waiting for the RPC RESENDs within it, which keeps the RPC.
func unknownGrace(r *rpc) uint64 {
	rs := &r.peer.resend
	return uint64(max(rs.ResendTicks, rs.ResendInterval) + rs.ResendInterval + 1)
}

func (c *Core) handleUnknown(h *wire.Common, src netip.Addr, id uint64) {
	var r *rpc
	if id&1 == 0 {
		r = c.clients[id]
	} else {
		r = c.servers.get(src, id)
	}
	if r == nil || r.peer.addr != src || r.port != h.SrcPort {
		if id&1 == 1 {
			c.withdraw(src, id)
		}
		c.drop(contract.DropUnknownRPC)
		return
	}
	switch {
	case r.isClient() && r.state == stateActive:
		c.stats.Retransmits++
		c.resendData(r, 0, r.out.next)
	case !r.isClient() && r.unknownTick == 0:
		r.unknownTick = c.tick + 1
		c.unpace(r)
		c.armRPC(r, c.at(c.tick+unknownGrace(r)))
	}
}
