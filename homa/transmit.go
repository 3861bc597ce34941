package homa

import (
	"net/netip"

	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// controlPriority is the priority of every packet but DATA.
const controlPriority = wire.NumPriorities - 1

// txBatch collects packets built under the endpoint's mutex, to be
// written after it is released. Packet buffers come from the buffer pool
// and go back after the write.
type txBatch struct {
	pkts []netio.Packet
}

func (b *txBatch) add(buf []byte, dst netip.Addr, prio uint8) {
	b.pkts = append(b.pkts, netio.Packet{Buf: buf, N: len(buf), Addr: dst, Priority: prio})
}

func (e *Endpoint) getBatch() *txBatch {
	if b, _ := e.batches.Get().(*txBatch); b != nil {
		return b
	}
	return &txBatch{}
}

// sendBatch writes a batch from getBatch and returns it to the pool.
func (e *Endpoint) sendBatch(b *txBatch) {
	e.flush(b)
	e.batches.Put(b)
}

// flush writes the batch, recycles its buffers and empties it. Packets
// the Conn refuses are counted and dropped: loss recovery resends what
// matters.
func (e *Endpoint) flush(b *txBatch) {
	pkts := b.pkts
	for len(pkts) > 0 {
		n, err := e.conn.WriteBatch(pkts)
		for i := range pkts[:n] {
			e.stats.countTx(&pkts[i])
		}
		if err != nil {
			e.stats.writeErrors.Add(1)
			n++ // skip the packet that failed
		}
		pkts = pkts[min(n, len(pkts)):]
	}
	for i := range b.pkts {
		putBuf(b.pkts[i].Buf)
		b.pkts[i] = netio.Packet{}
	}
	b.pkts = b.pkts[:0]
}

// sendMore queues every byte of r's outgoing message that is granted but
// not yet sent.
func (e *Endpoint) sendMore(r *rpc, b *txBatch) {
	m := &r.out
	if m.data == nil || m.next >= m.granted {
		return
	}
	if e.pacer != nil {
		e.pace(r)
		if e.pump(b) > 0 {
			e.wakePacer()
		}
		return
	}
	e.queueData(r, b, m.next, m.granted, false)
	m.next = m.granted
	e.sentAll(r)
}

// sentAll notes that r has sent every byte it may send for now.
func (e *Endpoint) sentAll(r *rpc) {
	if r.isClient() {
		// The response is owed from when the last request byte left.
		r.rs.Start(e.now)
	}
}

// addControl queues a packet other than DATA: at the highest priority,
// bypassing the pacer's queue but counted against its budget.
func (e *Endpoint) addControl(b *txBatch, buf []byte, dst netip.Addr) {
	b.add(buf, dst, controlPriority)
	e.account(len(buf))
}

// queueData segments bytes [from, to) of r's outgoing message into DATA
// packets sized for the peer. Client requests carry one pending
// acknowledgment for the same server port in each packet.
func (e *Endpoint) queueData(r *rpc, b *txBatch, from, to uint32, retransmit bool) {
	m := &r.out
	p := r.peer
	seg := uint32(p.maxPayload)
	d := wire.Data{
		Common: wire.Common{
			SrcPort:  e.port,
			DstPort:  r.port,
			SenderID: r.id,
		},
		MessageLength: m.length,
		Incoming:      m.unsched,
		CutoffVersion: p.cutoffs.Version,
	}
	if retransmit {
		d.Retransmit = 1
		e.stats.resentPackets.Add(uint64((to - from + seg - 1) / seg))
	}
	unschedPrio := p.cutoffs.Priority(m.length)
	for off := from; off < to; {
		n := min(seg, to-off)
		d.Sequence = off
		d.SegOffset = off
		d.Ack = wire.AckEntry{}
		if r.isClient() {
			d.Ack = p.takeAck(r.port)
		}
		buf := getBuf(wire.DataLen + int(n))[:0]
		buf = wire.AppendDataHeader(buf, &d)
		buf = append(buf, m.data[off:off+n]...)
		prio := m.schedPrio
		if off < m.unsched {
			prio = unschedPrio
		}
		b.add(buf, p.addr, prio)
		off += n
	}
}

// queueGrant queues a GRANT for r's incoming message.
func (e *Endpoint) queueGrant(r *rpc, b *txBatch, offset uint32, prio uint8) {
	g := wire.Grant{Common: e.control(r.port, r.id), Offset: offset, Priority: prio}
	buf := g.Append(getBuf(wire.GrantLen)[:0])
	e.addControl(b, buf, r.peer.addr)
}

// queueBare queues a packet that is only a common header (RPC_UNKNOWN,
// BUSY, NEED_ACK) with the given sender id.
func (e *Endpoint) queueBare(t wire.Type, dst netip.Addr, port uint16, id uint64, b *txBatch) {
	p := wire.Bare{Common: e.control(port, id)}
	p.Type = t
	buf := p.Append(getBuf(wire.CommonLen)[:0])
	e.addControl(b, buf, dst)
}

// queueAck queues an ACK packet to a server port naming up to MaxAcks
// client RPCs; the first is also named in the common header, as Linux
// clients send it.
func (e *Endpoint) queueAck(dst netip.Addr, port uint16, acks []wire.AckEntry, b *txBatch) {
	a := wire.Ack{Common: e.control(port, acks[0].ClientID)}
	a.NumAcks = uint16(copy(a.Acks[:], acks))
	buf := a.Append(getBuf(wire.AckLen)[:0])
	e.addControl(b, buf, dst)
}

func (e *Endpoint) control(dstPort uint16, id uint64) wire.Common {
	return wire.Common{SrcPort: e.port, DstPort: dstPort, SenderID: id}
}

// queueCutoffs tells a peer our unscheduled cutoffs, in answer to a DATA
// packet of RPC id (our id) that carried a stale version.
func (e *Endpoint) queueCutoffs(p *peer, port uint16, id uint64, b *txBatch) {
	c := wire.Cutoffs{Common: e.control(port, id), Cutoffs: e.cutoffs.Values, Version: e.cutoffs.Version}
	e.addControl(b, c.Append(getBuf(wire.CutoffsLen)[:0]), p.addr)
	p.cutoffsSent = e.now
	e.stats.cutoffsSent.Add(1)
}
