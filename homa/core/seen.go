package core

import (
	"net/netip"

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

const (
	// maxSeenClients bounds the client ports whose finished ids a server
	// remembers (4 KiB each, 16 MiB in all); past it, an arbitrary one is
	// forgotten.
	maxSeenClients = 4096
	// seenPerClient is how many ids of a client port the exact record
	// spans (see ack.Seen).
	seenPerClient = ack.DefaultSeenCapacity
	// maxSolicited bounds the solicited ids; solicitTicks is how long
	// one stays valid.
	maxSolicited = 1024
	solicitTicks = 1000
)

func (c *Core) seenFor(addr netip.Addr, port uint16) *ack.Seen {
	k := clientKey{addr, port}
	if s := c.lookupSeen(k); s != nil {
		return s
	}
	if len(c.seen) >= maxSeenClients {
		for old := range c.seen {
			delete(c.seen, old)
			if old == c.lastSeen.k {
				c.lastSeen = seenEntry{}
			}
			break
		}
	}
	s := ack.NewSeen(seenPerClient)
	c.seen[k] = s
	return s
}

// seenEntry is a client port's record of finished ids.
type seenEntry struct {
	k clientKey
	s *ack.Seen
}

// lookupSeen returns the record of client port k, if any. The one found
// last is kept at hand: a request and its acknowledgment look it up,
// and requests from one client port come in runs.
func (c *Core) lookupSeen(k clientKey) *ack.Seen {
	if c.lastSeen.s != nil && c.lastSeen.k == k {
		return c.lastSeen.s
	}
	s := c.seen[k]
	if s != nil {
		c.lastSeen = seenEntry{k, s}
	}
	return s
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
