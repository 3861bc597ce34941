package resend

// Backoff stretches the RESEND timing toward one peer while its answers
// show that the RESENDs were not needed: the peer is alive, but slow to
// answer (a server whose queue of requests is long, or whose
// application takes longer than the resend delay). Such RESENDs waste
// the peer's time and bytes: they wait in its queue behind the requests
// they ask about, and a server that has replied by the time it reads
// one sends its response again, which arrives after the original.
//
// A RESEND proves unneeded (Spurious) when the peer answers it BUSY, or
// when the bytes it asked for arrive in their first transmission; the
// proof says how long the RPC has waited for its answer so far. The
// RESEND delay and interval toward the peer double until the delay
// covers that wait (up to MaxBackoff doublings and MaxBackoffTicks):
// the resend delay should be longer than the peer's service times, as
// the Homa draft says. A server that answers BUSY is thus asked again
// after twice the delay each time; one whose answers come after a long
// queue is asked only once they are overdue. Evidence that the peer
// answers fast again (Reset) brings the timing back to the configured
// one at once: loss recovery is not slowed toward a peer that answers
// promptly. An engine should use the backed-off timing only while the
// peer shows it is at work (it sent new bytes or BUSY within
// BackoffLapse): a peer that falls silent, dead or cut off, is then
// asked again, and declared dead, on the plain timing; TimeoutResends
// applies to either.
//
// Like the Tracker, a Backoff reads no clock and does not allocate; its
// zero value is the configured timing.
type Backoff struct {
	level int // doublings in effect, 0..MaxBackoff
}

// MaxBackoff bounds the doublings, MaxBackoffTicks the RESEND delay and
// MaxBackoffInterval the interval they make: with the default timing
// the first RESEND comes at most 256 ticks (256 ms at 1 ms ticks)
// after the request, and the next ones every 128 ticks at most. (With
// 1,024, 32 clients x 512 100-byte RPCs outstanding to one server on
// loopback ran at 70-73k RPCs/s with a p99 of 1.7-1.9 s: requests the
// server had dropped at its per-peer bounds waited for a RESEND that
// long; with 256, 83k RPCs/s and 0.40 s.) The interval
// is kept short because a client's silence after its server replied
// must stay under the server's patience (package ack's ReclaimTicks,
// 2000 ticks by default, after which a server forgets an unacknowledged
// RPC): a response lost whole is asked for within the delay, and a lost
// RESEND is followed by another within the interval, so that only seven
// RESENDs lost in a row after a response lost whole would outlast it.
// A timing configured (or stretched to a round trip) longer than these
// is not stretched further. The engine applies the backoff only while
// the peer is heard from (see BackoffLapse).
const (
	MaxBackoff         = 8
	MaxBackoffTicks    = 256
	MaxBackoffInterval = 128
)

// BackoffLapse is how long (in ticks) a peer may stay silent before the
// engine stops applying its backoff: long enough for the gaps between a
// slow server's answers to one client (a server working through a queue
// of requests from many clients answers each in bursts), short enough
// that a server that dies after it was slow is declared dead within
// about half a second more than one that was never slow.
const BackoffLapse = 2 * MaxBackoffTicks

// Level is the number of doublings in effect.
func (b *Backoff) Level() int { return b.level }

// Spurious records that a RESEND to the peer proved unneeded for an RPC
// that had waited waited ticks for its answer; cfg is the peer's timing
// before backoff. It doubles the timing until its delay is longer than
// waited, or reaches the bounds, and reports whether it changed.
func (b *Backoff) Spurious(waited uint64, cfg *Config) bool {
	old := b.level
	ticks := cfg.WithDefaults().ResendTicks
	for b.level < MaxBackoff && uint64(stretched(ticks, b.level, MaxBackoffTicks)) <= waited {
		b.level++
	}
	return b.level != old
}

// Reset returns to the configured timing, and reports whether that
// changed anything.
func (b *Backoff) Reset() bool {
	changed := b.level != 0
	*b = Backoff{}
	return changed
}

// Apply returns c (defaults resolved) with ResendTicks and
// ResendInterval doubled b's level times, at most MaxBackoffTicks and
// MaxBackoffInterval (or their own values, if more). TimeoutResends is unchanged, so a
// silent peer counts as dead after as many unanswered RESENDs, and
// proportionally later. A nil b is no backoff.
func (c Config) Apply(b *Backoff) Config {
	c = c.WithDefaults()
	if b == nil || b.level == 0 {
		return c
	}
	c.ResendTicks = stretched(c.ResendTicks, b.level, MaxBackoffTicks)
	c.ResendInterval = stretched(c.ResendInterval, b.level, MaxBackoffInterval)
	return c
}

// stretched is ticks doubled level times, at most limit (or ticks, if
// more).
func stretched(ticks, level, limit int) int {
	if ticks >= limit {
		return ticks
	}
	return min(ticks<<level, limit)
}
