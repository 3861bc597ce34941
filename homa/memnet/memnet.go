// Package memnet is an in-memory network for Homa sockets: tests run
// clients and servers in one process, on addresses of their choosing,
// with seeded loss, duplication, reordering and delay, finite link rates
// and queues, and reports of packets sent to no listener, as the host's
// network would give them. Open a socket on it with package sock
// (Config.Network); the engine's own tests open its Conns directly.
//
// Time is the real clock's, so the network runs under testing/synctest
// as well: inside a bubble, delays and link rates cost no wall time.
package memnet

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// Config describes an in-memory network. The zero value is a perfect
// network: no loss, no delay, infinitely fast links, MTU 1500.
type Config struct {
	// Seed seeds the generator behind every random choice. Two networks
	// with the same Seed and configuration, fed the same packets in the
	// same order, make the same choices. With uplinks (see UplinkMbps)
	// the choices for a packet are made as it leaves its uplink, in that
	// order.
	Seed uint64
	// Loss, Duplicate and Reorder are per-packet probabilities in [0, 1].
	// A lost packet is not delivered. A duplicated packet is delivered
	// twice (each copy with its own delay). A reordered packet is held
	// back until the next packet for the same Conn has been delivered, or
	// for ReorderHold, whichever comes first; with a downlink (see
	// LinkMbps) the hold starts when the packet leaves the downlink.
	Loss, Duplicate, Reorder float64
	// Delay is the one-way delay of every packet, plus a uniform random
	// extra in [0, Jitter], counted from when it was written or, with an
	// uplink, from when it left the uplink. With a downlink it is the path
	// up to the switch port: the packet reaches the port that long after.
	// Negative values count as zero.
	Delay, Jitter time.Duration
	// LinkMbps, when positive, models the switch egress port in front of
	// every receiving host: the host's downlink carries one packet at a
	// time at LinkMbps megabits per second. A packet occupies it for its
	// IP size (the Homa packet plus the 20- or 40-byte IP header) times 8
	// bits over the rate, and is delivered when its last bit is through:
	// at max(arrival at the port, link free) + size*8/rate. Packets
	// waiting for the link are served in strict priority order, highest
	// Packet.Priority (7) first and FIFO within a priority, as by a
	// switch with 8 priority queues; a packet on the wire is never
	// preempted. Zero means infinitely fast: no queueing at all.
	LinkMbps int
	// HostLinkMbps overrides LinkMbps for the downlinks of the hosts it
	// names; zero or less makes that host's downlink infinitely fast. The
	// map is copied by New.
	HostLinkMbps map[netip.Addr]int
	// LinkBufferBytes bounds the bytes (IP size) waiting for each
	// downlink, the packet on the wire not included. A packet that would
	// exceed it is dropped whatever its priority (tail drop) and counted
	// in Stats.DroppedBuffer. Zero means unbounded: only the limit on
	// copies held inside the network applies.
	LinkBufferBytes int
	// UplinkMbps, when positive, models the network interface of every
	// sending host: a packet written by host S first goes through S's
	// uplink, which carries one packet at a time at UplinkMbps megabits
	// per second, each for its IP size as on a downlink. The packets
	// waiting for it leave strictly in the order they were written,
	// whatever their Priority, as from a NIC with a single transmit
	// queue: a packet written behind a long burst waits for all of it
	// (the head-of-line blocking that the Homa pacer avoids by keeping
	// that queue short). The queue is unbounded (LinkBufferBytes does not
	// apply); only the limit on copies held inside the network does. A
	// packet leaves the uplink when its last bit is through, at
	// max(written, uplink free) + size*8/rate, and only then meets Loss,
	// Duplicate, Reorder, Delay, Jitter and the receiver's downlink, so
	// a duplicate does not take the uplink twice. Zero means infinitely
	// fast: the packet leaves as it is written.
	UplinkMbps int
	// HostUplinkMbps overrides UplinkMbps for the uplinks of the hosts it
	// names; zero or less makes that host's uplink infinitely fast. The
	// map is copied by New.
	HostUplinkMbps map[netip.Addr]int
	// MTU is the IP MTU; MaxPacket is MTU less 20 (IPv4) or 40 (IPv6)
	// bytes. Zero means 1500.
	MTU int
	// QueueLen bounds each Conn's receive queue, in packets; arrivals at a
	// full queue are dropped and counted. Zero means 4096.
	QueueLen int
	// Drop, when set, is asked about every written packet before the
	// random choices; returning true drops it. pkt is the whole packet:
	// the writer's Buf[:N], or a copy of Buf[:N] and Payload when the
	// packet has a Payload. Read it, do not keep it. It is called without locks held, from the
	// writing goroutine; a packet it drops never reaches the uplink.
	Drop func(src, dst netip.Addr, pkt []byte) bool
	// ReportUnreachable makes the network answer a packet sent to an
	// address and port where no Conn is open with a report to the sender,
	// as a kernel answers ICMP port unreachable.
	//
	// The report reaches the Conn that wrote the packet, if still open,
	// at the instant the copy finds no listener (the way back takes no
	// time and is never lost), and is read from it as a Packet with
	// Unreachable set to UnreachablePort, Addr the destination and Buf[:N]
	// the start of the packet (as much as an ICMP message would quote: 528
	// bytes for IPv4, 1192 for IPv6). Each copy (duplicates included)
	// that finds no listener is reported, except copies dropped because
	// the last Conn closed.
	ReportUnreachable bool
}

// Defaults and limits of the in-memory network.
const (
	defaultMTU      = 1500
	defaultQueueLen = 4096
	// ReorderHold is the longest a reordered packet waits for a later
	// packet to overtake it.
	ReorderHold = time.Millisecond
	// maxInFlight bounds the copies held inside the network: delayed,
	// held back for reordering, or waiting for or on an uplink or a
	// downlink.
	maxInFlight = 1 << 16
	// maxFree bounds the list of packet buffers kept for reuse.
	maxFree = 1024
)

// Stats are the cumulative counts of an in-memory network. Every
// written packet ends up counted once in Lost, DroppedHook,
// DroppedNoListener, DroppedQueueFull, DroppedInFlight, DroppedBuffer,
// DroppedTruncated, read by a Conn, or still in the network; duplicates
// add one more copy each.
type Stats struct {
	Sent       uint64 // packets written
	Delivered  uint64 // copies placed in a receive queue
	Lost       uint64 // dropped at random (Loss)
	Duplicated uint64 // packets sent twice (Duplicate)
	Reordered  uint64 // copies held back (Reorder)
	// DroppedHook counts packets Config.Drop dropped.
	DroppedHook uint64
	// DroppedNoListener counts copies for an address and port no Conn
	// holds (when they arrive), and copies in flight when the last Conn
	// closed.
	DroppedNoListener uint64
	// DroppedQueueFull counts copies that met a full receive queue.
	DroppedQueueFull uint64
	// DroppedInFlight counts copies dropped because too many were held
	// inside the network (delayed, held back, or at an uplink or a
	// downlink).
	DroppedInFlight uint64
	// DroppedBuffer counts copies that found their downlink's buffer full
	// (Config.LinkBufferBytes).
	DroppedBuffer uint64
	// DroppedTruncated counts copies discarded by ReadBatch because the
	// Buf offered was too small.
	DroppedTruncated uint64
	// Reported counts reports placed in a writer's receive queue for
	// copies that found no listener (Config.ReportUnreachable); those
	// copies are in DroppedNoListener too. ReportsDropped counts the
	// reports that found their writer closed or its queue full.
	Reported, ReportsDropped uint64
	// DeliveredPackets and DeliveredBytes split Delivered by the priority
	// the packet was written with; bytes are Homa packet bytes (no IP
	// header).
	DeliveredPackets, DeliveredBytes [8]uint64
	// MaxQueueDelay is the longest any copy waited for a downlink, from
	// its arrival at the switch port to its first bit on the wire. Time
	// spent waiting for an uplink is not included: see
	// MaxUplinkQueueDelay.
	MaxQueueDelay time.Duration
	// MaxLinkBacklog is the most bytes (IP size) seen waiting for one
	// downlink, the packet on the wire not included.
	MaxLinkBacklog int
	// MaxUplinkQueueDelay is the longest any packet waited for its
	// sender's uplink (Config.UplinkMbps), from when it was written to
	// its first bit on the wire.
	MaxUplinkQueueDelay time.Duration
	// MaxUplinkBacklog is the most bytes (IP size) seen waiting for one
	// uplink, the packet on the wire not included.
	MaxUplinkBacklog int
}

// Network is an in-memory network of Conns, each at an address and
// Homa port. A written packet goes to the Conn at (destination address,
// Homa destination port of the packet bytes). It starts no goroutine of
// its own: delayed packets and the links share one timer, set to the
// earliest event and stopped when the last Conn closes. Times are computed
// from the schedule, not from when the timer ran, so inside a
// testing/synctest bubble every delivery happens at the exact instant the
// configuration implies. Whichever goroutine reaches the network first at
// an instant (a writer, a reader, the timer) runs the events due by then,
// so the outcome does not depend on goroutine scheduling.
type Network struct {
	cfg    Config
	hook   func(src, dst netip.Addr, pkt []byte) bool
	maxLen int // largest packet buffer: MTU

	mu      sync.Mutex
	rng     *rand.Rand
	conns   map[netip.AddrPort]*conn
	flight  flightHeap           // timed copies (delayed, held, on a wire), earliest first
	seq     uint64               // tie-break for equal due times: scheduling order
	timer   *time.Timer          // fires at flight[0].due; nil until first needed
	links   map[netip.Addr]*link // downlinks by receiving host, made on first use
	uplinks map[netip.Addr]*link // uplinks by sending host, made on first use
	queued  int                  // copies waiting in the queues of links and uplinks
	free    []*packet            // buffers for reuse
	stats   Stats
	closed  bool
}

// New returns an empty network.
func New(cfg Config) *Network {
	if cfg.MTU <= 0 {
		cfg.MTU = defaultMTU
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = defaultQueueLen
	}
	cfg.Delay, cfg.Jitter = max(cfg.Delay, 0), max(cfg.Jitter, 0)
	cfg.HostLinkMbps = unmapHosts(cfg.HostLinkMbps)
	cfg.HostUplinkMbps = unmapHosts(cfg.HostUplinkMbps)
	return &Network{
		cfg:     cfg,
		hook:    cfg.Drop,
		maxLen:  cfg.MTU,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		conns:   make(map[netip.AddrPort]*conn),
		links:   make(map[netip.Addr]*link),
		uplinks: make(map[netip.Addr]*link),
	}
}

// unmapHosts returns a copy of a per-host map keyed by unmapped addresses,
// or nil for nil.
func unmapHosts(m map[netip.Addr]int) map[netip.Addr]int {
	if m == nil {
		return nil
	}
	hosts := make(map[netip.Addr]int, len(m))
	for h, v := range m {
		hosts[h.Unmap()] = v
	}
	return hosts
}

// Open attaches a Conn at addr (a specific address, the host) and port.
// Port 0 assigns the first free client port of that address from
// MinClientPort up; a taken port gives ErrPortInUse.
func (n *Network) Open(addr netip.Addr, port uint16) (netio.Conn, error) {
	if !addr.IsValid() || addr.IsUnspecified() {
		return nil, netio.ErrBadAddr
	}
	addr = addr.Unmap()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("netio: mem network: %w", net.ErrClosed)
	}
	if port == 0 {
		for p := netio.MinClientPort; p <= netio.MaxPort; p++ {
			if _, taken := n.conns[netip.AddrPortFrom(addr, uint16(p))]; !taken {
				port = uint16(p)
				break
			}
		}
		if port == 0 {
			return nil, netio.ErrNoPorts
		}
	} else if _, taken := n.conns[netip.AddrPortFrom(addr, port)]; taken {
		return nil, fmt.Errorf("%w: %d", netio.ErrPortInUse, port)
	}
	c := &conn{
		net:   n,
		key:   netip.AddrPortFrom(addr, port),
		rxq:   queue{limit: n.cfg.QueueLen},
		ready: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	n.conns[c.key] = c
	return c, nil
}

// Stats returns the counts so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Close closes every Conn and refuses new ones.
func (n *Network) Close() error {
	n.mu.Lock()
	n.closed = true
	conns := make([]*conn, 0, len(n.conns))
	for _, c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// packet is one copy of a packet inside the network, or a report that
// a copy found no listener, on its way back to the writer.
type packet struct {
	buf   []byte // cap maxLen; buf[:n] is the packet
	n     int
	src   netip.Addr
	sport uint16 // the port of the Conn that wrote it
	dst   netip.AddrPort
	// report, when set, makes this a report in its writer's queue: dst
	// is the destination of the undelivered packet.
	report netio.Unreachable
	prio   uint8     // Packet.Priority, 0..7
	stage  stage     // what happens at due
	due    time.Time // in flight: when stage happens; in a link queue: arrival
	seq    uint64
	held   *conn // set while held back for reordering at this Conn
	idx    int   // index in flight, -1 when not there
	link   *link // the uplink or downlink it is bound for or on, until it leaves
	// reorder marks a copy to hold back at its Conn once it leaves link.
	reorder bool
}

// stage is what happens to a copy in flight when it is due.
type stage uint8

const (
	memToConn stage = iota // delivered to its Conn
	memToLink              // arrives at its downlink's port
	memOnWire              // its last bit leaves its link (uplink or downlink)
)

func (n *Network) alloc() *packet {
	if k := len(n.free); k > 0 {
		m := n.free[k-1]
		n.free[k-1] = nil
		n.free = n.free[:k-1]
		return m
	}
	return &packet{buf: make([]byte, n.maxLen), idx: -1}
}

func (n *Network) release(m *packet) {
	*m = packet{buf: m.buf, idx: -1}
	if len(n.free) < maxFree {
		n.free = append(n.free, m)
	}
}

// fill copies the packet p (Buf[:N], then Payload) into m.
func (m *packet) fill(p *netio.Packet) {
	m.n = copy(m.buf, p.Buf[:p.N])
	m.n += copy(m.buf[m.n:], p.Payload)
	m.prio = p.Priority & 7
}

// send takes m, a packet written by the Conn at from (filled by fill):
// onto its host's uplink, when it has one, else straight into the
// network. Called with n.mu held.
func (n *Network) send(from netip.AddrPort, m *packet, dst netip.AddrPort) {
	n.stats.Sent++
	now := n.catchUp()
	up := n.linkFor(from.Addr(), true)
	if up != nil && n.full() {
		n.stats.DroppedInFlight++
		n.release(m)
		return
	}
	m.src, m.sport, m.dst = from.Addr(), from.Port(), dst
	if up == nil {
		n.route(m, now, now)
		return
	}
	if now.IsZero() {
		now = time.Now()
	}
	m.link = up
	n.linkArrive(m, now, now)
}

// route sends m, which left its sender (when written, or when through the
// uplink) at time at, across the network: the random choices, then the
// delay, the downlink and the receiving Conn. A zero at (and now) means
// that nothing was in flight when m was written: the clock is read only
// if needed. Called with n.mu held.
func (n *Network) route(m *packet, at, now time.Time) {
	cfg := &n.cfg
	if cfg.Loss > 0 && n.rng.Float64() < cfg.Loss {
		n.stats.Lost++
		n.release(m)
		return
	}
	var twin *packet
	if cfg.Duplicate > 0 && n.rng.Float64() < cfg.Duplicate {
		n.stats.Duplicated++
		twin = n.alloc()
		twin.n = copy(twin.buf, m.buf[:m.n])
		twin.src, twin.sport, twin.dst, twin.prio = m.src, m.sport, m.dst, m.prio
	}
	dst := m.dst
	link := n.linkFor(dst.Addr(), false)
	for ; m != nil; m, twin = twin, nil {
		delay := cfg.Delay
		if cfg.Jitter > 0 {
			delay += time.Duration(n.rng.Int64N(int64(cfg.Jitter) + 1))
		}
		reorder := cfg.Reorder > 0 && n.rng.Float64() < cfg.Reorder
		if reorder {
			n.stats.Reordered++
		}
		if link == nil && !reorder && delay == 0 {
			n.deliver(m)
			continue
		}
		if n.full() {
			n.stats.DroppedInFlight++
			n.release(m)
			continue
		}
		if at.IsZero() {
			at = time.Now()
			now = at
		}
		switch {
		case link == nil && reorder:
			// Released early by the next packet for that Conn.
			n.schedule(m, at.Add(delay+ReorderHold), n.conns[dst], now)
		case link == nil:
			n.schedule(m, at.Add(delay), nil, now)
		default:
			m.link, m.reorder = link, reorder
			if delay > 0 {
				m.stage = memToLink
				n.schedule(m, at.Add(delay), nil, now)
			} else {
				n.linkArrive(m, at, now)
			}
		}
	}
}

// full reports whether the network holds as many copies as it may.
// Called with n.mu held.
func (n *Network) full() bool {
	return len(n.flight)+n.queued >= maxInFlight
}

// schedule puts m in flight until due and, when c is not nil, registers it
// as held back at c. Called with n.mu held.
func (n *Network) schedule(m *packet, due time.Time, c *conn, now time.Time) {
	m.due, m.seq = due, n.seq
	n.seq++
	if c != nil {
		m.held = c
		c.held = append(c.held, m)
	}
	heap.Push(&n.flight, m)
	if m.idx == 0 {
		n.armTimer(now)
	}
}

// deliver puts a copy in its Conn's receive queue, followed by the copies
// held back for that Conn. Called with n.mu held.
func (n *Network) deliver(m *packet) {
	c := n.conns[m.dst]
	if c == nil {
		n.stats.DroppedNoListener++
		if n.cfg.ReportUnreachable {
			n.report(m)
		} else {
			n.release(m)
		}
		return
	}
	c.enqueue(m)
	for i, h := range c.held {
		c.held[i] = nil
		heap.Remove(&n.flight, h.idx)
		h.held = nil
		c.enqueue(h)
	}
	c.held = c.held[:0]
	c.signal()
}

// armTimer sets the timer to the earliest due time. Called with n.mu held.
func (n *Network) armTimer(now time.Time) {
	if len(n.flight) == 0 {
		if n.timer != nil {
			n.timer.Stop()
		}
		return
	}
	d := n.flight[0].due.Sub(now)
	if n.timer == nil {
		n.timer = time.AfterFunc(d, n.fire)
	} else {
		n.timer.Reset(d)
	}
}

// fire runs every event that is due.
func (n *Network) fire() {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	n.advance(now)
	n.armTimer(now) // even when nothing was due: the head may have changed
}

// catchUp runs the events due by now before the caller acts, so that what
// happens at an instant does not depend on whether the timer's goroutine
// or the caller got the lock first. It returns now, or the zero time when
// nothing was in flight (the clock was not read). Called with n.mu held.
func (n *Network) catchUp() time.Time {
	if len(n.flight) == 0 {
		return time.Time{}
	}
	now := time.Now()
	if n.advance(now) {
		n.armTimer(now)
	}
	return now
}

// advance runs, in order, every event due by now and reports whether
// there was any. Called with n.mu held.
func (n *Network) advance(now time.Time) bool {
	ran := false
	for len(n.flight) > 0 && !n.flight[0].due.After(now) {
		ran = true
		m := heap.Pop(&n.flight).(*packet)
		switch m.stage {
		case memToLink:
			n.linkArrive(m, m.due, now)
		case memOnWire:
			n.linkDone(m, now)
		default:
			if c := m.held; c != nil {
				c.unhold(m)
				m.held = nil
			}
			n.deliver(m)
		}
	}
	return ran
}

// detach removes c from the network and, when it was the last Conn,
// drops everything in flight and stops the timer. Called with n.mu held.
func (n *Network) detach(c *conn) {
	delete(n.conns, c.key)
	for _, h := range c.held {
		h.held = nil
	}
	c.held = nil
	for m := c.rxq.pop(); m != nil; m = c.rxq.pop() {
		n.release(m)
	}
	if len(n.conns) > 0 {
		return
	}
	for len(n.flight) > 0 {
		n.stats.DroppedNoListener++
		n.release(heap.Pop(&n.flight).(*packet))
	}
	n.dropLinks()
	if n.timer != nil {
		n.timer.Stop()
	}
}
