package core

import (
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/resend"
)

// never is a deadline that does not come.
const never = time.Duration(1<<63 - 1)

// rpcTimer does what is due for r: loss recovery (RESEND, or ending an
// RPC whose peer stopped answering for it), acknowledgments (NEED_ACK,
// reclaiming), taking the grant of a silent sender, and forgetting an
// RPC its client disowned; then it sets r's timer to its next duty.
func (c *Core) rpcTimer(r *rpc) {
	next := never
	if r.unknownTick != 0 {
		if c.tick+1 >= r.unknownTick+unknownGrace(r) {
			c.stats.ServerRPCsFreed++
			c.freeServer(r, true)
			return
		}
		next = c.at(r.unknownTick - 1 + unknownGrace(r))
	}
	switch {
	case r.state == stateActive && (!r.isClient() || r.out.next >= r.out.granted):
		// Data is owed to us: a server's request, or a client's
		// response once its request is out.
		due, alive := c.resendDue(r)
		if !alive {
			return
		}
		next = min(next, due)
	case r.state == stateReplying:
		due, alive := c.ackDue(r)
		if !alive {
			return
		}
		next = min(next, due)
	}
	if r.state == stateActive {
		next = min(next, c.grantDue(r))
	}
	if next != never {
		c.armRPC(r, max(next, c.at(c.tick+1)))
	}
}

// resendDue runs r's loss detector if it is due, within its peer's
// and the core's RESEND budgets (an RPC over them waits for its turn:
// see resendq.go). An
// RPC whose peer said nothing about it through TimeoutResends RESENDs
// ends: a client RPC fails with ErrPeerTimeout, a server RPC is
// forgotten. It returns r's next deadline, and false if r ended.
func (c *Core) resendDue(r *rpc) (time.Duration, bool) {
	cfg := c.resendConfig(r)
	if !r.owed() {
		// Every granted byte is here: the peer owes nothing until we
		// grant more, so it is not silent (as Linux's silent_ticks). A
		// parked message looks for memory again every interval.
		r.rs.Start(c.tick)
		if !r.parked {
			return never, true
		}
		c.unpark(r)
		return c.at(c.tick + uint64(cfg.ResendInterval)), true
	}
	if due := r.rs.Due(cfg); due > c.tick {
		return c.at(due), true
	}
	if r.rq.Listed() {
		return never, true // waiting for its turn
	}
	if !c.resendSlot(r.peer) {
		c.awaitResend(r)
		return never, true
	}
	switch r.rs.Tick(c.tick, cfg) {
	case resend.Resend:
		r.asked(c.now, r.rs.Unanswered())
		c.queueResend(r)
		r.noteAsk()
	case resend.Timeout:
		c.stats.PeerTimeouts++
		if r.isClient() {
			c.stats.RPCTimeouts++
			c.fail(r, contract.ErrPeerTimeout)
		} else {
			c.freeServer(r, false)
		}
		return 0, false
	}
	if r.parked {
		c.unpark(r) // memory may have come back meanwhile
	}
	return c.at(r.rs.Due(cfg)), true
}

// ackDue: an answered server RPC waits for its acknowledgment, asking
// for it with NEED_ACK once the response is out, and is reclaimed after
// a long silence. A NEED_ACK over the peer's budget waits for its turn
// (see ackq.go). It returns r's next deadline, and false if r was
// reclaimed.
func (c *Core) ackDue(r *rpc) (time.Duration, bool) {
	cfg := &r.peer.ack
	if r.aq.Listed() && r.ak.ReclaimDue(cfg) > c.tick {
		return c.at(r.ak.ReclaimDue(cfg)), true // waiting for its turn
	}
	if due := r.ak.Due(cfg); due > c.tick {
		return c.at(due), true
	}
	switch r.ak.Tick(c.tick, cfg) {
	case ack.NeedAck:
		if !r.out.done() {
			break // the response is still going out
		}
		if !c.needAckSlot(r.peer) {
			c.awaitNeedAck(r)
			return c.at(r.ak.ReclaimDue(cfg)), true
		}
		c.stats.NeedAcksSent++
		c.queueBare(wire.TypeNeedAck, r.peer.addr, r.port, r.id)
	case ack.Reclaim:
		c.stats.Reclaimed++
		c.freeServer(r, true)
		return 0, false
	}
	return c.at(r.ak.Due(cfg)), true
}

// grantDue takes the grant of a message whose sender has left granted
// bytes unsent for its peer's grant timeout (Limits.GrantTimeoutTicks,
// stretched to the peer's round trip), and returns when to look again.
func (c *Core) grantDue(r *rpc) time.Duration {
	if r.gid == 0 || r.in.granted <= r.in.received {
		return never
	}
	due := r.grantDue()
	if c.tick < due {
		return c.at(due)
	}
	c.park(r)
	c.stats.GrantsRevoked++
	return never
}

// peerTimer sends the acknowledgments that have waited a tick.
func (c *Core) peerTimer(p *peer) {
	for len(p.acks) > 0 && p.acksDue() <= c.tick {
		c.flushAcks(p, p.acks[0].ServerPort)
	}
	if len(p.acks) > 0 {
		c.timers.arm(&p.timer, c.at(p.acksDue()))
	}
}

// maxResendGaps bounds the RESENDs one RPC sends per round.
const maxResendGaps = 8

// queueResend asks r's peer for the ranges of r's incoming message that
// were granted but have not arrived (each gap in one RESEND, up to
// maxResendGaps), and reports whether there were any. When nothing has
// arrived, a client does not know the length and asks for everything.
func (c *Core) queueResend(r *rpc) bool {
	var buf [maxResendGaps]resend.Span
	gaps := buf[:0]
	if !r.inInit {
		gaps = append(gaps, resend.Span{Start: 0, End: wire.ResendToEnd})
	} else {
		gaps = resend.Gaps(r.in.spans(), r.in.granted, gaps)
	}
	for _, g := range gaps {
		n := g.End - g.Start
		if !r.inInit {
			n = wire.ResendToEnd
		}
		c.stats.ResendsSent++
		rs := wire.Resend{Common: c.control(r.port, r.id), Offset: g.Start, Length: n, Priority: controlPriority}
		c.addControl(rs.Append(c.bufs.Get(wire.ResendLen)[:0]), r.peer.addr)
	}
	return len(gaps) > 0
}
