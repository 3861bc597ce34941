// Package ack holds the server's side of Homa's at-most-once guarantee:
// how long an answered RPC is kept, when to ask the client for its
// acknowledgment, and which request ids must never start an RPC again.
//
// Once a request has been handed to the application, the server must keep
// the RPC until the client has the response, or else a RESEND or a late
// copy of the request could run the handler a second time. So:
//
//   - Pending: after the last byte of the response has been sent, the
//     server waits RequestAckTicks for a (piggybacked or explicit) ACK,
//     then sends NEED_ACK every NeedAckInterval ticks until one comes.
//     If the client says nothing at all about the RPC for ReclaimTicks,
//     the server assumes it crashed or gave up and reclaims the RPC.
//   - Seen: when the server forgets an RPC (acknowledged or reclaimed) it
//     records the id, per client port, so that a long-delayed duplicate of
//     the request is recognised and dropped instead of starting the RPC
//     anew (the draft's "additional state to detect long-delayed
//     packets").
//
// Times are timer ticks passed in by the caller (1 ms by default). Nothing
// here reads the clock, starts goroutines, locks, or allocates after
// construction; the engine calls these types under its own lock.
package ack

import "strconv"

// Defaults for Config.
const (
	DefaultRequestAckTicks = 2    // Linux's request_ack_ticks
	DefaultNeedAckInterval = 1    // Linux repeats NEED_ACK every tick
	DefaultReclaimTicks    = 2000 // 2 s at 1 ms ticks; see ReclaimAtLeast
)

// Config holds the acknowledgment timing, in ticks. A zero (or negative)
// field means its default.
type Config struct {
	// RequestAckTicks is how long after the response is fully sent the
	// server waits before the first NEED_ACK. Default 2.
	RequestAckTicks int
	// NeedAckInterval is how often NEED_ACK is then repeated until the
	// RPC is acknowledged. Default 1 (every tick, as Linux does).
	NeedAckInterval int
	// ReclaimTicks is how long the client may say nothing about the RPC
	// before the server forgets it. It must be at least
	// ReclaimAtLeast(the client's resend.Config.TimeoutTicks()). Default
	// 2000, far above the 62 that the default resend timing requires.
	ReclaimTicks int
}

// WithDefaults returns c with every unset field replaced by its default.
func (c Config) WithDefaults() Config {
	if c.RequestAckTicks <= 0 {
		c.RequestAckTicks = DefaultRequestAckTicks
	}
	if c.NeedAckInterval <= 0 {
		c.NeedAckInterval = DefaultNeedAckInterval
	}
	if c.ReclaimTicks <= 0 {
		c.ReclaimTicks = DefaultReclaimTicks
	}
	return c
}

// ReclaimAtLeast is the smallest ReclaimTicks that is safe against clients
// whose loss detection gives up after clientTimeoutTicks (the client's
// resend.Config.TimeoutTicks(), 30 with the defaults): 2*clientTimeoutTicks
// + 2.
//
// Why: a client still waiting for the response sends a RESEND at least
// once per resend period, which is shorter than its timeout, so if the
// network fails both ways the client's last packet to reach the server
// precedes the client's last news from the server by less than
// clientTimeoutTicks; the client then aborts at most clientTimeoutTicks
// later. Reclaiming only after twice that, plus one tick for the phase of
// each side's timer, means the client has aborted the RPC before the
// server forgets it, so no RESEND from it can find the server without
// state. Past this inequality, Seen is what keeps a reclaimed RPC from
// running again (the network may fail one way only, or hold packets for
// longer).
func ReclaimAtLeast(clientTimeoutTicks int) int {
	return 2*max(clientTimeoutTicks, 0) + 2
}

// Action is what a Pending asks the engine to do at a tick.
type Action uint8

// Actions returned by Pending.Tick.
const (
	// None: nothing to do at this tick.
	None Action = iota
	// NeedAck: send a NEED_ACK for the RPC to the client.
	NeedAck
	// Reclaim: the client has been silent for ReclaimTicks; forget the
	// RPC (and record its id in the client's Seen).
	Reclaim
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case None:
		return "None"
	case NeedAck:
		return "NeedAck"
	case Reclaim:
		return "Reclaim"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Pending is a server RPC whose response has been fully sent and which
// waits for its acknowledgment. Its zero value is a Pending started at
// tick 0; call Start when the last byte of the response goes out.
type Pending struct {
	sent     uint64 // tick of Start
	heard    uint64 // tick of the last Start or Heard
	lastNeed uint64 // tick of the last NeedAck, valid when asked
	asked    bool   // a NeedAck was issued since Start
}

// Start records that the response was fully sent at now. Calling it again
// (for instance after retransmitting response bytes the client asked for)
// restarts the NEED_ACK schedule and the reclaim clock.
func (p *Pending) Start(now uint64) {
	*p = Pending{sent: now, heard: now}
}

// Heard records that a packet about the RPC came from the client at now
// (a RESEND, or a request DATA): the client is alive, so reclaiming is
// postponed. The NEED_ACK schedule is unchanged.
func (p *Pending) Heard(now uint64) {
	p.heard = max(p.heard, now)
}

// ReclaimDue is the tick at which Tick returns Reclaim, given no further
// Start or Heard. A nil cfg means defaults.
func (p *Pending) ReclaimDue(cfg *Config) uint64 {
	c := cfg.orDefaults()
	return p.heard + uint64(c.ReclaimTicks)
}

// Due is the first tick at which Tick may return something other than
// None, given no further Start or Heard. A nil cfg means defaults.
func (p *Pending) Due(cfg *Config) uint64 {
	c := cfg.orDefaults()
	return min(p.needDue(&c), p.heard+uint64(c.ReclaimTicks))
}

// needDue is the first tick at which a NEED_ACK may go out.
func (p *Pending) needDue(c *Config) uint64 {
	due := p.sent + uint64(c.RequestAckTicks)
	if p.asked {
		due = max(due, p.lastNeed+uint64(c.NeedAckInterval))
	}
	return due
}

// Tick decides what to do at tick now: Reclaim once the client has been
// silent for ReclaimTicks since Start or the last Heard (this wins over a
// due NEED_ACK, and repeats until Start or Heard), NeedAck when
// RequestAckTicks have passed since Start and NeedAckInterval since the
// last NeedAck, None otherwise. A nil cfg means defaults. Tick does not
// allocate.
func (p *Pending) Tick(now uint64, cfg *Config) Action {
	c := cfg.orDefaults()
	switch {
	case now >= p.heard+uint64(c.ReclaimTicks):
		return Reclaim
	case now < p.needDue(&c):
		return None
	}
	p.asked = true
	p.lastNeed = now
	return NeedAck
}

// orDefaults is the configuration in effect when c is passed to Tick.
func (c *Config) orDefaults() Config {
	if c == nil {
		return Config{}.WithDefaults()
	}
	return c.WithDefaults()
}

// Stretch returns c (defaults resolved) for a client whose answers take
// up to ticks to come back and whose loss detection gives up after
// clientTimeoutTicks: the first NEED_ACK and its repeats wait at least
// ticks, and ReclaimTicks is at least ReclaimAtLeast(clientTimeoutTicks).
// The configured values stay the floor.
func (c Config) Stretch(ticks, clientTimeoutTicks int) Config {
	c = c.WithDefaults()
	c.RequestAckTicks = max(c.RequestAckTicks, ticks)
	c.NeedAckInterval = max(c.NeedAckInterval, ticks)
	c.ReclaimTicks = max(c.ReclaimTicks, ReclaimAtLeast(clientTimeoutTicks))
	return c
}
