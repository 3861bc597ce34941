package netio

import (
	"net/netip"
	"time"
)

// memLink is the downlink of one receiving host: the egress port of the
// switch in front of it. It sends one packet at a time at its rate; the
// packets waiting for it sit in one FIFO per priority. Its fields are
// guarded by MemNetwork.mu.
type memLink struct {
	mbps    int64
	queue   [8]memQueue // by priority, 7 served first
	backlog int         // bytes (IP size) waiting in queue
	wire    *memPacket  // the packet being sent (in flight until done), or nil
	free    time.Time   // when the last packet sent is (or was) through
}

// linkFor returns the downlink in front of host, or nil when that host's
// link is infinitely fast. Called with n.mu held.
func (n *MemNetwork) linkFor(host netip.Addr) *memLink {
	if l := n.links[host]; l != nil {
		return l
	}
	mbps := n.cfg.LinkMbps
	if v, ok := n.cfg.HostLinkMbps[host]; ok {
		mbps = v
	}
	if mbps <= 0 {
		return nil
	}
	l := &memLink{mbps: int64(mbps)}
	for i := range l.queue {
		l.queue[i].limit = memMaxInFlight
	}
	n.links[host] = l
	return l
}

// wireLen is the size of m on a link: the Homa packet and its IP header.
func (m *memPacket) wireLen() int {
	return m.n + headerOverhead(m.dst.Addr().Is6(), false)
}

// txTime is how long the link takes to send size bytes, rounded up to
// the nanosecond so that it never runs faster than its rate.
func (l *memLink) txTime(size int) time.Duration {
	bits := int64(size) * 8
	return time.Duration((bits*int64(time.Microsecond) + l.mbps - 1) / l.mbps)
}

// linkArrive takes m, bound for m.link, at the switch port at time at:
// onto the wire if the link is idle, else into the queue of its priority,
// or dropped when the buffer is full. Called with n.mu held.
func (n *MemNetwork) linkArrive(m *memPacket, at, now time.Time) {
	l := m.link
	m.due, m.stage = at, memToConn
	if l.wire == nil {
		n.transmit(l, m, now)
		return
	}
	size := m.wireLen()
	if limit := n.cfg.LinkBufferBytes; limit > 0 && l.backlog+size > limit {
		n.stats.DroppedBuffer++
		n.release(m)
		return
	}
	l.queue[m.prio].push(m) // cannot fail: n.queued < memMaxInFlight
	l.backlog += size
	n.queued++
	n.stats.MaxLinkBacklog = max(n.stats.MaxLinkBacklog, l.backlog)
}

// transmit puts m, which reached the idle link l at m.due, on the wire:
// it starts when both it and the link are there and is in flight until
// its last bit is through. Called with n.mu held.
func (n *MemNetwork) transmit(l *memLink, m *memPacket, now time.Time) {
	start := m.due
	if start.Before(l.free) {
		start = l.free
	}
	n.stats.MaxQueueDelay = max(n.stats.MaxQueueDelay, start.Sub(m.due))
	l.free = start.Add(l.txTime(m.wireLen()))
	l.wire, m.stage = m, memOnWire
	n.schedule(m, l.free, nil, now)
}

// linkDone handles m leaving its link at m.due: it goes to its Conn (or
// is held back there first, when marked for reordering), and the link
// starts on the highest-priority packet waiting. Called with n.mu held.
func (n *MemNetwork) linkDone(m *memPacket, now time.Time) {
	l := m.link
	l.wire, m.link, m.stage = nil, nil, memToConn
	if m.reorder {
		n.schedule(m, m.due.Add(MemReorderHold), n.conns[m.dst], now)
	} else {
		n.deliver(m)
	}
	for p := len(l.queue) - 1; p >= 0; p-- {
		if next := l.queue[p].pop(); next != nil {
			l.backlog -= next.wireLen()
			n.queued--
			n.transmit(l, next, now)
			return
		}
	}
}

// dropLinks empties every link queue, counting the copies as having no
// listener, and forgets the links. The copies on the wires are in flight
// and must already be gone. Called with n.mu held.
func (n *MemNetwork) dropLinks() {
	for _, l := range n.links {
		for i := range l.queue {
			for m := l.queue[i].pop(); m != nil; m = l.queue[i].pop() {
				n.stats.DroppedNoListener++
				n.release(m)
			}
		}
	}
	clear(n.links)
	n.queued = 0
}
