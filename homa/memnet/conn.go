package memnet

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/homa-go/homa/homa/netio"
)

// conn is a Conn on a Network. Its queue and flags are guarded by
// net.mu.
type conn struct {
	net    *Network
	key    netip.AddrPort
	rxq    queue
	held   []*packet     // copies held back until the next delivery here
	lent   []*packet     // packets the last borrowed read returned, until the next read
	ready  chan struct{} // signalled (without blocking) when rxq grows
	done   chan struct{} // closed by Close
	closed bool
	stats  counters
	wake   atomic.Bool // a Wake not yet taken by a reader
}

// counters back the conn's netio.ConnStats.
type counters struct {
	read, written, discarded  atomic.Uint64
	reports, reportsDiscarded atomic.Uint64
}

// errMemClosed is returned by a closed conn.
var errMemClosed = fmt.Errorf("netio: mem conn: %w", net.ErrClosed)

func (c *conn) enqueue(m *packet) {
	if !c.rxq.push(m) {
		c.net.stats.DroppedQueueFull++
		c.net.release(m)
		return
	}
	s := &c.net.stats
	s.Delivered++
	s.DeliveredPackets[m.prio]++
	s.DeliveredBytes[m.prio] += uint64(m.n)
}

func (c *conn) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

func (c *conn) unhold(m *packet) {
	for i, h := range c.held {
		if h == m {
			c.held = slices.Delete(c.held, i, i+1)
			return
		}
	}
}

// ReadBatch implements Conn.
func (c *conn) ReadBatch(pkts []netio.Packet) (int, error) {
	for {
		n, err := c.TryReadBatch(pkts)
		if n > 0 || err != nil || len(pkts) == 0 {
			return n, err
		}
		if c.wake.Swap(false) {
			return 0, netio.ErrWoken
		}
		select {
		case <-c.ready:
		case <-c.done:
		}
	}
}

// Wake implements Waker.
func (c *conn) Wake() {
	c.wake.Store(true)
	c.signal()
}

// WaitReadable implements Poller.
func (c *conn) WaitReadable() error {
	for {
		c.net.mu.Lock()
		closed, ready := c.closed, c.rxq.len() > 0
		c.net.mu.Unlock()
		switch {
		case closed:
			return errMemClosed
		case ready:
			return nil
		case c.wake.Swap(false):
			return netio.ErrWoken
		}
		select {
		case <-c.ready:
		case <-c.done:
		}
	}
}

// TryReadBatch implements Poller.
func (c *conn) TryReadBatch(pkts []netio.Packet) (int, error) { return c.tryRead(pkts, false) }

// InProcess reports true: the network's goroutines and timers deliver
// the packets.
func (c *conn) InProcess() bool { return true }

// Lands implements Lander: TryReadBatch and ReadBatch copy each packet
// as a socket Conn's kernel would scatter it (see Packet.scatter).
func (c *conn) Lands() bool { return true }

// ReadBorrowed implements BorrowReader.
func (c *conn) ReadBorrowed(pkts []netio.Packet) (int, error) {
	for {
		n, err := c.TryReadBorrowed(pkts)
		if n > 0 || err != nil || len(pkts) == 0 {
			return n, err
		}
		select {
		case <-c.ready:
		case <-c.done:
		}
	}
}

// TryReadBorrowed implements BorrowReader: the packets returned are the
// network's own copies, held until the next read.
func (c *conn) TryReadBorrowed(pkts []netio.Packet) (int, error) { return c.tryRead(pkts, true) }

// giveBack returns the packets lent by the last borrowed read. Called
// with net.mu held.
func (c *conn) giveBack() {
	for i, m := range c.lent {
		c.net.release(m)
		c.lent[i] = nil
	}
	c.lent = c.lent[:0]
}

// tryRead is TryReadBatch, or TryReadBorrowed when borrow is set.
func (c *conn) tryRead(pkts []netio.Packet, borrow bool) (int, error) {
	n := c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if c.closed {
		return 0, errMemClosed
	}
	c.giveBack()
	n.catchUp()
	k, reports := 0, 0
	for k < len(pkts) {
		m := c.rxq.pop()
		if m == nil {
			break
		}
		p := &pkts[k]
		if borrow {
			p.Buf = m.buf[:m.n:m.n]
		}
		if m.report != netio.NotUnreachable {
			if c.readReport(m, p) {
				reports++
				k++
			}
			c.finish(m, borrow)
			continue
		}
		if borrow {
			p.N, p.Landed = m.n, 0
		} else if !p.Scatter(m.buf[:m.n]) {
			n.stats.DroppedTruncated++
			c.stats.discarded.Add(1)
			n.release(m)
			continue
		}
		p.Payload = nil
		p.Addr = m.src
		p.Unreachable = netio.NotUnreachable
		c.finish(m, borrow)
		k++
	}
	if c.rxq.len() > 0 {
		c.signal() // more than fitted: the next ReadBatch must not park
	}
	c.stats.read.Add(uint64(k - reports))
	c.stats.reports.Add(uint64(reports))
	return k, nil
}

// finish is the end of a read of m: it goes back to the network's free
// list, or, read borrowed, is lent until the next read. Called with
// net.mu held.
func (c *conn) finish(m *packet, borrow bool) {
	if borrow {
		c.lent = append(c.lent, m)
		return
	}
	c.net.release(m)
}

// WriteBatch implements Conn. The network copies each packet, Buf[:N]
// then Payload, into a buffer of its own.
func (c *conn) WriteBatch(pkts []netio.Packet) (int, error) {
	src := c.key.Addr()
	for i := range pkts {
		p := &pkts[i]
		if _, err := netio.CheckWrite(p, math.MaxInt); err != nil {
			return i, err
		}
		if !sameFamily(src.Is6(), p.Addr) {
			return i, netio.ErrBadAddr
		}
		dst := p.Addr.Unmap()
		if p.Len() > c.MaxPacket(dst) {
			return i, netio.ErrBadPacket
		}
		if err := c.write(p, src, netip.AddrPortFrom(dst, dstPort(p.Buf))); err != nil {
			return i, err
		}
		c.stats.written.Add(1)
	}
	return len(pkts), nil
}

// write hands one checked packet to the network: the Drop hook first,
// without locks, on the whole packet (a copy of it when it has a
// Payload), then the network.
func (c *conn) write(p *netio.Packet, src netip.Addr, dst netip.AddrPort) error {
	n := c.net
	var m *packet
	drop := false
	if n.hook != nil {
		pkt := p.Buf[:p.N]
		if len(p.Payload) > 0 {
			n.mu.Lock()
			m = n.alloc()
			n.mu.Unlock()
			m.fill(p)
			pkt = m.buf[:m.n]
		}
		drop = n.hook(src, dst.Addr(), pkt)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case c.closed:
		if m != nil {
			n.release(m)
		}
		return errMemClosed
	case drop:
		n.stats.Sent++
		n.stats.DroppedHook++
		if m != nil {
			n.release(m)
		}
		return nil
	}
	if m == nil {
		m = n.alloc()
		m.fill(p)
	}
	n.send(c.key, m, dst)
	return nil
}

// LocalAddr implements Conn.
func (c *conn) LocalAddr() netip.Addr { return c.key.Addr() }

// Port implements Conn.
func (c *conn) Port() uint16 { return c.key.Port() }

// MaxPacket implements Conn: the configured MTU less the IP header.
func (c *conn) MaxPacket(dst netip.Addr) int {
	return c.net.cfg.MTU - netio.HeaderOverhead(dst.Unmap().Is6(), false)
}

// Stats implements StatsConn.
func (c *conn) Stats() netio.ConnStats {
	return netio.ConnStats{
		Read:             c.stats.read.Load(),
		Written:          c.stats.written.Load(),
		Discarded:        c.stats.discarded.Load(),
		Reports:          c.stats.reports.Load(),
		ReportsDiscarded: c.stats.reportsDiscarded.Load(),
	}
}

// Close implements Conn.
func (c *conn) Close() error {
	n := c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.giveBack()
	n.detach(c)
	close(c.done)
	return nil
}

// sameFamily reports whether dst is reachable from a host of the family
// v6 (IPv4-mapped addresses count as IPv4).
func sameFamily(v6 bool, dst netip.Addr) bool { return dst.IsValid() && dst.Unmap().Is6() == v6 }

// dstPort and srcPort read the ports of a Homa common header.
func dstPort(b []byte) uint16 { return binary.BigEndian.Uint16(b[2:]) }
func srcPort(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
