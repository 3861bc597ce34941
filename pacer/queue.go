package pacer

// initialCap is how many messages the tables hold before they first grow.
const initialCap = 64

// entry is one ready message.
type entry struct {
	id        ID
	remaining uint32   // bytes left to send in the message: the SRPT key
	seq       uint64   // age: smaller is older
	pos       [2]int32 // index in the srpt and age heaps
}

// queue holds the ready messages: a slab of entries, an index from ID to
// entry, and two heaps over the entries, by bytes left and by age.
// Entries are recycled through free, so the slices only grow.
type queue struct {
	entries []entry
	free    []int32 // unused entries
	index   index
	srpt    heap // by (remaining, seq, id)
	age     heap // by (seq, id)
	bytes   uint64
}

// init makes the tables with room for initialCap messages.
func (q *queue) init() {
	q.entries = make([]entry, 0, initialCap)
	q.free = make([]int32, 0, initialCap)
	q.index.init(2 * initialCap)
	q.srpt = heap{ord: bySRPT, s: make([]int32, 0, initialCap)}
	q.age = heap{ord: byAge, s: make([]int32, 0, initialCap)}
}

// Ready queues message id, which has bytes it may send now: remaining is
// the number of bytes left to send in the whole message (the SRPT key)
// and seq its age (smaller is older; the engine might use a counter of
// messages created). For a message already queued, Ready sets both.
func (p *Pacer) Ready(id ID, remaining uint32, seq uint64) {
	if _, e := p.index.find(id, p.entries); e >= 0 {
		x := &p.entries[e]
		p.bytes = p.bytes - uint64(x.remaining) + uint64(remaining)
		x.remaining, x.seq = remaining, seq
		p.srpt.fix(p.entries, e)
		p.age.fix(p.entries, e)
		return
	}
	var e int32
	if n := len(p.free); n > 0 {
		e = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		e = int32(len(p.entries))
		p.entries = append(p.entries, entry{})
	}
	p.entries[e] = entry{id: id, remaining: remaining, seq: seq}
	p.index.insert(id, e, p.entries)
	p.srpt.push(p.entries, e)
	p.age.push(p.entries, e)
	p.bytes += uint64(remaining)
}

// Update sets the bytes left to send in message id, if it is queued; it
// does nothing otherwise.
func (p *Pacer) Update(id ID, remaining uint32) {
	if _, e := p.index.find(id, p.entries); e >= 0 {
		x := &p.entries[e]
		p.bytes = p.bytes - uint64(x.remaining) + uint64(remaining)
		x.remaining = remaining
		p.srpt.fix(p.entries, e)
	}
}

// Idle takes message id out of the queue: it has nothing it may send now
// (it waits for grants, or is done). It does nothing if id is not queued.
func (p *Pacer) Idle(id ID) {
	at, e := p.index.find(id, p.entries)
	if e < 0 {
		return
	}
	p.srpt.remove(p.entries, e)
	p.age.remove(p.entries, e)
	p.index.remove(at, p.entries)
	p.bytes -= uint64(p.entries[e].remaining)
	p.entries[e] = entry{}
	p.free = append(p.free, e)
}

// Next names the message whose next packet should go now, or says
// ok=false when no message is ready. It does not take the message out of
// the queue: after sending, the engine reports the packet with Sent and
// the message's new state with Update or Idle.
//
// Next names the message with the fewest bytes left (ties: the older,
// then the smaller ID), except for the FIFO share. When the oldest ready
// message is not that one, the pick is contested; let C be the bytes of
// the packets sent for contested picks so far, F those of them that went
// to the oldest message, and max the largest of those packets. Next names
// the oldest message when it is owed more than a packet:
// 1000*(F+max) < FIFOPerMille*C (always if FIFOPerMille is 1000). So the
// shortest message goes first until the oldest has more than a packet's
// worth due (about 1000/FIFOPerMille packets into a contest), and F stays
// within about a packet of its share, never more than FIFOPerMille*C/1000 +
// (1-FIFOPerMille/1000)*max nor less than FIFOPerMille*C/1000 -
// (1+FIFOPerMille/1000)*max. Picks that are not contested do not count,
// so a message that sent alone does not owe anything later.
//
// The bytes of a pick are those of the first Sent after it: the engine
// must not call Sent for another packet between Next and the Sent of the
// packet it sends for the pick. A Next not followed by Sent (Admit said
// wait) counts nothing.
func (p *Pacer) Next() (id ID, ok bool) {
	if len(p.srpt.s) == 0 {
		p.share.pending = pickNone
		if p.shared != nil {
			p.refusedSince = -1
			if p.waitBest != NotWaiting {
				p.wait(NotWaiting) // nothing to send: others need not give way
			}
			p.giveBack()
		}
		return 0, false
	}
	p.stats.Picks++
	head, old := p.srpt.s[0], p.age.s[0]
	switch {
	case head == old:
		p.share.pending = pickUncontested
	case p.fifo > 0 && (p.share.credit > 1000*p.share.max || p.fifo >= 1000):
		p.share.pending = pickFIFO
		p.stats.FIFOPicks++
		return p.entries[old].id, true
	default:
		p.share.pending = pickSRPT
	}
	return p.entries[head].id, true
}

// pick is what the last Next chose, and why.
type pick uint8

const (
	pickNone        pick = iota // no pick since the last Sent
	pickUncontested             // the oldest message has the fewest bytes left
	pickSRPT                    // contested, went to the fewest bytes left
	pickFIFO                    // contested, went to the oldest message
)

// fifoShare is the FIFO share's account, in Next's terms.
type fifoShare struct {
	credit  int64 // FIFOPerMille*C - 1000*F: bytes owed to the oldest, times 1000
	max     int64 // the largest packet of a contested pick
	pending pick  // the last Next's pick, until the next Sent
}

// sent charges n bytes to the pending pick.
func (s *fifoShare) sent(n, perMille int64) {
	switch s.pending {
	case pickSRPT:
		s.credit += perMille * n
	case pickFIFO:
		s.credit -= (1000 - perMille) * n
	}
	if s.pending == pickSRPT || s.pending == pickFIFO {
		s.max = max(s.max, n)
	}
	s.pending = pickNone
}
