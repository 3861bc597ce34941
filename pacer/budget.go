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
// Sharing is fair, not SRPT across the sharers: while another sharer
// waits for room below, a Pacer admits a packet only while the transmit
// time of its own packets below stays within its share of MaxQueue
// (MaxQueue over Sharers), so that every sharer with packets to send
// gets about as much of the link as the others, whoever's timer or
// packets come first. Each orders its own messages SRPT.
type Link interface {
	// Busy returns when the transmit time handed down so far drains.
	Busy() int64
	// Add hands down tx nanoseconds of transmit time at now: the link
	// drains it after what it holds, or from now if it is idle by then.
	// It returns when the link will have drained it.
	Add(now, tx int64) int64
	// Wait records whether this sharer waits for room; Contended
	// reports whether another sharer does; Sharers is how many Pacers
	// share the link.
	Wait(waiting bool)
	Contended() bool
	Sharers() int
}

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
	tx := (int64(max(n, 0))*bitsPerByteNs + p.rate - 1) / p.rate
	if p.shared != nil {
		return p.admitShared(out, tx, now)
	}
	if out == 0 || out+tx <= p.maxQueue {
		return true, 0
	}
	p.stats.Throttled++
	return false, time.Duration(out - max(p.maxQueue-tx, 0))
}

// admitShared is Admit on a shared link: the link's bound, then, while
// another sharer waits, this Pacer's share of it (see Link).
func (p *Pacer) admitShared(out, tx, now int64) (ok bool, wait time.Duration) {
	if out > 0 && out+tx > p.maxQueue {
		p.wait(true)
		p.stats.Throttled++
		return false, time.Duration(out - max(p.maxQueue-tx, 0))
	}
	if p.shared.Contended() {
		share := p.maxQueue / int64(max(p.shared.Sharers(), 1))
		if own := p.mine.below(now); own > 0 && own+tx > share {
			p.wait(true)
			p.stats.Throttled++
			return false, time.Duration(max(p.mine.drainedBy(own+tx-share)-now, 0))
		}
	}
	p.wait(false)
	return true, 0
}

// wait tells the shared link whether this Pacer waits for room, when
// that changes.
func (p *Pacer) wait(waiting bool) {
	if p.waiting != waiting {
		p.waiting = waiting
		p.shared.Wait(waiting)
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
		tx := (b*bitsPerByteNs + p.rate - 1) / p.rate
		p.mine.add(p.shared.Add(now, tx), tx)
		return
	}
	if p.link.busy < now {
		p.link.busy, p.link.frac = now, 0 // the link went idle
	}
	units := b*bitsPerByteNs + p.link.frac
	p.link.busy += units / p.rate
	p.link.frac = units % p.rate
}

// spans are the packets a Pacer handed down to a shared link and that
// have not drained: when each drains (ascending) and its transmit time.
// Its packets drain among the other sharers', so what it has below is
// the sum of their transmit times, not the time until its last drains.
type spans struct {
	end, tx []int64
	head    int
	sum     int64 // transmit time of the spans from head on
}

// add records a packet of transmit time tx that drains at end.
func (s *spans) add(end, tx int64) {
	if s.head > 0 && s.head == len(s.end) {
		s.end, s.tx, s.head = s.end[:0], s.tx[:0], 0
	}
	s.end, s.tx = append(s.end, end), append(s.tx, tx)
	s.sum += tx
}

// below drops the packets drained at now and returns the transmit time
// of the others.
func (s *spans) below(now int64) int64 {
	for s.head < len(s.end) && s.end[s.head] <= now {
		s.sum -= s.tx[s.head]
		s.head++
	}
	if s.head > 64 && 2*s.head > len(s.end) {
		n := copy(s.end, s.end[s.head:])
		copy(s.tx, s.tx[s.head:])
		s.end, s.tx, s.head = s.end[:n], s.tx[:n], 0
	}
	return s.sum
}

// drainedBy returns when d of the transmit time below (d <= sum) will
// have drained: when the packet that takes the sum below sum-d does.
func (s *spans) drainedBy(d int64) int64 {
	var done int64
	for i := s.head; i < len(s.end); i++ {
		if done += s.tx[i]; done >= d {
			return s.end[i]
		}
	}
	return s.end[len(s.end)-1]
}
