package pacer

import "time"

// budget is the account of the transmit time handed below: at the link
// rate, everything given to Sent drains by busy + frac/rate nanoseconds.
type budget struct {
	busy int64 // ns, whole part
	frac int64 // the rest, in 1/rate ns: 0 <= frac < rate
}

// bitsPerByteNs converts bytes to transmit time: n bytes at r Mbit/s take
// n*8000/r ns.
const bitsPerByteNs = 8000

// outstanding returns the transmit time handed below and not drained at
// now, rounded up to a nanosecond.
func (p *Pacer) outstanding(now int64) int64 {
	d := p.link.busy - now
	if d < 0 {
		return 0
	}
	if p.link.frac > 0 {
		d++
	}
	return d
}

// Outstanding returns the transmit time handed below and not yet drained
// at now (ns), rounded up to a nanosecond; 0 when the rate is unlimited.
func (p *Pacer) Outstanding(now int64) time.Duration {
	if p.rate == 0 {
		return 0
	}
	return time.Duration(p.outstanding(now))
}

// Admit reports whether a packet of n wire bytes may be handed to the NIC
// at now (ns): yes when nothing is outstanding below, or when what is
// plus the packet's own transmit time stays within MaxQueue. So the
// outstanding time never exceeds MaxQueue, or one packet's transmit time
// for a packet longer than that. If not, wait is how long until Admit
// would say yes, if nothing else is sent meanwhile. With an unlimited
// rate Admit always says yes. Admit changes nothing but the Throttled
// count: call Sent for the packet once it is handed down.
func (p *Pacer) Admit(n int, now int64) (ok bool, wait time.Duration) {
	if p.rate == 0 {
		return true, 0
	}
	out := p.outstanding(now)
	if out == 0 {
		return true, 0
	}
	tx := (int64(max(n, 0))*bitsPerByteNs + p.rate - 1) / p.rate
	if out+tx <= p.maxQueue {
		return true, 0
	}
	p.stats.Throttled++
	return false, time.Duration(out - max(p.maxQueue-tx, 0))
}

// Sent accounts a packet of n bytes handed to the NIC at now (ns). Call
// it for every packet the endpoint sends: the one chosen by the last Next
// (whose bytes count towards the FIFO share), control packets, and any
// other packet sent directly, bypassing the queue, so that the budget
// sees all output. Packets sent without Admit may take the outstanding
// time above MaxQueue.
func (p *Pacer) Sent(n int, now int64) {
	b := int64(max(n, 0))
	p.stats.Sends++
	p.stats.SentBytes += uint64(b)
	p.share.sent(b, p.fifo)
	if p.rate == 0 {
		return
	}
	if p.link.busy < now {
		p.link.busy, p.link.frac = now, 0 // the link went idle
	}
	units := b*bitsPerByteNs + p.link.frac
	p.link.busy += units / p.rate
	p.link.frac = units % p.rate
}
