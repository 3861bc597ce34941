package memnet

import (
	"net/netip"

	"github.com/homa-go/homa/homa/netio"
)

// report turns m, a copy that found no listener, into a report to the
// Conn that wrote it (Config.ReportUnreachable), as the destination
// host's kernel would answer with ICMP port unreachable quoting the
// packet. Called with n.mu held.
func (n *Network) report(m *packet) {
	w := n.conns[netip.AddrPortFrom(m.src, m.sport)]
	if w == nil {
		n.stats.ReportsDropped++
		n.release(m)
		return
	}
	quote := netio.ICMPv4Quote
	if m.dst.Addr().Is6() {
		quote = netio.ICMPv6Quote
	}
	m.n = min(m.n, quote)
	m.report = netio.UnreachablePort
	if !w.rxq.push(m) {
		n.stats.ReportsDropped++
		n.release(m)
		return
	}
	n.stats.Reported++
	w.signal()
}

// readReport fills p from the report m and reports whether it is to be
// returned. Like a raw socket, the Conn keeps only reports whose quoted
// Homa source port is its own; the quote is cut to the Buf offered.
// Called with n.mu held.
func (c *conn) readReport(m *packet, p *netio.Packet) bool {
	k := min(m.n, len(p.Buf))
	if k < netio.ReportMinLen || srcPort(m.buf) != c.key.Port() {
		c.stats.reportsDiscarded.Add(1)
		return false
	}
	p.N, p.Landed = copy(p.Buf, m.buf[:k]), 0
	p.Addr = m.dst.Addr()
	p.Unreachable = m.report
	return true
}
