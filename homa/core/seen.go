package core

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/ack"
)

// Duplicate protection. ack.Seen knows which of the last seenPerClient
// ids of a client port finished here, exactly, and treats every id below
// that window as finished. Should the floor overtake a live RPC whose
// request was lost, refusing it would starve the RPC. So an id
// below the floor gets one way back in, which only a client still
// waiting for the RPC can take:
//
//  1. The client RESENDs for its response (a client that has the
//     response has acknowledged it and is silent). One RESEND could be a
//     stale duplicate from long ago, so the server waits for a second
//     one at least a resend interval later before it believes the client
//     is waiting: the id becomes solicited.
//  2. The server asks for the request. A client that has no such RPC
//     answers RPC_UNKNOWN, which withdraws the solicitation.
//  3. The server accepts the request only as a retransmission (a delayed
//     copy of the original send carries no retransmit flag), once.
//
// A second execution would take the network delivering, after the floor
// passed the id, two stale RESENDs a resend interval apart and then a
// stale retransmission inside one round trip.

// solicitation is a client's claim to be waiting for an RPC below the
// floor: first is the tick of its first RESEND, and confirmed is set once
// a second one came at least a resend interval later.
type solicitation struct {
	first     uint64
	confirmed bool
}

// clientKey names one client port of one host.
type clientKey struct {
	addr netip.Addr
	port uint16
}

// Expiry. A record lets go when its client port has been silent long
// enough that no copy of a request it covers can still arrive. The
// server finishes an id (records it) when the client acknowledges the
// response, which it does only after it has ended the RPC, or when it
// reclaims the RPC after ReclaimTicks without word from the client,
// which ack.ReclaimAtLeast makes longer than the client takes to give
// the RPC up (its peer timeout). A client sends no packet of an RPC it
// has ended, and retransmits a request only when the server asks, which
// it does not for one it has in full. So every packet of a finished id
// was sent before the finish, or (the reclaimed RPC of a client cut off
// one way) less than a peer timeout after it. A record's last activity
// is its last finish, or the last request or RESEND that consulted it.
// What arrives seenLinger plus ReclaimTicks after that has been held in
// the network for longer than seenLinger. The port's own new RPCs do
// not need the record: its ids only increase, so they are above every
// id it covers, and a fresh record refuses their duplicates as well.
// A client waiting for an RPC below the floor (see above) RESENDs once
// a resend interval, so it keeps its record: an active port never
// expires.
//
// seenLinger is the network's lifetime of a packet as this assumes it:
// a minute, like the time Linux keeps a closed TCP connection's state
// (TIME_WAIT) against old segments, some thousand times what a
// datacenter fabric's queues hold a packet.
//
// The records are kept in a list by last activity, least recent first,
// so that touching one is O(1), one timer serves the whole list, armed
// at the expiry of the least recent rounded up to seenGrain ticks (an
// idle core wakes at most once a grain while records remain), and at
// maxSeenClients the least recently active record makes room.
const seenLinger = time.Minute

// seenGrain divides the expiry time into the steps in which the timer
// wakes; each expiring tick lets go of at most seenSweep records, the
// rest at the next tick.
const (
	seenGrain = 16
	seenSweep = 256
)

// seenRec is one client port's record.
type seenRec struct {
	k    clientKey
	s    *ack.Seen
	last uint64 // tick of the last activity
	lru  links[seenRec]
}

// seenTable is the records of the client ports, least recently active
// first in lru; timer fires when the first expires.
type seenTable struct {
	m     map[clientKey]*seenRec
	lru   list[seenRec]
	timer timer
	peak  int      // the most records since the map was last rebuilt
	last  *seenRec // the record found last (see lookupSeen)
}

func newSeenTable() seenTable {
	return seenTable{
		m:     make(map[clientKey]*seenRec),
		lru:   newList(func(r *seenRec) *links[seenRec] { return &r.lru }),
		timer: timer{idx: -1},
	}
}

const (
	// maxSeenClients bounds the client ports whose finished ids a server
	// remembers (4 KiB each, 16 MiB in all); past it, the least
	// recently active is forgotten.
	maxSeenClients = 4096
	// seenPerClient is how many ids of a client port the exact record
	// spans (see ack.Seen).
	seenPerClient = ack.DefaultSeenCapacity
	// maxSolicited bounds the solicited ids; solicitTicks is how long
	// one stays valid.
	maxSolicited = 1024
	solicitTicks = 1000
)

// seenTicks is how long a record outlives its port's last activity.
func (c *Core) seenTicks() uint64 {
	return uint64((seenLinger+c.cfg.Tick-1)/c.cfg.Tick) + uint64(c.cfg.Ack.ReclaimTicks)
}

func (c *Core) seenFor(addr netip.Addr, port uint16) *ack.Seen {
	k := clientKey{addr, port}
	if s := c.lookupSeen(k); s != nil {
		return s
	}
	t := &c.seen
	if len(t.m) >= maxSeenClients {
		c.dropSeen(t.lru.Front())
		c.stats.SeenEvicted++
	}
	r := &seenRec{k: k, s: ack.NewSeen(seenPerClient), last: c.tick}
	t.m[k] = r
	t.peak = max(t.peak, len(t.m))
	t.lru.PushBack(r)
	t.last = r
	c.armSeen()
	return r.s
}

// lookupSeen returns the record of client port k, if any, and counts
// the lookup as the port's activity. The one found last is kept at
// hand: a request and its acknowledgment look it up, and requests from
// one client port come in runs.
func (c *Core) lookupSeen(k clientKey) *ack.Seen {
	t := &c.seen
	r := t.last
	if r == nil || r.k != k {
		if r = t.m[k]; r == nil {
			return nil
		}
		t.last = r
	}
	r.last = c.tick
	t.lru.MoveToBack(r)
	return r.s
}

// dropSeen forgets record r.
func (c *Core) dropSeen(r *seenRec) {
	t := &c.seen
	delete(t.m, r.k)
	t.lru.Remove(r)
	if t.last == r {
		t.last = nil
	}
}

// armSeen sets the records' timer to the expiry of the least recently
// active, rounded up to the grain, unless it is set.
func (c *Core) armSeen() {
	t := &c.seen
	r := t.lru.Front()
	if r == nil || t.timer.idx >= 0 {
		return
	}
	ticks := c.seenTicks()
	grain := max(ticks/seenGrain, 1)
	at := (r.last + ticks + grain - 1) / grain * grain
	c.timers.arm(&t.timer, c.at(max(at, c.tick+1)))
}

// expireSeen runs at the records' timer: it lets go of those whose
// port has been silent for seenTicks (at most seenSweep of them), and
// sets the timer for the next.
func (c *Core) expireSeen() {
	t := &c.seen
	ticks := c.seenTicks()
	for range seenSweep {
		r := t.lru.Front()
		if r == nil || r.last+ticks > c.tick {
			break
		}
		c.dropSeen(r)
		c.stats.SeenExpired++
	}
	if r := t.lru.Front(); r != nil && r.last+ticks <= c.tick {
		c.timers.arm(&t.timer, c.at(c.tick+1)) // more due: the next tick
	} else {
		c.armSeen()
	}
	// Go maps keep the room of their peak: once the records are far
	// fewer, move them to a map of their size.
	t.m, t.peak = shrinkMap(t.m, t.peak)
}

// stale reports whether a request packet for client id from (addr, port)
// must not start an RPC: the id is finished here, or below what this
// server remembers and not solicited (retransmit is the packet's flag).
func (c *Core) stale(addr netip.Addr, port uint16, id uint64, retransmit bool) bool {
	s := c.lookupSeen(clientKey{addr, port})
	if s == nil || !s.Done(id) {
		return false
	}
	k := serverKey{addr, id | 1}
	if so, ok := c.solicited[k]; ok && so.confirmed && retransmit && id <= s.Floor() {
		delete(c.solicited, k)
		return c.tick-so.first > solicitTicks
	}
	return true
}

// solicit is called for a client's RESEND about an RPC this server does
// not hold. It reports whether to ask for the request: yes for an id the
// server has not finished; no for one it knows exactly to be finished;
// for one below the floor, once the solicitation is confirmed (see
// above).
func (c *Core) solicit(addr netip.Addr, port uint16, id uint64) bool {
	s := c.lookupSeen(clientKey{addr, port})
	if s == nil || !s.Done(id) {
		return true
	}
	if id > s.Floor() {
		return false // finished here: the client's RESEND is a stray
	}
	k := serverKey{addr, id | 1}
	if so, ok := c.solicited[k]; ok {
		if c.tick-so.first > solicitTicks {
			delete(c.solicited, k) // too old: start over
		} else {
			so.confirmed = so.confirmed || c.tick >= so.first+uint64(c.cfg.Resend.ResendInterval)
			c.solicited[k] = so
			return so.confirmed
		}
	}
	if len(c.solicited) >= maxSolicited {
		// The table is full: drop the expired claims.
		for k, so := range c.solicited {
			if c.tick-so.first > solicitTicks {
				delete(c.solicited, k)
			}
		}
	}
	if len(c.solicited) < maxSolicited {
		c.solicited[k] = solicitation{first: c.tick}
	}
	return false
}

// withdraw forgets a solicitation: the client said it has no such RPC.
func (c *Core) withdraw(addr netip.Addr, id uint64) {
	if len(c.solicited) > 0 {
		delete(c.solicited, serverKey{addr, id | 1})
	}
}
