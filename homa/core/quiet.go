package core

import "time"

// A quiet endpoint. Between the RPCs of a client that calls now and
// then, and of a server whose requests come now and then, the core
// should leave its shell nothing to do: no deadline to wake up for, no
// acknowledgment that a timer must send later, nothing a reader must
// stay on the socket for. Two things get it there.
//
// Acknowledging at once when no request is coming soon. A client
// acknowledges its completed RPCs in the requests it sends next to the
// same server; when none follows, a timer sends them a tick later in an
// ACK packet, or the server asks with NEED_ACK two ticks after its
// response. Either costs each side a wake-up per RPC that a client
// calling now and then never needed: a timer's on one, a parked
// reader's on the other. So a client whose last RPC to complete leaves
// none in flight, and whose requests lately followed their
// predecessors' completions by more than eagerAckGap, sends the
// acknowledgment with the response's arrival: one packet, which the
// engine's shell sends after handing the response over (its ackLoop),
// so that the send and the loopback delivery that wakes the server are
// not on the response's way to the caller.
// A client that sends its next request at once (one at a time, back to
// back) still lets the request carry it.
//
// Quiet reports a core with nothing in progress, which the shell uses
// to leave the socket alone until the application comes back.

// eagerAckGap is the gap between a completion and the next request
// above which a client acknowledges at once: about how long a server
// polls after its reply (Linux Homa and the engine: 50 µs).
const eagerAckGap = 50 * time.Microsecond

// maxThinkSample bounds one gap's weight in the average, so that one
// long pause does not make a busy client acknowledge eagerly for long.
const maxThinkSample = 4 * eagerAckGap

// thinkGap keeps the average gap between a client's completions that
// left no RPC in flight and its next request.
type thinkGap struct {
	lastDone time.Duration // when the last such completion happened; 0: none since the last request
	avg      time.Duration
}

// sent notes a request sent at now with no other client RPC in flight.
func (g *thinkGap) sent(now time.Duration) {
	if g.lastDone == 0 {
		return
	}
	gap := min(now-g.lastDone, maxThinkSample)
	g.avg = (3*g.avg + gap) / 4
	g.lastDone = 0
}

// done notes a completion at now that left no client RPC in flight, and
// reports whether to acknowledge at once.
func (g *thinkGap) done(now time.Duration) bool {
	g.lastDone = max(now, 1)
	return g.avg > eagerAckGap
}

// Quiet reports whether the core has nothing in progress: no RPC, no
// deadline but the expiry of idle state (records of finished ids, idle
// peers), which is housekeeping a minute away. Work put off until Idle
// does not count: it waits for the next reader with nothing to read.
func (c *Core) Quiet() bool {
	return !c.closed && len(c.clients) == 0 && c.servers.len() == 0 && c.timers.len() == c.expiries() && c.pacerAt == 0
}

// Awaiting acknowledgments. A client that acknowledges at once (see
// above) sends the acknowledgment within microseconds of a small
// response's arrival; a server reader that stays on the socket that long
// catches it, and is spared a wake-up for it and a NEED_ACK deadline
// (the engine's shell leaves that deadline to such a reader). Other
// clients acknowledge with their next request or on a timer, a tick or
// more later (Linux's do), and a reader waiting for them would spin in
// vain. So the core learns, per host, whether its last acknowledgment of
// a response came within promptAck (a parked server's wake-up included),
// and AwaitsAcks reports whether all the core has in progress is
// responses waiting for acknowledgments from hosts that acknowledge
// promptly: server RPCs that replied, and no client RPC or request
// still arriving or with the application. A host is taken to be prompt
// until it is seen not to be.

// promptAck is the most an acknowledgment may come after its response
// for its host to count as acknowledging promptly: well over a client's
// microseconds and a parked server's wake-up, well under the tick an
// acknowledgment left to a timer waits.
const promptAck = 250 * time.Microsecond

// AwaitsAcks reports whether all the core has in progress is responses
// waiting for acknowledgments that should come promptly (see Awaiting
// acknowledgments).
func (c *Core) AwaitsAcks() bool {
	return c.replying > 0 && c.prompt == c.replying && len(c.clients) == 0 && c.servers.len() == c.replying
}

// expiries is the number of armed expiry timers.
func (c *Core) expiries() int {
	n := 0
	if c.seen.timer.idx >= 0 {
		n++
	}
	if c.peerExpiry.idx >= 0 {
		n++
	}
	return n
}
