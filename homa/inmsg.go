package homa

import "github.com/homa-go/homa/resend"

// span is a half-open byte range [Start, End) of a message.
type span = resend.Span

// inMsg reassembles an incoming message from DATA packets that may arrive
// out of order or more than once.
type inMsg struct {
	length    uint32
	buf       []byte
	have      []span // received ranges, sorted, disjoint and not adjacent
	haveBuf   [2]span
	received  uint32 // bytes in have
	granted   uint32 // bytes the sender may send: unscheduled, then grants
	grantPrio uint8  // priority of the last GRANT
}

func (m *inMsg) init(length, unsched uint32) {
	m.length = length
	m.buf = getBuf(int(length))
	m.have = m.haveBuf[:0] // in order, one span; reordered, rarely more
	m.received = 0
	m.granted = min(unsched, length)
}

func (m *inMsg) complete() bool { return m.received == m.length }

// spans are the received ranges, sorted and disjoint.
func (m *inMsg) spans() []span { return m.have }

// add copies the part of data (at offset off) not received before and
// returns how many new bytes it held. The caller has checked that
// off+len(data) <= m.length.
func (m *inMsg) add(off uint32, data []byte) uint32 {
	if len(data) == 0 {
		return 0
	}
	end := off + uint32(len(data))
	// Find the first span that ends at or after off: everything before it
	// lies wholly to the left of the new range.
	i := 0
	for i < len(m.have) && m.have[i].End < off {
		i++
	}
	// Copy the gaps between the new range and the spans it overlaps,
	// merging those spans into one.
	var added uint32
	start, cur := off, off
	j := i
	for ; j < len(m.have) && m.have[j].Start <= end; j++ {
		s := m.have[j]
		if s.Start > cur {
			added += m.fill(cur, s.Start, off, data)
		}
		cur = max(cur, s.End)
		start = min(start, s.Start)
	}
	if cur < end {
		added += m.fill(cur, end, off, data)
		cur = end
	}
	merged := span{Start: start, End: cur}
	if j == i {
		// No overlap: insert.
		m.have = append(m.have, span{})
		copy(m.have[i+1:], m.have[i:])
		m.have[i] = merged
	} else {
		m.have[i] = merged
		m.have = append(m.have[:i+1], m.have[j:]...)
	}
	m.received += added
	return added
}

// fill copies bytes [from, to) of the message out of data, which holds the
// message starting at offset off.
func (m *inMsg) fill(from, to, off uint32, data []byte) uint32 {
	copy(m.buf[from:to], data[from-off:to-off])
	return to - from
}

// release returns the buffer to the pool unless ownership has passed on.
func (m *inMsg) release() {
	if m.buf != nil {
		putBuf(m.buf)
		m.buf = nil
	}
}
