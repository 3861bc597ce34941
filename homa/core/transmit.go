package core

import (
	"net/netip"

	"github.com/homa-go/homa/homa/wire"
)

// controlPriority is the priority of every packet but DATA.
const controlPriority = wire.NumPriorities - 1

// emit appends a packet to the call's output.
func (c *Core) emit(buf []byte, dst netip.Addr, prio uint8) {
	c.out.Packets = append(c.out.Packets, Packet{Buf: buf, Addr: dst, Priority: prio})
	c.txControl()
}

// sendMore queues every segment of r's outgoing message that is granted
// (in part) but not yet sent (through the pacer, when pacing).
func (c *Core) sendMore(r *rpc) {
	m := &r.out
	if m.data == nil || m.next >= m.granted || r.unknownTick != 0 {
		return
	}
	if c.pacer != nil {
		c.pace(r)
		return
	}
	end := m.sendable()
	c.queueData(r, m.next, end, false)
	m.next = end
	c.sentAll(r)
}

// sentAll notes that r has sent every byte it may send for now: a
// client is owed its response from then on.
func (c *Core) sentAll(r *rpc) {
	if r.isClient() && r.state == stateActive {
		r.rs.Start(c.tick)
		c.armRPC(r, c.at(r.rs.Due(&r.peer.resend)))
	}
}

// addControl queues a packet other than DATA: at the highest priority,
// bypassing the pacer's queue but counted against its budget.
func (c *Core) addControl(buf []byte, dst netip.Addr) {
	c.emit(buf, dst, controlPriority)
	c.account(len(buf))
}

// queueData segments bytes [from, to) of r's outgoing message into DATA
// packets sized for the peer: a header of its own and, for messages of
// ZeroCopyMin bytes or more, a payload that points into the message (not
// a copy), which the Output holds. Client
// requests carry one pending acknowledgment for the same server port in
// each packet.
func (c *Core) queueData(r *rpc, from, to uint32, retransmit bool) {
	m := &r.out
	p := r.peer
	cut := p.cutoffsFor(r.port)
	seg := m.seg
	d := wire.Data{
		Common: wire.Common{
			SrcPort:  c.port,
			DstPort:  r.port,
			SenderID: r.id,
		},
		MessageLength: m.length,
		Incoming:      m.unsched,
		CutoffVersion: cut.Version,
	}
	if retransmit {
		d.Retransmit = 1
		c.stats.ResentPackets += uint64((to - from + seg - 1) / seg)
	}
	unschedPrio := cut.Priority(m.length)
	for off := from; off < to; {
		n := min(m.segUp(off+1), to) - off
		d.Sequence = off
		d.SegOffset = off
		d.Ack = wire.AckEntry{}
		if r.isClient() {
			d.Ack = p.takeAck(r.port)
		}
		prio := m.schedPrio
		if off < m.unsched {
			prio = unschedPrio
		}
		pkt := Packet{Addr: p.addr, Priority: prio}
		if m.hold != nil {
			pkt.Buf = wire.AppendDataHeader(c.bufs.Get(wire.DataLen)[:0], &d)
			pkt.Payload = m.data[off : off+n]
		} else {
			pkt.Buf = wire.AppendDataHeader(c.bufs.Get(wire.DataLen + int(n))[:0], &d)
			pkt.Buf = append(pkt.Buf, m.data[off:off+n]...)
		}
		c.out.Packets = append(c.out.Packets, pkt)
		c.txData(r, off)
		off += n
	}
	if m.hold != nil {
		c.out.hold(m.hold)
	}
	if r.isClient() && len(p.acks) == 0 {
		c.timers.disarm(&p.timer) // the requests carried them all
	}
}

// queueGrant queues a GRANT for r's incoming message.
func (c *Core) queueGrant(r *rpc, offset uint32, prio uint8) {
	g := wire.Grant{Common: c.control(r.port, r.id), Offset: offset, Priority: prio}
	c.addControl(g.Append(c.bufs.Get(wire.GrantLen)[:0]), r.peer.addr)
}

// queueBare queues a packet that is only a common header (RPC_UNKNOWN,
// BUSY, NEED_ACK) with the given sender id.
func (c *Core) queueBare(t wire.Type, dst netip.Addr, port uint16, id uint64) {
	p := wire.Bare{Common: c.control(port, id)}
	p.Type = t
	c.addControl(p.Append(c.bufs.Get(wire.CommonLen)[:0]), dst)
}

// queueAck queues an ACK packet to a server port naming up to MaxAcks
// client RPCs; the first is also named in the common header, as Linux
// clients send it.
func (c *Core) queueAck(dst netip.Addr, port uint16, acks []wire.AckEntry) {
	a := wire.Ack{Common: c.control(port, acks[0].ClientID)}
	a.NumAcks = uint16(copy(a.Acks[:], acks))
	c.addControl(a.Append(c.bufs.Get(wire.AckLen)[:0]), dst)
}

func (c *Core) control(dstPort uint16, id uint64) wire.Common {
	return wire.Common{SrcPort: c.port, DstPort: dstPort, SenderID: id}
}

// queueCutoffs tells a peer our unscheduled cutoffs, in answer to a DATA
// packet of RPC id (our id) that carried a stale version.
func (c *Core) queueCutoffs(p *peer, port uint16, id uint64) {
	cut, _ := c.est.Cutoffs()
	h := wire.Cutoffs{Common: c.control(port, id), Cutoffs: cut.Values, Version: cut.Version}
	c.addControl(h.Append(c.bufs.Get(wire.CutoffsLen)[:0]), p.addr)
	p.cutoffsSent = c.tick
	c.stats.CutoffsSent++
}
