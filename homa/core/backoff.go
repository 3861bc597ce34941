package core

import "github.com/homa-go/homa/resend"

// RESEND backoff toward slow servers. A client whose server is alive but
// behind (a long queue of requests in its socket, or an application
// slower than the resend delay) would ask for every response again at
// each resend interval: RESENDs the server reads only after the requests
// they ask about, by when it has replied, so that it sends each response
// again and the copy arrives after the original. So each peer has a
// resend.Backoff for the client RPCs awaiting a response of which
// nothing has arrived yet: a RESEND for one that proves unneeded (the
// server answers BUSY, or the response arrives in its first
// transmission) doubles the RESEND delay and interval toward that peer
// until the delay covers how long that RPC had waited since it started
// (bounded: see resend.MaxBackoffTicks). A response arriving within the
// peer's plain delay of its RPC's start restores the plain timing. The
// backed-off timing applies only while the peer is at work: it sent new
// bytes (of any RPC) or BUSY within resend.BackoffLapse; a server that
// falls silent (dead, or cut off) is then asked, and declared dead, on
// the plain timing, as if it had never been slow. The server still
// answers every RESEND it gets; there are fewer of them. A server's loss
// detection for requests keeps the plain timing: its RESENDs are
// answered by clients, which have no queue of work in front of them.

// ask records that r's last RESEND, sent before any byte of its
// response had arrived, is not answered yet. Only those RESENDs can
// prove unneeded: once a response is arriving its server is at it, and
// the first transmission of bytes asked for may be the answer to the
// RESEND (a RESEND for a finite range grants up to its end, which
// recovers a lost GRANT).
//
// An RPC also keeps a backoff of its own. The peer's comes back to the
// plain timing as soon as one response comes promptly, which is right
// for the next RPCs, but not for one whose server has said BUSY about it
// and is known to hold it: a long poll, held by the server until it has
// something to say, among quick RPCs to the same server (a gRPC
// stream's pull beside its data frames) would otherwise be asked about
// every resend interval while it is held, each RESEND answered BUSY
// (1,134 of each for 30,000 stream messages). So each unneeded RESEND
// also backs off the RPC's own timing, which applies, while the peer is
// at work, when it is slower than the peer's: a request held for a
// second among quick RPCs was asked about 125 times, and is now 8
// (TestHeldRequestBacksOff). That also spares the quick RPCs: each BUSY
// backs the peer's timing off until the next prompt response, and a
// response of theirs lost meanwhile was asked for after 256 ms rather
// than 5.
type ask struct {
	on      bool
	backoff resend.Backoff
	cfg     resend.Config // the peer's plain timing, backed off by backoff
}

// resendConfig is the loss-recovery timing of r: backed off toward a
// slow server that is at work, for a client's response of which nothing
// has arrived (a response arriving is being sent: bytes missing from it
// are lost).
func (c *Core) resendConfig(r *rpc) *resend.Config {
	p := r.peer
	if r.isClient() && !r.inInit && c.tick <= p.working+resend.BackoffLapse {
		if r.ask.backoff.Level() > p.backoff.Level() {
			return &r.ask.cfg
		}
		return &p.respResend
	}
	return &p.resend
}

// atWork notes that p sent new bytes or BUSY.
func (c *Core) atWork(p *peer) { p.working = c.tick }

// noteAsk records the RESEND just queued for r.
func (r *rpc) noteAsk() { r.ask.on = r.isClient() && !r.inInit }

// askedBack: r's server asked for r's request, which it lacks: r's
// RESEND was needed, and the response that follows answers it.
func (r *rpc) askedBack() { r.ask.on = false }

// unneeded: the peer answered r's RESEND BUSY.
func (c *Core) unneeded(r *rpc) {
	c.atWork(r.peer)
	if r.ask.on {
		r.ask.on = false
		c.slowPeer(r)
	}
}

// firstCopy: bytes of r's incoming message arrived in their first
// transmission. If r's RESEND asked for them, it was not needed; if
// they came within the peer's plain delay of a client RPC's start with
// no RESEND, the peer answers promptly.
func (c *Core) firstCopy(r *rpc) {
	c.atWork(r.peer)
	switch {
	case !r.isClient():
	case r.ask.on:
		r.ask.on = false
		c.slowPeer(r)
	case r.peer.backoff.Level() > 0 && c.now-r.start <= c.at(uint64(r.peer.resend.ResendTicks)):
		c.plainTiming(r.peer)
	}
}

// recovered: a retransmission brought new bytes of r's incoming
// message, which answers its RESEND. It leaves the peer's timing alone:
// the original may only be late (a server's writers can put a
// retransmission on the wire before the packet it copies), and a server
// that answers fast again shows it with prompt responses.
func (c *Core) recovered(r *rpc) {
	c.atWork(r.peer)
	r.ask.on = false
}

// slowPeer backs the response timing of r's peer, and r's own, off
// after an unneeded RESEND for r.
func (c *Core) slowPeer(r *rpc) {
	c.stats.ResendsUnneeded++
	p := r.peer
	waited := uint64(max(c.now-r.start, 0) / c.cfg.Tick)
	if p.backoff.Spurious(waited, &p.resend) {
		p.respResend = p.resend.Apply(&p.backoff)
	}
	if r.ask.backoff.Spurious(waited, &p.resend) {
		r.ask.cfg = p.resend.Apply(&r.ask.backoff)
	}
}

// plainTiming restores p's response timing.
func (c *Core) plainTiming(p *peer) {
	if p.backoff.Reset() {
		p.respResend = p.resend
	}
}
