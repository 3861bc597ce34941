package core

import (
	"math/bits"

	"github.com/homa-go/homa/resend"
)

// span is a half-open byte range [Start, End) of a message.
type span = resend.Span

// Receive storage is committed as bytes arrive, never from the length a
// sender claims. A message shorter than segmentMin gets one buffer of its
// own length at its first byte, and every packet is copied into it. A
// longer one keeps its packets as they came, as segments: a packet that
// fills most of its receive buffer is kept in that buffer (no copy: the
// shell gives the buffer up and reads into a new one), a smaller one is
// copied into a buffer of its own size. When the message is complete,
// the segments are copied into one buffer, unless it came in a single
// kept packet: then that packet's buffer is the message. So a message's
// bytes are copied once between the receive buffer and the application,
// or not at all.
const segmentMin = 8 << 10

// segment is a received packet's payload kept for reassembly: data at
// offset off of the message, in backing (a receive buffer or a copy),
// which goes back to Buffers when the segment is released.
type segment struct {
	off     uint32
	data    []byte
	backing []byte
}

// inMsg reassembles an incoming message from DATA packets that may arrive
// out of order or more than once.
type inMsg struct {
	length    uint32
	small     []byte    // the storage of a message shorter than segmentMin
	segs      []segment // the storage of a longer one (its capacity is reused)
	have      []span    // received ranges, sorted, disjoint and not adjacent
	haveBuf   [2]span
	received  uint32 // bytes in have
	granted   uint32 // bytes the sender may send: unscheduled, then grants
	grantPrio uint8  // priority of the last GRANT
	mem       int    // storage committed, in bytes (capacities)
}

func (m *inMsg) init(length, unsched uint32) {
	m.length = length
	m.have = m.haveBuf[:0] // in order, one span; reordered, rarely more
	m.received = 0
	m.granted = min(unsched, length)
	m.mem = 0
}

func (m *inMsg) complete() bool { return m.received == m.length }

// spans are the received ranges, sorted and disjoint.
func (m *inMsg) spans() []span { return m.have }

// fresh reports whether any byte of [off, end) has not arrived yet.
func (m *inMsg) fresh(off, end uint32) bool {
	for _, s := range m.have {
		if s.Start > off {
			return true
		}
		if s.End >= end {
			return false
		}
		off = max(off, s.End)
	}
	return off < end
}

// plan says how a packet carrying payload at off would be stored, before
// it is: whether its receive buffer pkt would be kept (the caller allows
// it with own), and how many bytes of storage that commits (an upper
// bound).
func (m *inMsg) plan(payload, pkt []byte, own bool) (keep bool, need int) {
	if m.length < segmentMin {
		if m.small != nil {
			return false, 0
		}
		return false, int(m.length)
	}
	if own && len(payload) >= segmentMin && 4*len(payload) >= cap(pkt) {
		return true, cap(pkt)
	}
	return false, 1 << bits.Len(uint(len(payload)-1))
}

// store records the payload at off (which brings new bytes: see fresh),
// keeping the receive buffer pkt if keep, and returns how many new bytes
// it held and how many bytes of storage it committed. The caller has
// checked that off+len(payload) <= m.length.
func (m *inMsg) store(off uint32, payload, pkt []byte, keep bool, bufs Buffers) (added uint32, committed int) {
	before := m.mem
	end := off + uint32(len(payload))
	if m.length < segmentMin {
		if m.small == nil {
			m.small = bufs.Get(int(m.length))
			m.mem += cap(m.small)
		}
		copy(m.small[off:end], payload)
	} else {
		s := segment{off: off}
		if keep {
			s.backing = pkt[:0:cap(pkt)]
			s.data = payload
		} else {
			s.backing = bufs.Get(len(payload))
			s.data = s.backing[:copy(s.backing, payload)]
		}
		m.segs = append(m.segs, s)
		m.mem += cap(s.backing)
	}
	return m.mark(off, end), m.mem - before
}

// mark records [off, end) as received and returns how many of its bytes
// are new.
func (m *inMsg) mark(off, end uint32) uint32 {
	// Find the first span that ends at or after off: everything before it
	// lies wholly to the left of the new range.
	i := 0
	for i < len(m.have) && m.have[i].End < off {
		i++
	}
	// Count the gaps between the new range and the spans it overlaps,
	// merging those spans into one.
	var added uint32
	start, cur := off, off
	j := i
	for ; j < len(m.have) && m.have[j].Start <= end; j++ {
		s := m.have[j]
		if s.Start > cur {
			added += s.Start - cur
		}
		cur = max(cur, s.End)
		start = min(start, s.Start)
	}
	if cur < end {
		added += end - cur
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

// take returns the complete message: its bytes, the buffer that holds
// them (to go back to Buffers when the application releases them), and
// the storage it leaves committed (that buffer's capacity). A message in
// several segments is copied into a buffer of its own; one that came in
// a single kept packet is that packet's buffer.
func (m *inMsg) take(bufs Buffers) (data, backing []byte, mem int) {
	if m.length < segmentMin {
		b := m.small
		m.small = nil
		m.mem = 0
		return b, b, cap(b)
	}
	if len(m.segs) == 1 && uint32(len(m.segs[0].data)) == m.length {
		s := m.segs[0]
		clear(m.segs)
		m.segs = m.segs[:0]
		m.mem = 0
		return s.data, s.backing, cap(s.backing)
	}
	b := bufs.Get(int(m.length))
	for _, s := range m.segs {
		copy(b[s.off:], s.data)
	}
	m.release(bufs)
	return b, b, cap(b)
}

// release frees the storage and returns how many bytes it held.
func (m *inMsg) release(bufs Buffers) int {
	freed := m.mem
	if m.small != nil {
		bufs.Put(m.small)
		m.small = nil
	}
	for i := range m.segs {
		bufs.Put(m.segs[i].backing)
	}
	clear(m.segs)
	m.segs = m.segs[:0]
	m.mem = 0
	return freed
}

// reset forgets what arrived, keeping the length and grants.
func (m *inMsg) reset(bufs Buffers) int {
	freed := m.release(bufs)
	m.have = m.haveBuf[:0]
	m.received = 0
	return freed
}
