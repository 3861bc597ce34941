package netio

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
)

// memConn is a Conn on a MemNetwork. Its queue and flags are guarded by
// net.mu.
type memConn struct {
	net    *MemNetwork
	key    netip.AddrPort
	rxq    memQueue
	held   []*memPacket  // copies held back until the next delivery here
	lent   []*memPacket  // packets the last borrowed read returned, until the next read
	ready  chan struct{} // signalled (without blocking) when rxq grows
	done   chan struct{} // closed by Close
	closed bool
	stats  connCounters
	wake   wakeFlag
}

// errMemClosed is returned by a closed memConn.
var errMemClosed = fmt.Errorf("netio: mem conn: %w", net.ErrClosed)

func (c *memConn) enqueue(m *memPacket) {
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

func (c *memConn) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

func (c *memConn) unhold(m *memPacket) {
	for i, h := range c.held {
		if h == m {
			c.held = slices.Delete(c.held, i, i+1)
			return
		}
	}
}

// ReadBatch implements Conn.
func (c *memConn) ReadBatch(pkts []Packet) (int, error) {
	for {
		n, err := c.TryReadBatch(pkts)
		if n > 0 || err != nil || len(pkts) == 0 {
			return n, err
		}
		if c.wake.take() {
			return 0, ErrWoken
		}
		select {
		case <-c.ready:
		case <-c.done:
		}
	}
}

// Wake implements Waker.
func (c *memConn) Wake() {
	c.wake.set()
	c.signal()
}

// WaitReadable implements Poller.
func (c *memConn) WaitReadable() error {
	for {
		c.net.mu.Lock()
		closed, ready := c.closed, c.rxq.len() > 0
		c.net.mu.Unlock()
		switch {
		case closed:
			return errMemClosed
		case ready:
			return nil
		case c.wake.take():
			return ErrWoken
		}
		select {
		case <-c.ready:
		case <-c.done:
		}
	}
}

// TryReadBatch implements Poller.
func (c *memConn) TryReadBatch(pkts []Packet) (int, error) { return c.tryRead(pkts, false) }

// InProcess reports true: the network's goroutines and timers deliver
// the packets.
func (c *memConn) InProcess() bool { return true }

// Lands implements Lander: TryReadBatch and ReadBatch copy each packet
// as a socket Conn's kernel would scatter it (see Packet.scatter).
func (c *memConn) Lands() bool { return true }

// ReadBorrowed implements BorrowReader.
func (c *memConn) ReadBorrowed(pkts []Packet) (int, error) {
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
func (c *memConn) TryReadBorrowed(pkts []Packet) (int, error) { return c.tryRead(pkts, true) }

// giveBack returns the packets lent by the last borrowed read. Called
// with net.mu held.
func (c *memConn) giveBack() {
	for i, m := range c.lent {
		c.net.release(m)
		c.lent[i] = nil
	}
	c.lent = c.lent[:0]
}

// tryRead is TryReadBatch, or TryReadBorrowed when borrow is set.
func (c *memConn) tryRead(pkts []Packet, borrow bool) (int, error) {
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
		if m.report != NotUnreachable {
			if c.readReport(m, p) {
				reports++
				k++
			}
			c.finish(m, borrow)
			continue
		}
		if borrow {
			p.N, p.Landed = m.n, 0
		} else if !p.scatter(m.buf[:m.n]) {
			n.stats.DroppedTruncated++
			c.stats.discarded.Add(1)
			n.release(m)
			continue
		}
		p.Payload = nil
		p.Addr = m.src
		p.Unreachable = NotUnreachable
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
func (c *memConn) finish(m *memPacket, borrow bool) {
	if borrow {
		c.lent = append(c.lent, m)
		return
	}
	c.net.release(m)
}

// WriteBatch implements Conn. The network copies each packet, Buf[:N]
// then Payload, into a buffer of its own.
func (c *memConn) WriteBatch(pkts []Packet) (int, error) {
	src := c.key.Addr()
	for i := range pkts {
		p := &pkts[i]
		if _, err := checkWrite(p, math.MaxInt); err != nil {
			return i, err
		}
		if !sameFamily(src.Is6(), p.Addr) {
			return i, ErrBadAddr
		}
		dst := p.Addr.Unmap()
		if p.Len() > c.MaxPacket(dst) {
			return i, ErrBadPacket
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
func (c *memConn) write(p *Packet, src netip.Addr, dst netip.AddrPort) error {
	n := c.net
	var m *memPacket
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
func (c *memConn) LocalAddr() netip.Addr { return c.key.Addr() }

// Port implements Conn.
func (c *memConn) Port() uint16 { return c.key.Port() }

// MaxPacket implements Conn: the configured MTU less the IP header.
func (c *memConn) MaxPacket(dst netip.Addr) int {
	return c.net.cfg.MTU - headerOverhead(dst.Unmap().Is6(), false)
}

// Stats implements StatsConn.
func (c *memConn) Stats() ConnStats { return c.stats.snapshot() }

// Close implements Conn.
func (c *memConn) Close() error {
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
