package core

import (
	"net/netip"

	"github.com/homa-go/homa/ack"
)

// Duplicate protection. ack.Seen knows the last seenPerClient finished
// request ids of a client port exactly, and treats every id at or below
// its floor as finished. At high rates the floor overtakes a live RPC
// whose request was lost, and refusing it would starve the RPC. So an id
// below the floor gets one way back in: the client RESENDs for its
// response (which only a client still waiting does: one that has the
// response has acknowledged it), the server records the id as solicited
// and asks for the request, and accepts it only as a retransmission. A
// delayed copy of the original send carries no retransmit flag.

// clientKey names one client port of one host.
type clientKey struct {
	addr netip.Addr
	port uint16
}

const (
	// maxSeenClients bounds the client ports whose finished ids a server
	// remembers; past it, an arbitrary one is forgotten.
	maxSeenClients = 4096
	// seenPerClient is how many finished ids are remembered per client
	// port.
	seenPerClient = 256
	// maxSolicited bounds the solicited ids; solicitTicks is how long
	// one stays valid.
	maxSolicited = 1024
	solicitTicks = 1000
)

func (c *Core) seenFor(addr netip.Addr, port uint16) *ack.Seen {
	k := clientKey{addr, port}
	if s := c.seen[k]; s != nil {
		return s
	}
	if len(c.seen) >= maxSeenClients {
		for old := range c.seen {
			delete(c.seen, old)
			break
		}
	}
	s := ack.NewSeen(seenPerClient)
	c.seen[k] = s
	return s
}

// stale reports whether a request packet for client id from (addr, port)
// must not start an RPC: the id is finished here, or below what this
// server remembers and not solicited (retransmit is the packet's flag).
func (c *Core) stale(addr netip.Addr, port uint16, id uint64, retransmit bool) bool {
	s := c.seen[clientKey{addr, port}]
	if s == nil || !s.Done(id) {
		return false
	}
	k := serverKey{addr, id | 1}
	if t, ok := c.solicited[k]; ok && retransmit && id <= s.Floor() {
		delete(c.solicited, k)
		return c.tick-t > solicitTicks
	}
	return true
}

// solicit is called for a client's RESEND about an RPC this server does
// not hold. It reports whether to ask for the request: not if the id is
// known exactly to be finished; if it is below the floor, it becomes
// solicited.
func (c *Core) solicit(addr netip.Addr, port uint16, id uint64) bool {
	s := c.seen[clientKey{addr, port}]
	if s == nil || !s.Done(id) {
		return true
	}
	if id > s.Floor() {
		return false // finished here: the client's RESEND is a stray
	}
	k := serverKey{addr, id | 1}
	if _, ok := c.solicited[k]; ok || len(c.solicited) < maxSolicited {
		c.solicited[k] = c.tick
		return true
	}
	// The table is full: drop the expired ones and try once more.
	for k, t := range c.solicited {
		if c.tick-t > solicitTicks {
			delete(c.solicited, k)
		}
	}
	if len(c.solicited) < maxSolicited {
		c.solicited[k] = c.tick
	}
	return true
}
