//go:build linux

package netio

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Raw client Conns of one process share kernel sockets beyond a few.
//
// The kernel hands a clone of every Homa packet that arrives over raw IP
// to every protocol 146 raw socket of the host (bound to the packet's
// destination address or to none, connected to its source or to
// nothing); each socket's filter then drops the packets of other ports.
// That clone and filter cost 200-270 ns per socket per packet here
// (BenchmarkRawFanout: 10.5 µs a round trip with no other socket, 542 µs
// with 1,000), paid by every packet of every Homa socket on the host. A
// raw socket's match looks only at the protocol, the bound address, the
// connected peer and the bound device (raw_v4_match, raw_v6_match), and
// the filter runs after the clone, so neither bind, connect nor a
// better filter narrows it when the clients share their address and
// talk to the same servers (sockets bound or connected to other
// addresses are skipped before the clone: about 6 ns each); fewer
// sockets do.
//
// So OpenRaw gives each process at most ownClientSockets client Conns
// (port 0: a port assigned) with a socket of their own per network
// namespace, local address and Options; the next ones are sharedConns, which read from one socket
// shared by up to maxShareMembers of them (a rawShare), whose filter
// passes exactly their ports (portSetFilter). The members read it
// themselves, with no goroutine of the share's: a member's read that
// finds its own queue empty takes what the socket holds, when no one
// else is doing so, and copies each packet into the bounded queue of the
// Conn its destination port (for a report, its source port) names, its
// own among them. A read that must wait parks on the socket itself if no
// other member does (it holds the share's token), else on its queue,
// which the parked member fills. So a member whose reader spins (as the
// engine's do before they park) or is the one parked on the socket gets
// its packets with no hand-off between goroutines, and one that waits
// while another is parked, with one. Conns with a socket of their own,
// servers (a port given) among them, read as before, with no hand-off
// and no copy of their own: the share costs only its members one copy
// per packet, and sometimes a hand-off.
//
// Drops are counted by reason: a packet for a port whose Conn has left
// (ShareStats.NoMember), a packet its Conn's full queue had no room for
// (ShareStats.QueueFull, and the Conn's ConnStats.QueueDrops), a packet
// the queues of its share's members together had no room for
// (ShareStats.ShareFull, and ConnStats.QueueDrops), a packet
// larger than the Buf its reader offered (ConnStats.Discarded), a report
// of a packet no member sent (ShareStats.ReportsDiscarded).

// Tuning of shared sockets.
const (
	// maxShareMembers bounds the Conns of one shared socket: their
	// filter (about 1.5 instructions a port) must stay under the kernel's
	// 4,096; a further Conn gets a share of its own.
	maxShareMembers = 2048
	// memberQueuePackets and memberQueueBytes bound the packets (and the
	// buffer bytes they hold) that wait in a sharedConn's queue.
	memberQueuePackets = 1024
	memberQueueBytes   = 8 << 20
	// shareQueueBytes bounds the buffer bytes waiting in the queues of
	// all the members of one share together: the kernel's receive
	// buffer of a shared socket, times two.
	shareQueueBytes = 2 * defaultServerReadBuffer
	// smallBuf is the buffer class of the packets that fit it (most of
	// a request-response workload); larger ones take 64 KB.
	smallBuf = 2048
)

// ownClientSockets is how many client Conns of one local address and
// Options get a raw socket of their own before the next ones share
// (tests lower it). Each socket costs every Homa packet arriving on the
// host one clone; each member of a share costs its own packets one copy
// more, and a hand-off between goroutines when another member's read
// is parked on the socket.
var ownClientSockets = 4

// shareCapacity is the most members a share takes (tests lower it).
var shareCapacity = maxShareMembers

// shareKey is what Conns that share a socket have in common: the
// network namespace they are opened in, the local address and the
// Options, the DSCP map by value.
type shareKey struct {
	netns [2]uint64 // device and inode of the opening thread's namespace
	laddr netip.Addr
	dscp  DSCP
	opt   Options // DSCP nil
}

// shareGroup is the client Conns of one shareKey.
type shareGroup struct {
	own    int         // open Conns with a socket of their own
	shares []*rawShare // shares with members
}

// shareRegistry holds the process's groups.
type shareRegistry struct {
	mu     sync.Mutex
	groups map[shareKey]*shareGroup
	stats  shareCounters
}

var registry shareRegistry

// shareCounters back ShareStats.
type shareCounters struct {
	noMember, queueFull, shareFull, reportsDiscarded atomic.Uint64
}

// ShareStats are the process's counts of raw Conns that share sockets
// (see OpenRaw).
type ShareStats struct {
	// Sockets is the shared sockets open now, Members the Conns that
	// read through them.
	Sockets, Members int
	// NoMember counts packets a shared socket received for a port none of
	// its Conns serves any more (one closed while they were on their way);
	// QueueFull counts packets dropped because their Conn's queue was
	// full, ShareFull those dropped because the queues of their socket's
	// Conns together held all they may (both also in that Conn's
	// ConnStats.QueueDrops).
	NoMember, QueueFull, ShareFull uint64
	// ReportsDiscarded counts reports of undelivered packets (see
	// Options.ReportUnreachable) that a shared socket received for a
	// packet none of its Conns sent: the kernel gives every protocol 146
	// socket the ICMP errors of all of them, and no filter applies.
	ReportsDiscarded uint64
}

// RawShareStats returns the process's counts of shared raw sockets.
func RawShareStats() ShareStats {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	st := &registry.stats
	s := ShareStats{NoMember: st.noMember.Load(), QueueFull: st.queueFull.Load(), ShareFull: st.shareFull.Load(),
		ReportsDiscarded: st.reportsDiscarded.Load()}
	for _, g := range registry.groups {
		s.Sockets += len(g.shares)
		for _, sh := range g.shares {
			s.Members += len(sh.members)
		}
	}
	return s
}

// openClientRaw opens a raw Conn on a free client port: with a socket
// of its own while its group has fewer than ownClientSockets, else as a
// member of a share.
func openClientRaw(laddr netip.Addr, opt *Options) (Conn, error) {
	key := shareKey{netns: netnsID(), laddr: laddr, dscp: DefaultDSCP}
	if opt != nil {
		key.opt = *opt
		if opt.DSCP != nil {
			key.dscp = *opt.DSCP
		}
		key.opt.DSCP = nil
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.groups == nil {
		registry.groups = make(map[shareKey]*shareGroup)
	}
	g := registry.groups[key]
	if g == nil {
		g = &shareGroup{}
		registry.groups[key] = g
	}
	if g.own < ownClientSockets {
		c, err := openOwnRaw(laddr, 0, opt)
		if err != nil {
			registry.dropIfEmpty(key, g)
			return nil, err
		}
		g.own++
		c.onClose = func() {
			registry.mu.Lock()
			defer registry.mu.Unlock()
			g.own--
			registry.dropIfEmpty(key, g)
		}
		return c, nil
	}
	return g.join(key, opt)
}

// netnsID names the network namespace of the calling thread, which a
// socket it opens belongs to (zero if /proc does not say).
func netnsID() [2]uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) != nil {
		return [2]uint64{}
	}
	return [2]uint64{st.Dev, st.Ino}
}

// dropIfEmpty forgets g when it has no Conns left. The caller holds
// registry.mu.
func (r *shareRegistry) dropIfEmpty(key shareKey, g *shareGroup) {
	if g.own == 0 && len(g.shares) == 0 {
		delete(r.groups, key)
	}
}

// join opens a sharedConn in a share of g with room, or in a new one.
// The caller holds registry.mu.
func (g *shareGroup) join(key shareKey, opt *Options) (Conn, error) {
	lease, port, err := reservePort(key.laddr.Is6(), 0)
	if err != nil {
		registry.dropIfEmpty(key, g)
		return nil, err
	}
	var sh *rawShare
	for _, s := range g.shares {
		if len(s.members) < shareCapacity {
			sh = s
			break
		}
	}
	if sh == nil {
		if sh, err = openShare(key.laddr, opt); err != nil {
			lease.release()
			registry.dropIfEmpty(key, g)
			return nil, err
		}
		g.shares = append(g.shares, sh)
	}
	c := &sharedConn{share: sh, port: port, lease: lease, ready: make(chan struct{}, 1), closing: make(chan struct{})}
	if err := sh.setMembers(c, true); err != nil {
		lease.release()
		if len(sh.members) == 0 {
			g.close(sh)
			registry.dropIfEmpty(key, g)
		}
		return nil, err
	}
	c.leave = func() {
		registry.mu.Lock()
		defer registry.mu.Unlock()
		_ = sh.setMembers(c, false) // a filter that keeps a port too many costs a NoMember drop, no more
		if len(sh.members) == 0 {
			g.close(sh)
			registry.dropIfEmpty(key, g)
		}
	}
	return c, nil
}

// close closes a share that lost its last member and takes it out of g.
// The caller holds registry.mu.
func (g *shareGroup) close(sh *rawShare) {
	for i, s := range g.shares {
		if s == sh {
			g.shares = append(g.shares[:i], g.shares[i+1:]...)
			break
		}
	}
	sh.conn.Close()
}

// rawShare is one raw socket shared by sharedConns.
type rawShare struct {
	conn    *sockConn                // the socket; its filter passes the members' ports
	members map[uint16]*sharedConn   // guarded by registry.mu
	table   atomic.Pointer[shareMap] // members, for the reader: replaced whole on each change
	queued  atomic.Int64             // buffer bytes in the members' queues
	token   chan struct{}            // holds one token, taken by the member that parks on the socket

	rd   sync.Mutex       // held while one goroutine reads the socket
	pkts [maxBatch]Packet // the members' pumps' batch; guarded by rd
}

type shareMap = map[uint16]*sharedConn

// openShare opens a share's socket, with a filter that passes nothing
// until setMembers.
func openShare(laddr netip.Addr, opt *Options) (*rawShare, error) {
	o := Options{}
	if opt != nil {
		o = *opt
	}
	if o.ReadBuffer <= 0 {
		o.ReadBuffer = defaultServerReadBuffer // the packets of many Conns queue here
	}
	o.ParkOften = true // readers park on it at every wait: the members spin on their queues
	filter, err := dropAllFilter()
	if err != nil {
		return nil, err
	}
	c, err := openRawSocket(laddr, 0, filter, nil, &o)
	if err != nil {
		return nil, err
	}
	c.anyPort = true
	sh := &rawShare{conn: c, members: make(map[uint16]*sharedConn), token: make(chan struct{}, 1)}
	sh.token <- struct{}{}
	sh.table.Store(&shareMap{})
	return sh, nil
}

// setMembers adds c to the share's members (or takes it out) and makes
// the socket's filter pass exactly their ports. The caller holds
// registry.mu.
func (sh *rawShare) setMembers(c *sharedConn, in bool) error {
	if in {
		sh.members[c.port] = c
	} else {
		delete(sh.members, c.port)
	}
	ports := make([]uint16, 0, len(sh.members))
	table := make(shareMap, len(sh.members))
	for p, m := range sh.members {
		ports = append(ports, p)
		table[p] = m
	}
	filter, err := portSetFilter(sh.conn.v6, ports)
	if err == nil {
		var serr error
		if err = sh.conn.rc.Control(func(fd uintptr) { serr = attachFilter(int(fd), filter) }); err == nil {
			err = serr
		}
	}
	if err != nil && in {
		delete(sh.members, c.port)
		return fmt.Errorf("netio: share a raw socket: %w", err)
	}
	// In: the table before the first packet can pass the filter, which
	// it cannot before the Conn is returned anyway. Out: after.
	sh.table.Store(&table)
	return err
}

// pump is a member's turn at the shared socket: it moves what is queued
// there to the members' queues, its own among them, without waiting.
// When another member is doing so, it returns at once unless wait.
func (sh *rawShare) pump(wait bool) {
	if wait {
		sh.rd.Lock()
	} else if !sh.rd.TryLock() {
		return
	}
	sh.pumpLocked(sh.pkts[:])
	sh.rd.Unlock()
}

// pumpLocked reads one batch from the shared socket, without waiting,
// and hands each packet to its member. The caller holds sh.rd.
func (sh *rawShare) pumpLocked(pkts []Packet) {
	n, err := sh.conn.TryReadBorrowed(pkts)
	if err != nil {
		return // closed: the member's read finds out
	}
	table := *sh.table.Load()
	for i := range pkts[:n] {
		p := &pkts[i]
		port := dstPort(p.Buf)
		if p.Unreachable != 0 {
			port = srcPort(p.Buf)
		}
		switch m := table[port]; {
		case m != nil:
			m.deliver(p)
		case p.Unreachable != 0:
			registry.stats.reportsDiscarded.Add(1)
		default:
			registry.stats.noMember.Add(1)
		}
	}
}
