package memnet

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// link is one link of the network, sending one packet at a time at its
// rate: the downlink of a receiving host (the egress port of the switch
// in front of it), whose waiting packets sit in one FIFO per priority, or
// the uplink of a sending host (its NIC), with a single FIFO. Its fields
// are guarded by Network.mu.
type link struct {
	mbps    int64
	up      bool      // an uplink: one queue, unbounded, leads into the network
	queue   []queue   // by priority, the last served first; one for an uplink
	backlog int       // bytes (IP size) waiting in queue
	wire    *packet   // the packet being sent (in flight until done), or nil
	free    time.Time // when the last packet sent is (or was) through
}

// linkFor returns the uplink of host (up) or the downlink in front of it,
// or nil when that link is infinitely fast. Called with n.mu held.
func (n *Network) linkFor(host netip.Addr, up bool) *link {
	links, mbps, hosts, queues := n.links, n.cfg.LinkMbps, n.cfg.HostLinkMbps, 8
	if up {
		links, mbps, hosts, queues = n.uplinks, n.cfg.UplinkMbps, n.cfg.HostUplinkMbps, 1
	}
	if l := links[host]; l != nil {
		return l
	}
	if v, ok := hosts[host]; ok {
		mbps = v
	}
	if mbps <= 0 {
		return nil
	}
	l := &link{mbps: int64(mbps), up: up, queue: make([]queue, queues)}
	for i := range l.queue {
		l.queue[i].limit = maxInFlight
	}
	links[host] = l
	return l
}

// wireLen is the size of m on a link: the Homa packet and its IP header.
func (m *packet) wireLen() int {
	return m.n + netio.HeaderOverhead(m.dst.Addr().Is6(), false)
}

// leavingDownlink reports whether m is in flight until its last bit
// leaves a downlink.
func (m *packet) leavingDownlink() bool {
	return m.stage == memOnWire && !m.link.up
}

// txTime is how long the link takes to send size bytes, rounded up to
// the nanosecond so that it never runs faster than its rate.
func (l *link) txTime(size int) time.Duration {
	bits := int64(size) * 8
	return time.Duration((bits*int64(time.Microsecond) + l.mbps - 1) / l.mbps)
}

// linkArrive takes m, bound for m.link, at the link at time at (the switch
// port of a downlink; the host, when written, for an uplink): onto the
// wire if the link is idle, else into the queue of its priority (the one
// queue of an uplink), or dropped when a downlink's buffer is full.
// Called with n.mu held.
func (n *Network) linkArrive(m *packet, at, now time.Time) {
	l := m.link
	m.due, m.stage = at, memToConn
	if l.wire == nil {
		n.transmit(l, m, now)
		return
	}
	size := m.wireLen()
	if limit := n.cfg.LinkBufferBytes; limit > 0 && !l.up && l.backlog+size > limit {
		n.stats.DroppedBuffer++
		n.release(m)
		return
	}
	q := &l.queue[0]
	if !l.up {
		q = &l.queue[m.prio]
	}
	q.push(m) // cannot fail: n.queued < maxInFlight
	l.backlog += size
	n.queued++
	if l.up {
		n.stats.MaxUplinkBacklog = max(n.stats.MaxUplinkBacklog, l.backlog)
	} else {
		n.stats.MaxLinkBacklog = max(n.stats.MaxLinkBacklog, l.backlog)
	}
}

// transmit puts m, which reached the idle link l at m.due, on the wire:
// it starts when both it and the link are there and is in flight until
// its last bit is through. Called with n.mu held.
func (n *Network) transmit(l *link, m *packet, now time.Time) {
	start := m.due
	if start.Before(l.free) {
		start = l.free
	}
	if wait := start.Sub(m.due); l.up {
		n.stats.MaxUplinkQueueDelay = max(n.stats.MaxUplinkQueueDelay, wait)
	} else {
		n.stats.MaxQueueDelay = max(n.stats.MaxQueueDelay, wait)
	}
	l.free = start.Add(l.txTime(m.wireLen()))
	l.wire, m.stage = m, memOnWire
	n.schedule(m, l.free, nil, now)
}

// linkDone handles m leaving its link at m.due: off an uplink it goes into
// the network; off a downlink to its Conn (or it is held back there
// first, when marked for reordering). Then the link starts on the next
// packet waiting, the highest-priority one on a downlink. Called with
// n.mu held.
func (n *Network) linkDone(m *packet, now time.Time) {
	l := m.link
	l.wire, m.link, m.stage = nil, nil, memToConn
	switch {
	case l.up:
		n.route(m, m.due, now)
	case m.reorder:
		n.schedule(m, m.due.Add(ReorderHold), n.conns[m.dst], now)
	default:
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
func (n *Network) dropLinks() {
	for _, links := range [...]map[netip.Addr]*link{n.links, n.uplinks} {
		for _, l := range links {
			for i := range l.queue {
				for m := l.queue[i].pop(); m != nil; m = l.queue[i].pop() {
					n.stats.DroppedNoListener++
					n.release(m)
				}
			}
		}
		clear(links)
	}
	n.queued = 0
}
