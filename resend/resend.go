// Package resend decides when the receiver of a Homa message asks for
// missing data again, and when it gives up on a silent peer.
//
// Homa has no sender-side retransmission timer: the side that is owed
// data (the client for a response, the server for a granted part of a
// request) notices a lack of progress and sends a RESEND naming the first
// range it is missing. The policy, in timer ticks (1 ms by default):
//
//   - No RESEND until ResendTicks ticks have passed without new bytes
//     (Progress) since the RPC began waiting (Start).
//   - After that, one RESEND at most every ResendInterval ticks.
//   - A packet that shows the peer working on the RPC (Alive: DATA, even
//     a duplicate, GRANT or BUSY) restarts the clock, as Linux Homa's
//     silent_ticks: a peer that answers BUSY is asked again only
//     ResendTicks later, and a sender busy retransmitting other ranges is
//     not asked for more meanwhile.
//   - Any other packet about the RPC (Heard) proves the peer is alive: it
//     clears the count of unanswered RESENDs, but not the clock.
//   - When TimeoutResends RESENDs have gone unanswered and another one is
//     due, the Tracker reports Timeout instead: the peer is considered
//     dead.
//
// A Backoff, one per peer, stretches that timing toward a peer that is
// alive but slow to answer (a server behind a long queue of requests, or
// whose application takes longer than the resend delay): RESENDs that
// prove unneeded double the delay and interval until the delay covers
// the peer's answers, within bounds; a prompt answer restores the
// configured timing.
//
// A Tracker holds a few integers, needs no locking of its own (the engine
// calls it under the lock of the RPC it belongs to), never reads the
// clock and never allocates. Missing computes the byte range a RESEND
// should ask for.
package resend

import "strconv"

// Defaults for Config. The RESEND timing is the Linux module's. The
// timeout follows what the module does on the wire rather than its
// timeout_resends parameter: in the captures of a silent peer (03 and 11
// in shared/interop) it sends 19 RESENDs before giving up, about 120 ms.
// Five RESENDs at 1 ms ticks would declare a peer dead after 30 ms of
// silence, which a loaded host's scheduler can cause on its own.
const (
	DefaultResendTicks    = 5
	DefaultResendInterval = 5
	DefaultTimeoutResends = 20
)

// Config holds the loss-recovery timing, in ticks. A zero (or negative)
// field means its default.
type Config struct {
	// ResendTicks is how long a message may make no progress before the
	// first RESEND. Default 5.
	ResendTicks int
	// ResendInterval is the least spacing between two RESENDs for the
	// same RPC. Default 5.
	ResendInterval int
	// TimeoutResends is how many RESENDs may go unanswered before the
	// peer is declared dead. Default 20.
	TimeoutResends int
}

// WithDefaults returns c with every unset field replaced by its default.
func (c Config) WithDefaults() Config {
	if c.ResendTicks <= 0 {
		c.ResendTicks = DefaultResendTicks
	}
	if c.ResendInterval <= 0 {
		c.ResendInterval = DefaultResendInterval
	}
	if c.TimeoutResends <= 0 {
		c.TimeoutResends = DefaultTimeoutResends
	}
	return c
}

// TimeoutTicks is the longest a Tracker ticked every tick takes to report
// Timeout after the last Start, Progress or Heard, when the peer then
// stays silent: max(ResendTicks, ResendInterval) + TimeoutResends *
// ResendInterval, which is ResendTicks + TimeoutResends * ResendInterval
// (105 ticks with the defaults) whenever ResendInterval <= ResendTicks.
// The max covers a RESEND sent just before the last Progress or Heard:
// the next one still waits a full interval.
//
// A server that forgets an unacknowledged RPC after some silence must
// wait longer than this (see package ack).
func (c Config) TimeoutTicks() int {
	c = c.WithDefaults()
	return max(c.ResendTicks, c.ResendInterval) + c.TimeoutResends*c.ResendInterval
}

// Action is what a Tracker asks the engine to do at a tick.
type Action uint8

// Actions returned by Tracker.Tick.
const (
	// None: nothing to do at this tick.
	None Action = iota
	// Resend: send a RESEND to the peer for the first missing range.
	Resend
	// Timeout: the peer has not answered TimeoutResends RESENDs; treat it
	// as dead.
	Timeout
)

var actionNames = [...]string{None: "None", Resend: "Resend", Timeout: "Timeout"}

// String returns the action's name.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Tracker is the loss-detection state of one RPC on the side that is owed
// data. Its zero value is a Tracker started at tick 0; call Start when
// the RPC begins waiting.
type Tracker struct {
	progress   uint64 // tick of the last Start or Progress
	lastResend uint64 // tick of the last Resend, valid when resent
	resent     bool   // a Resend was issued since Start
	unanswered int    // Resends since the last Start, Progress or Heard
}

// Start marks the RPC as waiting for data from now on: a new RPC, or one
// that starts being owed data again. It forgets every earlier RESEND.
// Call it on the transition only, not on every tick: each call restarts
// the wait for the first RESEND.
func (t *Tracker) Start(now uint64) {
	*t = Tracker{progress: now}
}

// Progress records that new bytes of the message arrived at now: it
// restarts the no-progress clock and clears the unanswered count.
func (t *Tracker) Progress(now uint64) {
	t.progress = now
	t.unanswered = 0
}

// Alive records that a packet showing the peer at work on the RPC (DATA,
// even a duplicate, GRANT or BUSY) arrived at now: like Progress, it
// restarts the clock and clears the unanswered count.
func (t *Tracker) Alive(now uint64) { t.Progress(now) }

// Heard records that some other packet about the RPC came from the peer
// (RESEND, NEED_ACK, RPC_UNKNOWN): the peer is alive, so the
// unanswered count is cleared, but the no-progress clock keeps running.
// now is taken for symmetry with Progress; the policy does not need it.
func (t *Tracker) Heard(now uint64) {
	t.unanswered = 0
}

// Unanswered is the number of RESENDs issued since the last Start,
// Progress or Heard.
func (t *Tracker) Unanswered() int { return t.unanswered }

// Due is the first tick at which Tick may return something other than
// None, given no further Start or Progress: an engine that keeps RPCs in a
// timer wheel may skip the Tracker until then. A nil cfg means defaults.
func (t *Tracker) Due(cfg *Config) uint64 {
	c := resolve(cfg)
	return t.due(&c)
}

// due is Due for a resolved configuration.
func (t *Tracker) due(c *Config) uint64 {
	due := t.progress + uint64(c.ResendTicks)
	if t.resent {
		due = max(due, t.lastResend+uint64(c.ResendInterval))
	}
	return due
}

// Tick decides what to do at tick now. Call it at every tick while the
// RPC is owed data (and not while it is not, such as while a client still
// has granted request bytes to send). It returns Resend when a RESEND is
// due, Timeout when one is due but TimeoutResends have already gone
// unanswered, and None otherwise. Once Timeout is returned, later Ticks
// return Timeout too until Start, Progress or Heard. A nil cfg means
// defaults. Tick does not allocate.
func (t *Tracker) Tick(now uint64, cfg *Config) Action {
	c := resolve(cfg)
	if now < t.due(&c) {
		return None
	}
	if t.unanswered >= c.TimeoutResends {
		return Timeout
	}
	t.unanswered++
	t.resent = true
	t.lastResend = now
	return Resend
}

// resolve returns the configuration in effect for cfg (nil: defaults).
func resolve(cfg *Config) Config {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	return c.WithDefaults()
}
