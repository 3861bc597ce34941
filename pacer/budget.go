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
//
// Slices. The account is one word that every sharer writes, and the
// waiting sharers are one word each that every admission reads: per
// packet, at many cores and line rate, the transfers of those cache
// lines between cores would cost more than the packets. So a Pacer
// takes transmit time in slices (Config.LinkSlice, a few microseconds
// of the link at once, or what its best message needs if that is
// less, and at least the packet), spends a slice packet by packet on
// its own account, and touches the shared words only to take the next:
// once a slice, not once a packet. A slice is placed on the link's account as a
// whole when it is taken, so the bound on what waits below holds as
// before. What it costs: a sharer holding a slice sends its rest though
// another sharer's shorter message began to wait meanwhile (at most a
// slice's time); a slice is taken only when a whole one fits below
// MaxQueue; and time taken and not spent is lost to the others for a
// while. A Pacer whose queue runs dry gives back what it holds of its
// slice if nobody took time after it (Return), and a slice not spent by
// the time the link would have drained it lapses.
type Link interface {
	// Busy returns when the transmit time handed down so far drains.
	Busy() int64
	// Add hands down tx nanoseconds of transmit time at now: the link
	// drains it after what it holds, or from now if it is idle by then.
	// It returns when the link drains what it holds with tx.
	Add(now, tx int64) int64
	// Wait records that this sharer waits for room to send a message
	// with best bytes left, or, with NotWaiting, that it does not wait.
	Wait(best uint32)
	// Beaten reports whether another sharer waits with a message that
	// goes before one with best bytes left from this sharer.
	Beaten(best uint32) bool
	// Return takes back tx of the transmit time added last, if nothing
	// was added after it: the link then drained what it held at end.
	Return(end, tx int64)
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
	tx := p.txTime(int64(max(n, 0)))
	if p.shared != nil {
		if p.inSlice(tx, now) {
			return true, 0
		}
		return p.admitShared(tx, now)
	}
	out := p.outstanding(now)
	if out == 0 || out+tx <= p.maxQueue {
		return true, 0
	}
	p.stats.Throttled++
	return false, time.Duration(out - max(p.maxQueue-tx, 0))
}

// inSlice reports whether the slice taken last has tx left, and the link
// has not drained it yet (see Slices in Link).
func (p *Pacer) inSlice(tx, now int64) bool {
	return p.sliceLeft >= tx && now < p.sliceEnd
}

// admitShared is Admit on a shared link beyond the slice in hand: the
// link's bound, then SRPT between the sharers (see Link). A Pacer
// refused for MaxQueue without a break is owed a packet: it waits as if
// its message had no bytes left, ahead of every other sharer, for that
// packet alone. Admitted, it takes the next slice, which Sent spends.
func (p *Pacer) admitShared(tx, now int64) (ok bool, wait time.Duration) {
	out := p.outstanding(now)
	best := NotWaiting - 1
	if len(p.srpt.s) > 0 {
		best = min(p.entries[p.srpt.s[0]].remaining, NotWaiting-1)
	}
	// A whole slice or none, no more than the best message's bytes take
	// (the rest might lapse, and a short message would wait for room for
	// a long one's slice), and at least the packet.
	take := max(tx, min(p.slice, p.txTime(int64(best))))
	if p.refusedSince >= 0 && now-p.refusedSince >= p.maxQueue {
		// Owed a packet, not a slice: a whole slice would hold every
		// other sharer back until the link drained room for it.
		best, take = 0, tx
	}
	switch {
	case out > 0 && out+take > p.maxQueue:
		wait = time.Duration(out - max(p.maxQueue-take, 0))
	case p.shared.Beaten(best):
		wait = time.Duration(tx) // the winner goes meanwhile
	default:
		p.refusedSince = -1
		p.wait(NotWaiting)
		if p.slice > 0 {
			// What is left of the slice before, too short for the
			// packet, goes with the next rather than lapse.
			left := p.sliceLeft
			if now >= p.sliceEnd {
				left = 0
			}
			p.sliceEnd, p.sliceLeft = p.shared.Add(now, take-left), take
			p.stats.Slices++
		}
		return true, 0
	}
	if p.refusedSince < 0 {
		p.refusedSince = now
	}
	p.wait(best)
	p.stats.Throttled++
	return false, wait
}

// giveBack returns what this Pacer holds of its slice to the shared
// link, its queue having run dry.
func (p *Pacer) giveBack() {
	if p.sliceLeft > 0 {
		p.shared.Return(p.sliceEnd, p.sliceLeft)
		p.sliceLeft = 0
		p.stats.Returns++
	}
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
		if tx := p.txTime(b); p.inSlice(tx, now) {
			p.sliceLeft -= tx
		} else {
			p.shared.Add(now, tx)
			p.stats.LinkAdds++
		}
		return
	}
	if p.link.busy < now {
		p.link.busy, p.link.frac = now, 0 // the link went idle
	}
	units := b*bitsPerByteNs + p.link.frac
	p.link.busy += units / p.rate
	p.link.frac = units % p.rate
}
