package resend

import "time"

// MaxRTT bounds an RTT sample and the timeout an RTT yields, so that a
// peer (or someone forging its address) that answers slowly on purpose
// stretches that peer's timers by a bounded amount. Paths slower than
// this are outside what Homa is built for: their RPCs still complete,
// with spurious RESENDs.
const MaxRTT = 250 * time.Millisecond

// RTT estimates how long a peer takes to answer, from measured round
// trips, as TCP estimates its retransmission timeout (RFC 6298): a
// smoothed mean (gain 1/8) and mean deviation (gain 1/4) of the samples;
// the timeout is the mean plus four deviations, and at least a quarter
// more than the mean, so that a steady path is not asked again the
// instant its answer is due. The zero value has no
// samples and a zero Timeout. Like the Tracker it reads no clock and
// does not allocate.
type RTT struct {
	srtt, rttvar time.Duration
	sampled      bool
}

// Sample adds one measured round trip, clamped to [0, MaxRTT].
func (e *RTT) Sample(d time.Duration) {
	d = min(max(d, 0), MaxRTT)
	if !e.sampled {
		e.srtt, e.rttvar, e.sampled = d, d/2, true
		return
	}
	dev := e.srtt - d
	if dev < 0 {
		dev = -dev
	}
	e.rttvar += (dev - e.rttvar) / 4
	e.srtt += (d - e.srtt) / 8
}

// Smoothed is the smoothed round trip (zero before any sample).
func (e *RTT) Smoothed() time.Duration { return e.srtt }

// Timeout is how long an answer may take before it is overdue: the
// smoothed round trip plus four mean deviations (at least a quarter of
// it), at most MaxRTT; zero before any sample.
func (e *RTT) Timeout() time.Duration { return min(e.srtt+max(4*e.rttvar, e.srtt/4), MaxRTT) }

// Stretch returns c (defaults resolved) with ResendTicks and
// ResendInterval raised to at least ticks, so that a peer whose answers
// take that long is not asked again before they can come. The configured
// values stay the floor; TimeoutResends is unchanged, so the time before
// a silent peer counts as dead grows with them.
func (c Config) Stretch(ticks int) Config {
	c = c.WithDefaults()
	c.ResendTicks = max(c.ResendTicks, ticks)
	c.ResendInterval = max(c.ResendInterval, ticks)
	return c
}
