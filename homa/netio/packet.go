package netio

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
)

// Wire facts netio needs (shared/spec/WIRE.md, common header).
const (
	// ipProtoHoma is the IANA protocol number of Homa.
	ipProtoHoma = 146
	// homaHeaderLen is the length of the Homa common header; no valid
	// packet is shorter.
	homaHeaderLen = 28
	// dstPortOff is the offset of the destination port in the common
	// header (2 bytes, big-endian).
	dstPortOff = 2
)

// IP and UDP header sizes.
const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	// maxIPv4Total is the largest IPv4 datagram (the total-length field).
	maxIPv4Total = 65535
	// maxIPv6Payload is the largest IPv6 payload without jumbograms.
	maxIPv6Payload = 65535
)

// dstPort returns the Homa destination port of b, which holds at least
// dstPortOff+2 bytes.
func dstPort(b []byte) uint16 { return binary.BigEndian.Uint16(b[dstPortOff:]) }

// CheckWrite validates a Packet handed to WriteBatch and returns its
// size, N plus the length of Payload, which may not exceed limit.
func CheckWrite(p *Packet, limit int) (int, error) {
	if p.N < dstPortOff+2 || p.N > len(p.Buf) {
		return 0, ErrBadPacket
	}
	n := p.N + len(p.Payload)
	if n > limit {
		return 0, ErrBadPacket
	}
	return n, nil
}

// sameFamily reports whether dst can be reached from a Conn of the family
// of local (v6 or not). IPv4-mapped IPv6 addresses count as IPv4.
func sameFamily(v6 bool, dst netip.Addr) bool {
	if !dst.IsValid() {
		return false
	}
	return dst.Unmap().Is6() == v6
}

// HeaderOverhead is the IP (and UDP) header size in front of a Homa packet.
func HeaderOverhead(v6, udp bool) int {
	n := ipv4HeaderLen
	if v6 {
		n = ipv6HeaderLen
	}
	if udp {
		n += udpHeaderLen
	}
	return n
}

// maxPacketFor turns an MTU into the largest Homa packet that fits in it,
// capped at what one IP datagram can carry (loopback's MTU is 65536, one
// more than an IPv4 datagram may hold).
func maxPacketFor(mtu int, v6, udp bool) int {
	udpLen := 0
	if udp {
		udpLen = udpHeaderLen
	}
	limit := maxIPv4Total - ipv4HeaderLen - udpLen
	if v6 {
		limit = maxIPv6Payload - udpLen
	}
	return min(mtu-HeaderOverhead(v6, udp), limit)
}

// maxDatagram is the largest Homa packet one IP datagram carries.
func maxDatagram(v6, udp bool) int {
	return maxPacketFor(maxIPv6Payload+ipv6HeaderLen, v6, udp)
}

// connCounters backs ConnStats.
type connCounters struct {
	read, written, discarded  atomic.Uint64
	reports, reportsDiscarded atomic.Uint64
	sendCalls, sendDatagrams  atomic.Uint64
	recvCalls, recvDatagrams  atomic.Uint64
	gsoFallbacks              atomic.Uint64
}

func (c *connCounters) snapshot() ConnStats {
	return ConnStats{
		Read:             c.read.Load(),
		Written:          c.written.Load(),
		Discarded:        c.discarded.Load(),
		Reports:          c.reports.Load(),
		ReportsDiscarded: c.reportsDiscarded.Load(),
		SendCalls:        c.sendCalls.Load(),
		SendDatagrams:    c.sendDatagrams.Load(),
		RecvCalls:        c.recvCalls.Load(),
		RecvDatagrams:    c.recvDatagrams.Load(),
		GSOFallbacks:     c.gsoFallbacks.Load(),
	}
}
