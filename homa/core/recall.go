package core

import (
	"net/netip"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/resend"
)

// Recalling refused requests. The application holds the requests it has
// not answered yet; Limits bound them per host (PendingRepliesPerPeer)
// and in all (PendingReplies), and a request that comes while its host
// or the server is at its bound is refused: the core keeps no RPC for
// it. Its client would learn of it only when its RESEND timer fired, a
// round trip stretched by the load, then be asked for the request (see
// solicit) and retransmit it at most once a window: under a backlog the
// refused requests waited longest of all.
//
// So the core remembers each refusal (client port, RPC, the request's
// length: a few words), at most PendingReplies of them per host and
// twice that in all, and when a reply makes room it asks the client for
// the request again, oldest refusal first: a RESEND for its first
// bytes, as if its first packet had been lost, which the client answers
// by retransmitting. Meanwhile a RESEND of the client's for the RPC is
// answered BUSY: its request is not lost, only waiting. The room is
// kept for the recalled request (a reservation) for recallTicks, so
// that newcomers do not take it, and the request is admitted when it
// comes whatever the bound. A reservation not claimed in time lapses
// and its room goes to the next refusal (a timer of the core's sees to
// it when nothing else does); refusals beyond the memory are dropped as
// before, their clients left to their own timers. A host whose refused
// requests all came again on their own has what is remembered of them
// forgotten at once, so that it can fall idle. The server
// thus pulls a backlog in at the pace its application answers, as a
// Homa receiver pulls a message in with grants.
//
// Refused retransmissions are not remembered. A client retransmits each
// byte at most once a resend interval (outMsg.allowRexmit), so a request
// refused as it came again (answering a RESEND of the server's, or the
// recall of a reservation that had just lapsed) would have its recall
// ignored, and the room reserved for it would lapse unclaimed. With as
// many such reservations as its host's bound, every request of the host
// was refused for the room they held, and recalled in turn too soon to
// be answered: 3 hosts of 2 clients with 17 requests each, 6 requests a
// host at once, stalled with 12 RPCs unanswered for a simulated minute
// (TestRecallRetransmittedRefusal). Such a request is left to its
// client's RESEND timer, which finds the server soliciting it again.

// recallKey names a refused request: its client's address and port and
// the server's id of its RPC.
type recallKey struct {
	addr netip.Addr
	port uint16
	id   uint64
}

// recall is a refused request, remembered.
type recall struct {
	key    recallKey
	length uint32 // what its first packet said the request holds
}

// reservation is room kept for a recalled request until tick until.
type reservation struct {
	key   recallKey
	until uint64
}

// recallState is what the core remembers of refused requests.
type recallState struct {
	// keys holds every refusal remembered (0) and every reservation
	// (the tick it lapses).
	keys map[recallKey]uint64
	// peers are the hosts with refusals remembered, the one recalled
	// from longest ago first; refusals counts those refusals.
	peers    list[peer]
	refusals int
	// reservations are in the order made; reserved counts those held;
	// timer lapses them when their time comes.
	reservations []reservation
	reserved     int
	timer        timer
}

func recallLinks(p *peer) *links[peer] { return &p.rcLinks }

// atReplyBound reports whether one more request from p would pass the
// bounds of requests awaiting replies, the room reserved counted in.
func (c *Core) atReplyBound(p *peer) bool {
	l := &c.cfg.Limits
	return p.pending+p.reserved >= l.PendingRepliesPerPeer || c.pending+c.rc.reserved >= l.PendingReplies
}

// refuse remembers a request refused at the bound of requests awaiting
// replies, if there is room to.
func (c *Core) refuse(p *peer, port uint16, id uint64, length uint32) {
	rc := &c.rc
	l := &c.cfg.Limits
	k := recallKey{p.addr, port, id}
	if _, ok := rc.keys[k]; ok || len(p.recalls) >= l.PendingReplies || rc.refusals >= 2*l.PendingReplies {
		return
	}
	if rc.keys == nil {
		rc.keys = make(map[recallKey]uint64)
	}
	rc.keys[k] = 0
	if len(p.recalls) == 0 {
		rc.peers.PushBack(p)
		c.idlePeers.Remove(p)
	}
	p.recalls = append(p.recalls, recall{k, length})
	p.refused++
	rc.refusals++
}

// dropRecalls forgets what p's refusals left behind once none of them
// waits any more (each request came again on its own): the entries of
// p.recalls are all void.
func (c *Core) dropRecalls(p *peer) {
	rc := &c.rc
	rc.refusals -= len(p.recalls)
	clear(p.recalls)
	p.recalls = nil
	rc.peers.Remove(p)
	c.maybeIdle(p)
}

// refused reports whether the request of RPC id from port of the host
// at addr is remembered as refused, to be asked for when there is room.
func (c *Core) refused(addr netip.Addr, port uint16, id uint64) bool {
	if c.rc.refusals == 0 {
		return false
	}
	until, ok := c.rc.keys[recallKey{addr, port, id}]
	return ok && until == 0
}

// reservedFor reports whether room is reserved for the request of RPC
// id from port of p: it was recalled.
func (c *Core) reservedFor(p *peer, port uint16, id uint64) bool {
	if c.rc.reserved == 0 {
		return false
	}
	until, ok := c.rc.keys[recallKey{p.addr, port, id}]
	return ok && until != 0
}

// admitted says that a request of p came and has an RPC now: a refusal
// of it remembered is void (recallOne skips it), and the reservation
// for it, if any, is taken.
func (c *Core) admitted(p *peer, port uint16, id uint64) {
	rc := &c.rc
	if len(rc.keys) == 0 {
		return
	}
	k := recallKey{p.addr, port, id}
	until, ok := rc.keys[k]
	if !ok {
		return
	}
	delete(rc.keys, k)
	if until != 0 {
		p.reserved--
		rc.reserved--
		return
	}
	if p.refused--; p.refused == 0 {
		c.dropRecalls(p)
	}
}

// recallMore gives room that a reply (or a lapsed reservation) made to
// a refused request: p's, since p's reply made it, else that of the
// host recalled from longest ago.
func (c *Core) recallMore(p *peer) {
	rc := &c.rc
	if rc.refusals == 0 {
		return
	}
	for _, q := range [2]*peer{p, rc.peers.Front()} {
		if q != nil && len(q.recalls) > 0 && !c.atReplyBound(q) && c.recallOne(q) {
			return
		}
	}
}

// recallOne asks p's client for its oldest refused request that still
// has no RPC, reserving room for it, and reports whether there was one.
func (c *Core) recallOne(p *peer) bool {
	rc := &c.rc
	var r recall
	found := false
	for len(p.recalls) > 0 && !found {
		r = p.recalls[0]
		p.recalls[0] = recall{}
		p.recalls = p.recalls[1:]
		rc.refusals--
		until, ok := rc.keys[r.key]
		found = ok && until == 0
	}
	if found {
		p.refused--
	}
	if len(p.recalls) == 0 {
		p.recalls = nil
		rc.peers.Remove(p)
		c.maybeIdle(p)
	} else {
		rc.peers.MoveToBack(p)
	}
	if !found {
		return false
	}
	until := c.tick + recallTicks(&p.resend)
	rc.keys[r.key] = until
	rc.reservations = append(rc.reservations, reservation{r.key, until})
	c.timers.arm(&rc.timer, c.at(until))
	p.reserved++
	rc.reserved++
	c.idlePeers.Remove(p)
	rs := wire.Resend{Common: c.control(r.key.port, r.key.id), Length: max(min(r.length, uint32(p.unsched)), 1), Priority: controlPriority}
	c.addControl(rs.Append(c.bufs.Get(wire.ResendLen)[:0]), p.addr)
	c.stats.Recalled++
	return true
}

// recallTicks is how long room is kept for a recalled request: one
// RESEND interval of its host's, a round trip and more. A request that
// waits longer (behind a backlog in the server's socket) finds its room
// given to the next refusal and competes with newcomers: room kept for
// as long as its client may stay silent (a peer timeout) had every
// request of a backlog of thousands refused once and recalled, twice
// the packets and the round trips for each.
func recallTicks(rc *resend.Config) uint64 { return uint64(rc.ResendInterval) + 1 }

// lapseReservations lets go of the reservations not claimed in time,
// giving their room to the next refusals.
func (c *Core) lapseReservations() {
	rc := &c.rc
	for len(rc.reservations) > 0 && rc.reservations[0].until <= c.tick {
		v := rc.reservations[0]
		rc.reservations[0] = reservation{}
		rc.reservations = rc.reservations[1:]
		if rc.keys[v.key] != v.until {
			continue // claimed (or the key's later reservation)
		}
		delete(rc.keys, v.key)
		rc.reserved--
		c.stats.RecallsLapsed++
		p := c.peers[v.key.addr]
		if p == nil {
			continue // not while it holds room: a peer is let go only idle
		}
		p.reserved--
		c.maybeIdle(p)
		c.recallMore(p)
	}
	switch {
	case len(rc.reservations) == 0:
		rc.reservations = nil
		c.timers.disarm(&rc.timer)
	case rc.timer.idx < 0:
		c.timers.arm(&rc.timer, c.at(rc.reservations[0].until))
	}
}
