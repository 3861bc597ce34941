//go:build linux

package netio

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// sharedConn is a raw Conn that reads through a socket shared with other
// Conns of the process (see rawShare): whichever member reads the socket
// puts its packets in its queue, its reads take them from there. It writes
// through the shared socket (the Homa header names the source port).
type sharedConn struct {
	share   *rawShare
	port    uint16
	lease   *portLease
	leave   func()        // takes the Conn out of its share
	ready   chan struct{} // a packet was queued, or Wake was called (capacity 1)
	closing chan struct{} // closed by Close
	closed  atomic.Bool
	wake    wakeFlag
	parking atomic.Bool // a read of the Conn is parked on the shared socket

	q rxQueue

	rdmu sync.Mutex // one reader at a time
	lent []*[]byte  // buffers a borrowed read lent, returned at the next read

	stats      connCounters
	queueDrops atomic.Uint64
}

// rxQueue is a sharedConn's queue of received packets, bounded by
// memberQueuePackets and memberQueueBytes, and with the queues of the
// other members by shareQueueBytes.
type rxQueue struct {
	mu    sync.Mutex
	items []queued // items[head:] wait
	head  int
	bytes int // capacity of the buffers waiting
}

// queued is one packet (or report) waiting in an rxQueue, in a buffer
// of the share's pools.
type queued struct {
	buf     *[]byte // the packet is all of *buf
	addr    netip.Addr
	unreach Unreachable
}

// Buffer pools of the queues: smallBuf bytes, and 64 KB, more than any
// datagram.
var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}
	largePool = sync.Pool{New: func() any { b := make([]byte, 1<<16); return &b }}
)

// getBuf returns a pooled buffer of n bytes.
func getBuf(n int) *[]byte {
	pool := &largePool
	if n <= smallBuf {
		pool = &smallPool
	}
	b := pool.Get().(*[]byte)
	*b = (*b)[:n]
	return b
}

// putBuf returns b to its pool.
func putBuf(b *[]byte) {
	*b = (*b)[:cap(*b)]
	if cap(*b) == smallBuf {
		smallPool.Put(b)
	} else {
		largePool.Put(b)
	}
}

var errSharedClosed = fmt.Errorf("netio: read: %w", net.ErrClosed)

// deliver copies p into the queue, or drops it when the queue is full.
// Only the share's reader calls it.
func (c *sharedConn) deliver(p *Packet) {
	b := getBuf(p.N)
	copy(*b, p.Buf[:p.N])
	q := &c.q
	q.mu.Lock()
	if c.closed.Load() {
		// Close has emptied the queue, or will once it has the lock:
		// nothing may stay in it, counted in the share's bytes.
		q.mu.Unlock()
		putBuf(b)
		registry.stats.noMember.Add(1)
		return
	}
	full, shareFull := len(q.items)-q.head >= memberQueuePackets || q.bytes+cap(*b) > memberQueueBytes, false
	if !full && c.share.queued.Add(int64(cap(*b))) > shareQueueBytes {
		c.share.queued.Add(-int64(cap(*b)))
		full, shareFull = true, true
	}
	if full {
		q.mu.Unlock()
		putBuf(b)
		c.queueDrops.Add(1)
		if shareFull {
			registry.stats.shareFull.Add(1)
		} else {
			registry.stats.queueFull.Add(1)
		}
		return
	}
	if q.head > 0 && q.head >= len(q.items)/2 {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, queued{buf: b, addr: p.Addr, unreach: p.Unreachable})
	q.bytes += cap(*b)
	q.mu.Unlock()
	c.signal()
}

// signal wakes a reader of c parked on its queue or on the shared
// socket, if any.
func (c *sharedConn) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
	c.wakeSocket()
}

// pop takes up to len(pkts) packets from the queue into pkts: copied
// into their Bufs, or, borrowing, lent. A packet larger than the Buf
// offered is discarded and counted.
func (c *sharedConn) pop(pkts []Packet, borrow bool) int {
	q := &c.q
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < len(pkts) && q.head < len(q.items) {
		it := q.items[q.head]
		q.items[q.head] = queued{}
		q.head++
		q.bytes -= cap(*it.buf)
		c.share.queued.Add(-int64(cap(*it.buf)))
		p, size := &pkts[n], len(*it.buf)
		if borrow {
			p.Buf = (*it.buf)[:size:size]
			c.lent = append(c.lent, it.buf)
		} else if size > len(p.Buf) {
			putBuf(it.buf)
			c.stats.discarded.Add(1)
			continue
		} else {
			copy(p.Buf, *it.buf)
			putBuf(it.buf)
		}
		p.N, p.Landed, p.Payload, p.Addr, p.Unreachable = size, 0, nil, it.addr, it.unreach
		if it.unreach != 0 {
			c.stats.reports.Add(1)
		} else {
			c.stats.read.Add(1)
		}
		n++
	}
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return n
}

// pending reports whether a packet waits in the queue.
func (c *sharedConn) pending() bool {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return c.q.head < len(c.q.items)
}

// read is every read method; see sockConn.read.
func (c *sharedConn) read(pkts []Packet, wait, borrow bool) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	if wait {
		c.rdmu.Lock()
	} else if !c.rdmu.TryLock() {
		return 0, nil
	}
	defer c.rdmu.Unlock()
	for _, b := range c.lent {
		putBuf(b)
	}
	clear(c.lent)
	c.lent = c.lent[:0]
	if !borrow {
		for i := range pkts {
			if len(pkts[i].Buf) == 0 {
				return 0, ErrBadPacket
			}
		}
	}
	for {
		if c.closed.Load() {
			return 0, errSharedClosed
		}
		if n := c.pop(pkts, borrow); n > 0 {
			return n, nil
		}
		c.share.pump(false)
		if n := c.pop(pkts, borrow); n > 0 || !wait {
			return n, nil
		}
		if err := c.park(); err != nil {
			return 0, err
		}
	}
}

// ReadBatch implements Conn.
func (c *sharedConn) ReadBatch(pkts []Packet) (int, error) { return c.read(pkts, true, false) }

// TryReadBatch implements Poller.
func (c *sharedConn) TryReadBatch(pkts []Packet) (int, error) { return c.read(pkts, false, false) }

// ReadBorrowed implements BorrowReader.
func (c *sharedConn) ReadBorrowed(pkts []Packet) (int, error) { return c.read(pkts, true, true) }

// TryReadBorrowed implements BorrowReader.
func (c *sharedConn) TryReadBorrowed(pkts []Packet) (int, error) { return c.read(pkts, false, true) }

// WaitReadable implements Poller.
func (c *sharedConn) WaitReadable() error {
	for {
		if c.closed.Load() {
			return errSharedClosed
		}
		if !c.pending() {
			c.share.pump(false)
		}
		if c.pending() {
			return nil
		}
		if err := c.park(); err != nil {
			return err
		}
	}
}

// Queued implements Queued: a packet waits in the Conn's queue, or on
// the shared socket (maybe for another member: then the asker stops
// spinning for nothing worse than a wake-up).
func (c *sharedConn) Queued() bool {
	return !c.closed.Load() && (c.pending() || c.share.conn.Queued())
}

// park waits until a packet may be in the queue: on the shared socket,
// when no other member is parked there, then moving what arrived to the
// members' queues; else until a packet is queued. It returns ErrWoken for
// a Wake, nil otherwise (the Conn closed among them: the caller checks).
func (c *sharedConn) park() error {
	if c.wake.take() {
		return ErrWoken
	}
	sh := c.share
	select {
	case <-sh.token:
	case <-c.ready:
		return nil
	case <-c.closing:
		return nil
	}
	// The token is this Conn's: park on the socket, unless a packet, a
	// Wake or a Close came before they could see that it parks there
	// (from then on they wake the socket: see signal).
	c.parking.Store(true)
	if !c.wake.pending.Load() && !c.closed.Load() && !c.pending() {
		_ = sh.conn.WaitReadable() // whatever it says, look at the socket and the Conn again
	}
	c.parking.Store(false)
	sh.pump(true)
	sh.token <- struct{}{}
	return nil
}

// Wake implements Waker.
func (c *sharedConn) Wake() {
	c.wake.set()
	c.signal()
}

// wakeSocket ends the wait of a read parked on the shared socket for this
// Conn. A wake that comes late ends some other member's wait on it, which
// then only looks again.
func (c *sharedConn) wakeSocket() {
	if c.parking.Load() {
		c.share.conn.Wake()
	}
}

// WriteBatch implements Conn.
func (c *sharedConn) WriteBatch(pkts []Packet) (int, error) {
	if c.closed.Load() {
		return 0, fmt.Errorf("netio: write: %w", net.ErrClosed)
	}
	n, err := c.share.conn.WriteBatch(pkts)
	c.stats.written.Add(uint64(n))
	return n, err
}

// LocalAddr implements Conn.
func (c *sharedConn) LocalAddr() netip.Addr { return c.share.conn.laddr }

// Port implements Conn.
func (c *sharedConn) Port() uint16 { return c.port }

// MaxPacket implements Conn.
func (c *sharedConn) MaxPacket(dst netip.Addr) int { return c.share.conn.MaxPacket(dst) }

// Stats implements StatsConn. The system calls are the shared socket's,
// not counted here; QueueDrops counts the packets the Conn's queue had
// no room for.
func (c *sharedConn) Stats() ConnStats {
	s := c.stats.snapshot()
	s.QueueDrops = c.queueDrops.Load()
	s.Shared = true
	return s
}

// Close implements Conn.
func (c *sharedConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.closing)
	c.wakeSocket()
	c.leave()
	c.lease.release()
	q := &c.q
	q.mu.Lock()
	for _, it := range q.items[q.head:] {
		c.share.queued.Add(-int64(cap(*it.buf)))
		putBuf(it.buf)
	}
	q.items, q.head, q.bytes = nil, 0, 0
	q.mu.Unlock()
	return nil
}
