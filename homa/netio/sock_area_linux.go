//go:build linux

package netio

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Receive area tuning.
const (
	// areaSlots is the most datagrams one receive into the area takes.
	// With GRO each may carry up to 64 KB of packets (44 of 1,472
	// bytes), so the area holds a burst of about 1 MB.
	areaSlots = 16
	// areaSlotLen is the room for one datagram: the largest IP datagram,
	// which also bounds what GRO coalesces into one.
	areaSlotLen = 1 << 16
)

// rxArea is a Conn's own receive buffer, used when datagrams may carry
// several packets (UDP GRO) and by borrowed reads. A receive fills up to
// areaSlots slots, each with one error report or one datagram (split
// into packets at the segment size the kernel gave with it); reads then
// hand the packets out from a cursor, copied into the caller's Bufs or
// lent, and the Conn receives again only when none is left. The fields
// are guarded by readState.mu, apart from pending.
type rxArea struct {
	buf   []byte                     // areaSlots slots of areaSlotLen, allocated at first use
	ctl   [areaSlots][groCtlLen]byte // each slot's control buffer (UDP_GRO)
	seg   [areaSlots]int             // each datagram's segment size; 0: one packet, -1: unusable
	slots int                        // slots the last receive filled: reports, then datagrams
	slot  int                        // cursor: the slot of the next packet
	off   int                        // and its offset in the slot's datagram
	// pending is set while packets wait behind the cursor: WaitReadable
	// then returns at once.
	pending atomic.Bool
}

// prepareArea sets the batch up to receive cnt datagrams into the area.
func (c *sockConn) prepareArea(cnt int) {
	r := &c.rd
	a := &r.area
	if a.buf == nil {
		a.buf = make([]byte, areaSlots*areaSlotLen)
	}
	clear(r.keys[:cnt]) // slots set up for the area, not for a caller's buffers
	for i := range cnt {
		iov := &r.iov[4*i]
		setIov(iov, a.buf[i*areaSlotLen:(i+1)*areaSlotLen])
		r.quote[i] = *iov
		h := &r.hs[i]
		h.len = 0
		h.hdr = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&r.names[i])),
			Namelen: unix.SizeofSockaddrInet6,
			Iov:     iov,
		}
		h.hdr.SetIovlen(1)
		if c.gro {
			h.hdr.Control = &a.ctl[i][0]
			h.hdr.SetControllen(groCtlLen)
		}
	}
	r.cnt, r.done, r.errno = cnt, 0, 0
}

// landed records what a receive into the area brought and puts the
// cursor on its first slot.
func (c *sockConn) landed() {
	r := &c.rd
	a := &r.area
	a.slots = r.errq.n + r.done
	a.slot, a.off = 0, 0
	for i := r.errq.n; i < a.slots; i++ {
		a.seg[i] = 0
		if h := &r.hs[i].hdr; c.gro {
			a.seg[i] = parseGRO(a.ctl[i][:min(uint64(h.Controllen), groCtlLen)])
			if h.Flags&unix.MSG_CTRUNC != 0 {
				a.seg[i] = -1 // its segment size may be lost: unusable
			}
		}
	}
	a.pending.Store(a.slots > 0)
}

// handOut fills pkts with the packets behind the area's cursor, copied
// into their Bufs or, with borrow, lent, and returns how many. It
// discards and counts what ReadBatch discards. It lands nothing: the
// packets it fills have Landed 0, whatever their Land.
func (c *sockConn) handOut(pkts []Packet, borrow bool) int {
	r := &c.rd
	a := &r.area
	k, reports := 0, 0
	for k < len(pkts) && a.slot < a.slots {
		i := a.slot
		slot := a.buf[i*areaSlotLen : (i+1)*areaSlotLen]
		p := &pkts[k]
		if i < r.errq.n {
			a.slot++
			if c.handReport(i, slot, p, borrow) {
				reports++
				k++
			}
			continue
		}
		pkt, ok := c.nextSegment(i, slot)
		if !ok {
			continue
		}
		if borrow {
			p.Buf, p.N = pkt[:len(pkt):len(pkt)], len(pkt)
		} else if len(pkt) <= len(p.Buf) {
			p.N = copy(p.Buf, pkt)
		} else {
			c.stats.discarded.Add(1)
			continue
		}
		p.Payload, p.Landed = nil, 0
		p.Addr = c.sockaddrAddr(&r.names[i])
		p.Unreachable = NotUnreachable
		k++
	}
	a.pending.Store(a.slot < a.slots)
	c.stats.read.Add(uint64(k - reports))
	c.stats.reports.Add(uint64(reports))
	return k
}

// nextSegment returns the packet at the cursor, in datagram slot i
// holding slot's bytes, and moves the cursor past it. It returns false,
// counting the discard, for a packet that is too short or for another
// port, and for a datagram that is truncated, whose segment size was
// cut off with its control message, or that is not a valid IPv4 one
// (the whole datagram then), or whose segments are shorter than a Homa
// header (all of them at once).
func (c *sockConn) nextSegment(i int, slot []byte) ([]byte, bool) {
	r := &c.rd
	a := &r.area
	n := int(r.hs[i].len)
	data, ok := slot[:min(n, len(slot))], r.hs[i].hdr.Flags&unix.MSG_TRUNC == 0 && a.seg[i] >= 0
	if ok && c.ipHdrIn {
		data, ok = datagramIPv4(data)
	}
	if !ok || len(data) == 0 {
		c.stats.discarded.Add(1)
		a.slot, a.off = a.slot+1, 0
		return nil, false
	}
	seg := a.seg[i]
	if seg <= 0 || seg >= len(data) {
		seg = len(data)
	}
	if seg < homaHeaderLen {
		c.stats.discarded.Add(uint64((len(data) - a.off + seg - 1) / seg))
		a.slot, a.off = a.slot+1, 0
		return nil, false
	}
	end := min(a.off+seg, len(data))
	pkt := data[a.off:end]
	if a.off = end; end == len(data) {
		a.slot, a.off = a.slot+1, 0
	}
	if len(pkt) < homaHeaderLen || !c.mine(dstPort(pkt)) {
		c.stats.discarded.Add(1)
		return nil, false
	}
	return pkt, true
}

// datagramIPv4 returns the payload of the IPv4 datagram b, or false when
// b is not a whole one.
func datagramIPv4(b []byte) ([]byte, bool) {
	if len(b) < ipv4HeaderLen {
		return nil, false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < ipv4HeaderLen || ihl > len(b) {
		return nil, false
	}
	return b[ihl:], true
}

// handReport turns the report in slot i, whose bytes are slot, into p
// (copied, cut to its Buf, or lent) and reports whether it is returned.
func (c *sockConn) handReport(i int, slot []byte, p *Packet, borrow bool) bool {
	q := Packet{Buf: slot}
	if !c.report(i, &q) {
		c.stats.reportsDiscarded.Add(1)
		return false
	}
	if borrow {
		p.Buf, p.N = slot[:q.N:q.N], q.N
	} else if p.N = copy(p.Buf, slot[:q.N]); p.N < ReportMinLen {
		c.stats.reportsDiscarded.Add(1)
		return false
	}
	p.Payload, p.Landed = nil, 0
	p.Addr, p.Unreachable = q.Addr, q.Unreachable
	return true
}
