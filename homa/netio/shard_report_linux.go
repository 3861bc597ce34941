//go:build linux

package netio

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
)

// groupConn is a Conn of a group of n > 1 (OpenUDPGroup). The kernel
// gives an ICMP report about a packet of the group to a socket of the
// group of its own choosing, not to the one that sent the packet: a
// Conn that reads a report about a packet to a peer of another shard
// hands it to that shard's Conn, which returns it from its next read.
type groupConn struct {
	*sockConn
	k     int
	group []*groupConn

	has   atomic.Bool // inbox is not empty
	mu    sync.Mutex
	inbox []report
	// lost counts reports dropped because the inbox was full.
	lost atomic.Uint64
}

// report is an ICMP report handed over by another Conn of the group.
type report struct {
	quoted []byte
	addr   netip.Addr
	why    Unreachable
}

// maxInbox bounds the reports waiting in a Conn's inbox.
const maxInbox = 64

func (c *groupConn) ReadBatch(pkts []Packet) (int, error) {
	return c.readVia(pkts, false, c.sockConn.ReadBatch)
}

func (c *groupConn) TryReadBatch(pkts []Packet) (int, error) {
	return c.readVia(pkts, false, c.sockConn.TryReadBatch)
}

func (c *groupConn) ReadBorrowed(pkts []Packet) (int, error) {
	return c.readVia(pkts, true, c.sockConn.ReadBorrowed)
}

func (c *groupConn) TryReadBorrowed(pkts []Packet) (int, error) {
	return c.readVia(pkts, true, c.sockConn.TryReadBorrowed)
}

// WaitReadable returns at once while reports wait in the inbox.
func (c *groupConn) WaitReadable() error {
	if c.has.Load() {
		return nil
	}
	return c.sockConn.WaitReadable()
}

// Queued implements Queued: reports wait in the inbox, or a packet on
// the shard's socket.
func (c *groupConn) Queued() bool { return c.has.Load() || c.sockConn.Queued() }

// readVia returns the reports in the inbox, if any, and otherwise what
// read gives, less the reports that belong to other shards.
func (c *groupConn) readVia(pkts []Packet, borrow bool, read func([]Packet) (int, error)) (int, error) {
	if c.has.Load() {
		if n := c.takeInbox(pkts, borrow); n > 0 {
			return n, nil
		}
	}
	n, err := read(pkts)
	if n > 0 {
		n = c.route(pkts[:n])
	}
	return n, err
}

// takeInbox moves reports from the inbox into pkts: into their buffers,
// or for a borrowing read as buffers of their own.
func (c *groupConn) takeInbox(pkts []Packet, borrow bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(pkts) && n < len(c.inbox) {
		r, p := &c.inbox[n], &pkts[n]
		if borrow {
			p.Buf = r.quoted
		} else if len(p.Buf) < len(r.quoted) {
			break
		}
		p.N = copy(p.Buf, r.quoted)
		p.Addr, p.Unreachable, p.Landed, p.Payload = r.addr, r.why, 0, nil
		n++
	}
	c.inbox = append(c.inbox[:0], c.inbox[n:]...)
	c.has.Store(len(c.inbox) > 0)
	return n
}

// route hands the reports among pkts that are about packets to another
// shard's peers over to that shard, and returns how many packets are
// left, in their order, at the front of pkts (the others keep their
// buffers behind them).
func (c *groupConn) route(pkts []Packet) int {
	w := 0
	for i := range pkts {
		p := &pkts[i]
		if p.Unreachable != NotUnreachable && p.N >= 4 {
			dst := netip.AddrPortFrom(p.Addr, binary.BigEndian.Uint16(p.Buf[2:4]))
			if j := ShardOf(dst, len(c.group)); j != c.k {
				c.group[j].deliver(report{quoted: append([]byte(nil), p.Bytes()...), addr: p.Addr, why: p.Unreachable})
				continue
			}
		}
		pkts[w], pkts[i] = pkts[i], pkts[w]
		w++
	}
	return w
}

// deliver puts r in the inbox and wakes the Conn's reader.
func (c *groupConn) deliver(r report) {
	c.mu.Lock()
	if len(c.inbox) >= maxInbox {
		c.mu.Unlock()
		c.lost.Add(1)
		return
	}
	c.inbox = append(c.inbox, r)
	c.has.Store(true)
	c.mu.Unlock()
	c.sockConn.Wake()
}

// Stats counts the reports dropped from a full inbox as discarded.
// Shared implements Shared: a group member reads reports about its
// siblings' peers.
func (c *groupConn) Shared() bool { return true }

func (c *groupConn) Stats() ConnStats {
	s := c.sockConn.Stats()
	s.ReportsDiscarded += c.lost.Load()
	return s
}
