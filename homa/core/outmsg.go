package core

import "time"

// outMsg is an outgoing message: the bytes, what has been sent, and what
// the receiver allows to be sent.
type outMsg struct {
	data      []byte // the message, owned by the core
	hold      *Hold  // data's references, for messages sent without copying
	length    uint32
	unsched   uint32 // bytes sent without grants (the DATA "incoming" field)
	next      uint32 // every byte below has been sent once
	granted   uint32 // the sender may send bytes below this offset
	schedPrio uint8  // priority for granted bytes, from the last GRANT
	seg       uint32 // payload bytes per DATA packet to this peer
	first     uint32 // the end of a short first segment (0: none; see init)

	// Retransmission is rate limited: within one resend interval from
	// rexmitSince, each byte is retransmitted at most once, whatever the
	// number of RESENDs asking for it.
	rexmitSince time.Duration
	rexmitted   []span
	rexmitBuf   [4]span
	budgetSince time.Duration
	budgetLeft  uint32

	// pend are retransmissions waiting in the pacer's queue (pacing
	// only; see resendData): ranges of whole segments, oldest first.
	pend    []span
	pendBuf [4]span
}

// rexmitBudgetMin is the least retransmission budget of a message per
// window: small messages may be retransmitted at every RESEND.
const rexmitBudgetMin = 64 << 10

// ZeroCopyMin is the size from which DATA packets point into the
// message (Packet.Payload) instead of carrying a copy of their bytes:
// below it the copy costs less than keeping the message's references.
const ZeroCopyMin = 4096

// init starts sending data; hold keeps it alive for packets that point
// into it (nil: packets carry copies).
func (m *outMsg) init(data []byte, unsched int, seg int, hold *Hold) {
	m.data = data
	m.hold = hold
	m.length = uint32(len(data))
	m.unsched = min(uint32(unsched), m.length)
	m.next = 0
	m.granted = m.unsched
	m.schedPrio = 0
	m.seg = uint32(max(seg, 1))
	m.first = 0
	if m.length > m.unsched && m.seg > firstSegMax && m.unsched > firstSegMax {
		m.first = firstSegMax
	}
	m.rexmitted = m.rexmitBuf[:0]
	m.pend = m.pendBuf[:0]
	m.rexmitSince = -1 << 62
	m.budgetSince = -1 << 62
}

// Segments. A message goes out in segments of seg bytes, cut as Linux
// Homa cuts its messages: at multiples of seg below the unscheduled
// limit, a boundary at the limit (the last unscheduled segment may be
// short), and at the limit plus multiples of seg above it. Every
// transmission (the first, after a grant, or in answer to a RESEND) is of
// whole segments, as Linux's are: a Linux receiver discards a packet that
// overlaps bytes it already has, so a retransmission cut differently
// from the first transmission would never fill its gap. A grant that
// ends inside a segment lets the whole segment go.

//
// A message that needs grants, to a peer whose segments hold most of the
// unscheduled bytes (a 64 KB MTU, as on loopback), starts with a short
// segment of firstSegMax bytes: its receiver learns of the message, and
// grants, while the rest of the unscheduled bytes are still on their
// way, as it does on a 1,500-byte MTU, instead of one round trip after
// them all. The segments after it are cut at the first segment's end
// plus multiples of seg.

// firstSegMax is the length of a short first segment.
const firstSegMax = 4096

// segStart is the start of the segment holding off.
func (m *outMsg) segStart(off uint32) uint32 {
	switch {
	case off >= m.unsched:
		return off - (off-m.unsched)%m.seg
	case off < m.first:
		return 0
	}
	return off - (off-m.first)%m.seg
}

// segUp is off rounded up to a segment boundary (at most the length).
func (m *outMsg) segUp(off uint32) uint32 {
	base := uint64(0)
	switch {
	case off > m.unsched:
		base = uint64(m.unsched)
	case off > m.first:
		base = uint64(m.first)
	}
	up := base + (uint64(off)-base+uint64(m.seg)-1)/uint64(m.seg)*uint64(m.seg)
	if off <= m.unsched {
		up = min(up, uint64(m.unsched))
	}
	if off <= m.first {
		up = min(up, uint64(m.first))
	}
	return uint32(min(up, uint64(m.length)))
}

// sendable is how far the granted bytes let the message go: the end of
// the segment holding the last granted byte.
func (m *outMsg) sendable() uint32 { return m.segUp(m.granted) }

// done reports whether every byte has been sent at least once.
func (m *outMsg) done() bool { return m.next >= m.length }

// grant raises the granted offset (never above the length) and reports
// whether it moved.
func (m *outMsg) grant(offset uint32, prio uint8) bool {
	m.schedPrio = prio
	offset = min(offset, m.length)
	if offset <= m.granted {
		return false
	}
	m.granted = offset
	return true
}

// allowRexmit returns the first part of [from, to), widened to whole
// segments, that may be retransmitted now, and records it. Two rules bound what RESENDs make a
// sender transmit: within one resend interval each byte goes out at most
// once however many RESENDs ask for it (a burst of RESENDs yields one
// copy of what they ask for), and within one budget window at most one
// copy of the message (at least rexmitBudgetMin bytes) goes out in
// retransmissions.
func (m *outMsg) allowRexmit(from, to uint32, now, interval, window time.Duration) (uint32, uint32, bool) {
	from, to = m.segStart(from), m.segUp(to)
	if now-m.rexmitSince >= interval {
		m.rexmitSince = now
		m.rexmitted = m.rexmitted[:0]
	}
	if now-m.budgetSince >= window {
		m.budgetSince = now
		m.budgetLeft = max(m.length, rexmitBudgetMin)
	}
	for moved := true; moved; {
		moved = false
		for _, s := range m.rexmitted {
			if from >= s.Start && from < s.End {
				from, moved = s.End, true
			}
		}
	}
	for _, s := range m.rexmitted {
		if s.Start >= from && s.Start < to {
			to = s.Start
		}
	}
	if from < to && to-from > m.budgetLeft {
		to = m.segStart(from + m.budgetLeft) // whole segments only
	}
	if from >= to || len(m.rexmitted) == cap(m.rexmitted) {
		return 0, 0, false
	}
	m.rexmitted = append(m.rexmitted, span{Start: from, End: to})
	m.budgetLeft -= to - from
	return from, to, true
}

// queueRexmit adds [from, to) to the retransmissions waiting for the
// pacer, merged with one it overlaps or touches; it reports false when
// there is no room (the receiver asks again).
func (m *outMsg) queueRexmit(from, to uint32) bool {
	if from >= to {
		return true
	}
	for i := range m.pend {
		if s := &m.pend[i]; from <= s.End && to >= s.Start {
			s.Start, s.End = min(s.Start, from), max(s.End, to)
			return true
		}
	}
	if len(m.pend) == cap(m.pendBuf) {
		return false
	}
	m.pend = append(m.pend, span{Start: from, End: to})
	return true
}

// nextRexmit is the segment the pacer retransmits next, if any.
func (m *outMsg) nextRexmit() (from, to uint32, ok bool) {
	if len(m.pend) == 0 {
		return 0, 0, false
	}
	s := m.pend[0]
	return s.Start, min(m.segUp(s.Start+1), s.End), true
}

// rexmitSent drops the retransmission of bytes up to to, sent.
func (m *outMsg) rexmitSent(to uint32) {
	if m.pend[0].Start = to; to >= m.pend[0].End {
		m.pend = append(m.pend[:0], m.pend[1:]...)
	}
}

// toSend is the SRPT key of the message in the pacer: the bytes it has
// still to send, new and retransmitted.
func (m *outMsg) toSend() uint32 {
	n := uint64(m.length - m.next)
	for _, s := range m.pend {
		n += uint64(s.End - s.Start)
	}
	return uint32(min(n, uint64(^uint32(0))))
}
