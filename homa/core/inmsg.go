package core

import "github.com/homa-go/homa/resend"

// span is a half-open byte range [Start, End) of a message.
type span = resend.Span

// Receive storage is committed as bytes arrive, in chunks: a message of
// at most chunkSize bytes gets one buffer of its own length at its first
// byte; a longer one gets chunkSize pieces, each when its first byte
// arrives, and is made contiguous when complete. So what a sender can
// make the core hold is what it sent, rounded up to a chunk per message,
// never the length it claims.
const (
	chunkShift = 16
	chunkSize  = 1 << chunkShift
	maxChunks  = (MaxMessage + chunkSize - 1) / chunkSize
)

// inMsg reassembles an incoming message from DATA packets that may arrive
// out of order or more than once.
type inMsg struct {
	length    uint32
	small     []byte            // the storage of a message of at most chunkSize bytes
	chunks    [maxChunks][]byte // the storage of a longer one
	have      []span            // received ranges, sorted, disjoint and not adjacent
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

// need is how many bytes of storage must be committed before bytes
// [off, end) can be stored (an upper bound: a buffer may round up).
func (m *inMsg) need(off, end uint32) int {
	if m.length <= chunkSize {
		if m.small != nil {
			return 0
		}
		return int(m.length)
	}
	n := 0
	for c := off >> chunkShift; c <= (end-1)>>chunkShift; c++ {
		if m.chunks[c] == nil {
			n += chunkSize
		}
	}
	return n
}

// commit allocates the storage bytes [off, end) need and returns how
// many bytes it committed.
func (m *inMsg) commit(off, end uint32, bufs Buffers) int {
	before := m.mem
	if m.length <= chunkSize {
		if m.small == nil {
			m.small = bufs.Get(int(m.length))
			m.mem += cap(m.small)
		}
		return m.mem - before
	}
	for c := off >> chunkShift; c <= (end-1)>>chunkShift; c++ {
		if m.chunks[c] == nil {
			m.chunks[c] = bufs.Get(chunkSize)
			m.mem += cap(m.chunks[c])
		}
	}
	return m.mem - before
}

// add copies the part of data (at offset off) not received before and
// returns how many new bytes it held. The caller has checked that
// off+len(data) <= m.length and committed the storage.
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
	src := data[from-off : to-off]
	if m.length <= chunkSize {
		copy(m.small[from:to], src)
		return to - from
	}
	for at := from; at < to; {
		c := m.chunks[at>>chunkShift]
		k := at & (chunkSize - 1)
		n := uint32(copy(c[k:], src[at-from:]))
		at += n
	}
	return to - from
}

// take returns the complete message as one buffer, which the caller now
// owns, and the storage it leaves committed (the buffer's capacity). A
// chunked message is copied into a buffer of its own.
func (m *inMsg) take(bufs Buffers) ([]byte, int) {
	if m.length <= chunkSize {
		b := m.small
		m.small = nil
		m.mem = 0
		return b, cap(b)
	}
	b := bufs.Get(int(m.length))
	for c := range (m.length + chunkSize - 1) >> chunkShift {
		copy(b[c<<chunkShift:], m.chunks[c])
	}
	m.release(bufs)
	return b, cap(b)
}

// release frees the storage and returns how many bytes it held.
func (m *inMsg) release(bufs Buffers) int {
	freed := m.mem
	if m.small != nil {
		bufs.Put(m.small)
		m.small = nil
	}
	for c := range m.chunks {
		if m.chunks[c] != nil {
			bufs.Put(m.chunks[c])
			m.chunks[c] = nil
		}
	}
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
