package core

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/priority"
	"github.com/homa-go/homa/resend"
)

// peer is what the core knows about another host.
type peer struct {
	addr       netip.Addr
	maxPayload int // data bytes per DATA packet to this host (0: unknown yet)
	unsched    int // unscheduled bytes of messages to it (Config.UnschedBytes)

	// cutoffs are the peer's, for our unscheduled packets to it (Linux
	// defaults until it sends CUTOFFS): the last that any of its ports
	// announced, and portCuts those of each port that did (cutoffs.go);
	// cutoffsSent is the tick we last sent it ours.
	cutoffs     priority.Cutoffs
	portCuts    []portCutoffs
	nextPortCut int // the entry of portCuts to replace next, once full
	cutoffsSent uint64

	// acks are completed client RPCs to this host whose acknowledgment
	// has not been sent yet, oldest first; one rides in each DATA header.
	acks []pendingAck
	// lateAcks says the host's last acknowledgment of a response of ours
	// came more than promptAck after it (see AwaitsAcks).
	lateAcks bool

	// What the peer makes the core hold.
	rpcs     int // RPCs with this peer, client and server
	incoming int // server RPCs whose request is arriving
	pending  int // server RPCs whose request awaits a reply
	// recalls are its requests refused at the bound of requests awaiting
	// replies, oldest first, and reserved the room kept for those asked
	// for again (recall.go); rcLinks links it into the core's list of
	// hosts with refusals.
	recalls  []recall
	refused  int // of recalls, those still waiting (not void)
	reserved int
	rcLinks  links[peer]
	mem      int // receive storage committed for its messages
	// receiving lists its RPCs whose incoming message is arriving, least
	// recently active first: server RPCs and client RPCs apart.
	receivingServers list[rpc]
	receivingClients list[rpc]

	// Control budgets: one RESEND per tick (resendTick), and needAcks
	// NEED_ACKs at needAckTick. resendQ holds the RPCs waiting for a
	// RESEND slot, ackQ those waiting for a NEED_ACK slot; rqLinks and
	// aqLinks link the peer into the core's queues of peers with
	// waiting RPCs.
	resendTick  uint64
	resendQ     list[rpc]
	rqLinks     links[peer]
	needAcks    int
	needAckTick uint64
	ackQ        list[rpc]
	aqLinks     links[peer]

	// rtt estimates the peer's round trip; resend, ack and grantTimeout
	// are the configured timing stretched to it (see adapt).
	rtt          resend.RTT
	resend       resend.Config
	ack          ack.Config
	grantTimeout uint64
	// backoff stretches the timing of the RPCs awaiting responses from
	// the peer while its answers show their RESENDs were not needed;
	// respResend is resend with it applied, in effect while the peer is
	// at work: it sent new bytes or BUSY at tick working (see
	// backoff.go).
	backoff    resend.Backoff
	respResend resend.Config
	working    uint64

	timer timer // flushes pending acks
	// idle links the peer into the core's list of peers with no RPCs,
	// least recently used first; heavy buckets index it by memory and by
	// incoming RPCs.
	idle                 links[peer]
	idleAt               uint64 // the tick it joined the idle list
	memLinks, rpcLinks   links[peer]
	memBucket, rpcBucket int8

	// ports is what each client port of the host holds of its shares,
	// for the port's server RPCs (see fair.go); lastUse is the account
	// of lastPort, the port last looked up.
	ports    map[uint16]*portUse
	lastPort uint16
	lastUse  *portUse
}

func lruLinks(r *rpc) *links[rpc] { return &r.lru }

func newPeer(addr netip.Addr) *peer {
	p := &peer{
		addr:             addr,
		cutoffs:          priority.Default,
		cutoffsSent:      priority.NeverSent,
		receivingServers: newList(lruLinks),
		receivingClients: newList(lruLinks),
		resendQ:          newList(rqLinks),
		ackQ:             newList(aqLinks),
	}
	p.timer = timer{idx: -1, peer: p}
	return p
}

// maxPendingAcks bounds the acknowledgments kept per peer; past it the
// oldest is forgotten (acknowledgments are not reliable anyway: servers
// ask again with NEED_ACK).
const maxPendingAcks = 64

// ackBacklog is how many acknowledgments for one server port may wait
// for DATA packets to carry them before an ACK packet takes the oldest
// MaxAcks. A client with many RPCs outstanding completes several in one
// batch of responses and sends as many requests right after, each
// carrying one: a backlog of MaxAcks sent an ACK packet for one RPC in
// five (4 clients x 32 outstanding 100-byte RPCs), where a backlog of 32
// leaves the requests to carry them. The peer timer sends those that
// waited a tick.
const ackBacklog = 32

// pendingAck is an acknowledgment waiting to be sent, with the tick it
// was added.
type pendingAck struct {
	wire.AckEntry
	tick uint64
}

// addAck records a completed client RPC to acknowledge, and returns how
// many are now pending for that server port.
func (p *peer) addAck(a wire.AckEntry, now uint64) int {
	if len(p.acks) == maxPendingAcks {
		copy(p.acks, p.acks[1:])
		p.acks = p.acks[:maxPendingAcks-1]
	}
	p.acks = append(p.acks, pendingAck{a, now})
	n := 0
	for _, x := range p.acks {
		if x.ServerPort == a.ServerPort {
			n++
		}
	}
	return n
}

// acksDue is when the oldest pending acknowledgment has waited a tick.
func (p *peer) acksDue() uint64 { return p.acks[0].tick + 1 }

// takeAck removes the oldest pending acknowledgment for the server port,
// if any. Only acks for the packet's own destination port are
// piggybacked: each port may be served by another process, which sees
// only its own packets.
func (p *peer) takeAck(port uint16) wire.AckEntry {
	for i, a := range p.acks {
		if a.ServerPort == port {
			p.acks = append(p.acks[:i], p.acks[i+1:]...)
			return a.AckEntry
		}
	}
	return wire.AckEntry{}
}

// takeAcks removes up to len(dst) pending acknowledgments for the port
// into dst and returns how many.
func (p *peer) takeAcks(port uint16, dst []wire.AckEntry) int {
	n := 0
	for n < len(dst) {
		a := p.takeAck(port)
		if a.ClientID == 0 {
			break
		}
		dst[n] = a
		n++
	}
	return n
}

// The peer table. A peer stays while anything refers to it (RPCs,
// pending acks); then it joins the idle list, from which the least
// recently used is evicted when the table is full, and where it expires
// after peerLinger. What is lost with an
// evicted peer is soft state: its cutoffs (DATA to it uses the defaults
// until it sends CUTOFFS again) and its path MTU.

// peerFor returns the state for a peer host, creating it if the table
// has room (evicting an idle peer if needed); nil if it has none.
func (c *Core) peerFor(addr netip.Addr) *peer {
	if p := c.peers[addr]; p != nil {
		return p
	}
	if len(c.peers) >= c.cfg.Limits.Peers {
		old := c.idlePeers.Front()
		if old == nil {
			return nil
		}
		c.evictPeer(old)
	}
	p := newPeer(addr)
	p.unsched = c.cfg.UnschedBytes
	if addr.IsLoopback() {
		p.unsched = c.loopUnsched
	}
	c.adapt(p)
	c.peers[addr] = p
	c.pushIdle(p)
	return p
}

// unschedTo is the unscheduled bytes of messages to the host at addr.
func (c *Core) unschedTo(addr netip.Addr) int {
	if p := c.peers[addr]; p != nil {
		return p.unsched
	}
	if addr.IsLoopback() {
		return c.loopUnsched
	}
	return c.cfg.UnschedBytes
}

// holdPeer and releasePeer count an RPC's reference to its peer; a peer
// with none is idle.
func (c *Core) holdPeer(p *peer) {
	p.rpcs++
	c.idlePeers.Remove(p)
}

func (c *Core) releasePeer(p *peer) {
	p.rpcs--
	c.maybeIdle(p)
}

// acksTaken follows the sending of some of p's pending
// acknowledgments: with none left, the timer that would have sent them
// has nothing to do, and p may be idle.
func (c *Core) acksTaken(p *peer) {
	if len(p.acks) == 0 {
		c.timers.disarm(&p.timer)
	}
	c.maybeIdle(p)
}

// maybeIdle puts p on the idle list if nothing refers to it any more.
func (c *Core) maybeIdle(p *peer) {
	if p.rpcs == 0 && len(p.acks) == 0 && len(p.recalls) == 0 && p.reserved == 0 && !p.idle.Listed() {
		c.pushIdle(p)
	}
}

// Idle peers expire. A peer that has had nothing to do with this
// endpoint for peerLinger is let go, so that a burst of clients does not
// leave the table full for good; what it loses is soft state (above).
// The idle list is in the order peers fell idle, and one timer, armed
// at the expiry of its first rounded up to a sixteenth of peerLinger,
// serves it: an idle core wakes at most sixteen times for it.
const peerLinger = time.Minute

// pushIdle puts p at the end of the idle list.
func (c *Core) pushIdle(p *peer) {
	p.idleAt = c.tick
	c.idlePeers.PushBack(p)
	c.armPeerExpiry()
}

// armPeerExpiry sets the idle peers' timer, unless it is set.
func (c *Core) armPeerExpiry() {
	p := c.idlePeers.Front()
	if p == nil || c.peerExpiry.idx >= 0 {
		return
	}
	ticks := c.peerLingerTicks()
	grain := max(ticks/16, 1)
	at := (p.idleAt + ticks + grain - 1) / grain * grain
	c.timers.arm(&c.peerExpiry, c.at(max(at, c.tick+1)))
}

func (c *Core) peerLingerTicks() uint64 {
	return uint64((peerLinger + c.cfg.Tick - 1) / c.cfg.Tick)
}

// expirePeers runs at the idle peers' timer: it lets go of those idle
// for peerLinger (at most seenSweep of them: the rest at the next tick).
func (c *Core) expirePeers() {
	ticks := c.peerLingerTicks()
	for range seenSweep {
		p := c.idlePeers.Front()
		if p == nil || p.idleAt+ticks > c.tick {
			break
		}
		c.dropPeer(p)
		c.stats.PeersExpired++
	}
	if p := c.idlePeers.Front(); p != nil && p.idleAt+ticks <= c.tick {
		c.timers.arm(&c.peerExpiry, c.at(c.tick+1))
	} else {
		c.armPeerExpiry()
	}
}

// evictPeer lets idle peer p go to make room.
func (c *Core) evictPeer(p *peer) {
	c.dropPeer(p)
	c.stats.PeersEvicted++
}

// dropPeer forgets idle peer p.
func (c *Core) dropPeer(p *peer) {
	c.idlePeers.Remove(p)
	c.timers.disarm(&p.timer)
	delete(c.peers, p.addr)
}
