package core

import (
	"math/bits"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/resend"
)

// span is a half-open byte range [Start, End) of a message.
type span = resend.Span

// Receive storage is committed as bytes arrive, never from the length a
// sender claims. A message shorter than segmentMin gets one buffer of its
// own length (whole) at its first byte, and every packet is copied into
// it. A longer one keeps its packets as they came, as segments: a packet
// that fills most of its receive buffer is kept in that buffer (no copy:
// the shell gives the buffer up and reads into a new one), a smaller one
// is copied into a buffer of its own size. Once a quarter of the message
// has arrived, the next packet makes it join: it gets its own whole
// buffer, the segments are copied into it, and every later packet is
// copied straight there. So storage is committed for at most four times
// the bytes that arrived, times the rounding of Buffers (the shell's pool
// rounds up to a power of two: eight times at worst).
//
// When the message is complete, a joined message is its whole buffer;
// one that came in a single kept packet is that packet's buffer. So a
// message's bytes are copied once between the receive buffer and the
// application, or not at all, except the quarter that small packets
// bring before a message joins, which is copied twice. Joining at a
// quarter, rather than keeping every large packet and copying them all
// at the end, spreads the copies over the transfer, while the sender
// sends the rest, instead of adding them after the last packet: 1 MB
// echoes between two processes took 407-607 µs (median) instead of
// 434-681 µs, 8 runs each, alternated.
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
	whole     []byte    // the message's own storage, once it joined
	segs      []segment // its packets until then (the capacity is reused)
	have      []span    // received ranges, sorted, disjoint and not adjacent
	haveBuf   [2]span
	received  uint32 // bytes in have
	granted   uint32 // bytes the sender may send: unscheduled, then grants
	unsched   uint32 // the sender's unscheduled bytes, where it cuts a segment short
	grantPrio uint8  // priority of the last GRANT
	mem       int    // storage committed, in bytes (capacities)
}

func (m *inMsg) init(length, unsched uint32) {
	m.length = length
	m.have = m.haveBuf[:0] // in order, one span; reordered, rarely more
	m.received = 0
	m.granted = min(unsched, length)
	m.unsched = m.granted
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
	switch {
	case m.whole != nil:
		return false, 0
	case m.length >= segmentMin && own && len(payload) >= segmentMin && 4*len(payload) >= cap(pkt) &&
		(uint32(len(payload)) == m.length || !m.joins(len(payload))):
		return true, cap(pkt)
	case m.joins(len(payload)):
		return false, sizeClass(int(m.length))
	}
	return false, sizeClass(len(payload))
}

// joins reports whether n more bytes, not kept in their receive buffer,
// make the message take its whole buffer now: at its first byte below
// segmentMin, otherwise once a quarter of it has arrived.
func (m *inMsg) joins(n int) bool {
	return m.whole == nil && (m.length < segmentMin || 4*(uint64(m.received)+uint64(n)) >= uint64(m.length))
}

// messagePeak is the most storage a message of length bytes commits at
// once: when it joins, its whole buffer (of its size class) beside the
// packets it kept until then, which hold at most its length (a quarter
// of it, each kept in a buffer at most four times its payload).
func messagePeak(length int) int { return sizeClass(length) + length }

// sizeClass bounds the capacity of a buffer of n bytes from Buffers: the
// power of two at or above n.
func sizeClass(n int) int { return 1 << bits.Len(uint(n-1)) }

// store records the payload at off (which brings new bytes: see fresh),
// keeping the receive buffer pkt if keep, and returns how many new bytes
// it held and how many bytes of storage it committed. The caller has
// checked that off+len(payload) <= m.length.
func (m *inMsg) store(off uint32, payload, pkt []byte, keep bool, bufs contract.Buffers) (added uint32, committed int) {
	before := m.mem
	end := off + uint32(len(payload))
	switch {
	case m.whole != nil:
	case keep:
		m.segs = append(m.segs, segment{off: off, data: payload, backing: pkt[:0:cap(pkt)]})
		m.mem += cap(pkt)
	case m.joins(len(payload)):
		m.join(bufs)
	default:
		b := bufs.Get(len(payload))
		m.segs = append(m.segs, segment{off: off, data: b[:copy(b, payload)], backing: b})
		m.mem += cap(b)
	}
	if m.whole != nil && &m.whole[off] != &payload[0] { // not received in place (land.go)
		copy(m.whole[off:end], payload)
	}
	return m.mark(off, end), m.mem - before
}

// join gives the message its whole buffer and moves the segments into it.
func (m *inMsg) join(bufs contract.Buffers) {
	m.whole = bufs.Get(int(m.length))
	for _, s := range m.segs {
		copy(m.whole[s.off:], s.data)
	}
	m.releaseSegs(bufs)
	m.mem = cap(m.whole)
}

// anyReceived reports whether any byte of [off, end) has arrived.
func (m *inMsg) anyReceived(off, end uint32) bool {
	for _, s := range m.have {
		if s.Start >= end {
			return false
		}
		if s.End > off {
			return true
		}
	}
	return false
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
// the storage it leaves committed (that buffer's capacity). One that
// came in a single kept packet is that packet's buffer; any other is its
// whole buffer (the packet that completes a longer message makes it join:
// see plan).
func (m *inMsg) take(bufs contract.Buffers) (data, backing []byte, mem int) {
	if len(m.segs) == 1 && uint32(len(m.segs[0].data)) == m.length {
		s := m.segs[0]
		clear(m.segs)
		m.segs = m.segs[:0]
		m.mem = 0
		return s.data, s.backing, cap(s.backing)
	}
	if m.whole == nil {
		m.join(bufs)
	}
	b := m.whole
	m.whole = nil
	m.mem = 0
	return b, b, cap(b)
}

// release frees the storage and returns how many bytes it held.
func (m *inMsg) release(bufs contract.Buffers) int {
	freed := m.mem
	if m.whole != nil {
		bufs.Put(m.whole)
		m.whole = nil
	}
	m.releaseSegs(bufs)
	m.mem = 0
	return freed
}

// releaseSegs gives the segments' buffers back.
func (m *inMsg) releaseSegs(bufs contract.Buffers) {
	for i := range m.segs {
		bufs.Put(m.segs[i].backing)
	}
	clear(m.segs)
	m.segs = m.segs[:0]
}

// reset forgets what arrived, keeping the length and grants.
func (m *inMsg) reset(bufs contract.Buffers) int {
	freed := m.release(bufs)
	m.have = m.haveBuf[:0]
	m.received = 0
	return freed
}
