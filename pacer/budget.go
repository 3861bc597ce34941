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

// A Link is one sharer's view of the account of the transmit time
// handed to a link that several Pacers share: the shards of one
// socket, sending through one NIC, each with a Pacer of its own
// (Config.Link). Times are nanoseconds from an origin the sharers agree
// on.
//
// The sharers keep SRPT between them: a Pacer that finds no room below
// says so with the bytes left of its best message (Wait), and while a
// sharer waits whose message beats that of another (fewer bytes left;
// on a tie, the lower-numbered sharer), the other admits nothing, so
// the shortest waiting message takes the next room, whoever's timer or
// packets come first. As the FIFO share does within one Pacer, a Pacer
// refused for MaxQueue without a break goes before every other sharer
// for one packet: a sharer whose messages are all long, or whose timer
// always comes second, is slowed, never starved.
type Link interface {
	// Busy returns when the transmit time handed down so far drains.
	Busy() int64
	// Add hands down tx nanoseconds of transmit time at now: the link
	// drains it after what it holds, or from now if it is idle by then.
	Add(now, tx int64)
	// Wait records that this sharer waits for room to send a message
	// with best bytes left, or, with NotWaiting, that it does not wait.
	Wait(best uint32)
	// Beaten reports whether another sharer waits with a message that
	// goes before one with best bytes left from this sharer.
	Beaten(best uint32) bool
}

// NotWaiting is what Link.Wait is told by a sharer that does not wait.
const NotWaiting = ^uint32(0)

// txTime is the transmit time of n bytes at the rate, rounded up to a
// nanosecond.
func (p *Pacer) txTime(n int64) int64 { return (n*bitsPerByteNs + p.rate - 1) / p.rate }

// outstanding returns the transmit time handed below and not drained at
// now, rounded up to a nanosecond: all the sharers' when the link is
// shared.
func (p *Pacer) outstanding(now int64) int64 {
	if p.shared != nil {
		return max(p.shared.Busy()-now, 0)
	}
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
	tx := p.txTime(int64(max(n, 0)))
	if p.shared != nil {
		return p.admitShared(out, tx, now)
	}
	if out == 0 || out+tx <= p.maxQueue {
		return true, 0
	}
	p.stats.Throttled++
	return false, time.Duration(out - max(p.maxQueue-tx, 0))
}

// admitShared is Admit on a shared link: the link's bound, then SRPT
// between the sharers (see Link). A Pacer refused for MaxQueue without
// a break is owed a packet: it waits as if its message had no bytes
// left, ahead of every other sharer.
func (p *Pacer) admitShared(out, tx, now int64) (ok bool, wait time.Duration) {
	best := NotWaiting - 1
	if len(p.srpt.s) > 0 {
		best = min(p.entries[p.srpt.s[0]].remaining, NotWaiting-1)
	}
	if p.refusedSince >= 0 && now-p.refusedSince >= p.maxQueue {
		best = 0
	}
	switch {
	case out > 0 && out+tx > p.maxQueue:
		wait = time.Duration(out - max(p.maxQueue-tx, 0))
	case p.shared.Beaten(best):
		wait = time.Duration(tx) // the winner goes meanwhile
	default:
		p.refusedSince = -1
		p.wait(NotWaiting)
		return true, 0
	}
	if p.refusedSince < 0 {
		p.refusedSince = now
	}
	p.wait(best)
	p.stats.Throttled++
	return false, wait
}

// wait tells the shared link what this Pacer waits for, when that
// changes.
func (p *Pacer) wait(best uint32) {
	if p.waitBest != best {
		p.waitBest = best
		p.shared.Wait(best)
	}
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
	if p.shared != nil {
		p.shared.Add(now, p.txTime(b))
		return
	}
	if p.link.busy < now {
		p.link.busy, p.link.frac = now, 0 // the link went idle
	}
	units := b*bitsPerByteNs + p.link.frac
	p.link.busy += units / p.rate
	p.link.frac = units % p.rate
}
