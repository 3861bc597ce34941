package core

import "time"

// The core measures each peer's round trip and stretches its timers to
// it, so that a path slower than the configured timing is not flooded
// with RESENDs and NEED_ACKs and its senders do not lose their grants
// while their bytes are on the way. The configured timing is the floor:
// on a fast path nothing changes. Samples come from two exchanges whose
// answer is unambiguous:
//
//   - a GRANT that raised an incoming message's limit, and the first
//     DATA (not a retransmission) at or beyond the old limit;
//   - the only unanswered RESEND for an RPC, and the BUSY or
//     retransmitted DATA that answers it.
//
// A retransmission makes a pending GRANT sample ambiguous (the granted
// bytes may have been lost and sent again), so it cancels it.

// probe is a round trip being timed: started at at; for a GRANT, off is
// the first newly granted byte.
type probe struct {
	at  time.Duration
	off uint32
	on  bool
}

// sample adds a round trip of p's and stretches p's timers to it.
func (c *Core) sample(p *peer, d time.Duration) {
	p.rtt.Sample(d)
	c.stats.RTTSamples++
	c.adapt(p)
}

// adapt sets p's timing: the configured one, with every wait for an
// answer raised to the peer's RTT timeout (in ticks, rounded up, plus
// one for the timer's phase).
func (c *Core) adapt(p *peer) {
	ticks := 0
	if to := p.rtt.Timeout(); to > 0 {
		ticks = int((to+c.cfg.Tick-1)/c.cfg.Tick) + 1
	}
	p.resend = c.cfg.Resend.Stretch(ticks)
	p.respResend = p.resend.Apply(&p.backoff)
	p.ack = c.cfg.Ack.Stretch(ticks, p.resend.TimeoutTicks())
	p.grantTimeout = uint64(max(c.cfg.Limits.GrantTimeoutTicks, p.resend.ResendTicks+p.resend.ResendInterval))
}

// granted notes that a GRANT raised r's incoming limit from old: the
// first byte beyond old to arrive times the round trip, unless a sample
// is pending already. If every byte granted before was here, the sender
// owes bytes from now on: its silence and its grant are timed from now.
func (c *Core) granted(r *rpc, old uint32) {
	if !r.grantProbe.on {
		r.grantProbe = probe{at: c.now, off: old, on: true}
	}
	if old <= r.in.received {
		r.owedSince = c.tick
		r.rs.Start(c.tick)
		c.armRPC(r, c.at(r.rs.Due(&r.peer.resend)))
	}
}

// arrived: DATA at off arrived for r (retransmit: answering a RESEND).
func (c *Core) arrived(r *rpc, off uint32, retransmit bool) {
	switch {
	case retransmit:
		r.grantProbe.on = false
		c.recovered(r)
		c.answered(r)
	case r.grantProbe.on && off >= r.grantProbe.off:
		r.grantProbe.on = false
		c.sample(r.peer, c.now-r.grantProbe.at)
	}
	if !retransmit {
		c.firstCopy(r)
	}
}

// asked notes that a RESEND went out for r: the round trip is timed if
// it is the only one unanswered.
func (r *rpc) asked(now time.Duration, unanswered int) {
	r.resendProbe = probe{at: now, on: unanswered == 1}
}

// answered: the peer answered a RESEND for r (BUSY, or retransmitted
// DATA). A BUSY for a response shows the RESEND was not needed.
func (c *Core) answered(r *rpc) {
	c.unneeded(r)
	if r.resendProbe.on {
		r.resendProbe.on = false
		c.sample(r.peer, c.now-r.resendProbe.at)
	}
}
