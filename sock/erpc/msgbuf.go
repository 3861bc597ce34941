package erpc

import "sync"

// maxHomaMessage is the largest message Homa carries (sock documents
// 1..1,000,000 bytes).
const maxHomaMessage = 1_000_000

// MaxMsgSize is the largest request or response that travels as one Homa
// message: the largest Homa message less the room kept for the erpc
// header. Larger ones, up to Config.MaxMessage, travel as several (see
// the package doc).
const MaxMsgSize = maxHomaMessage - maxHeaderLen

// fragChunk is the data each fragment of a large message carries (the
// last one less): MaxMsgSize, so that a fragment fits one Homa message
// with either header that names it (fragment or exactly-once).
const fragChunk = MaxMsgSize

// MsgBuffer holds one request or response. Its data region is contiguous
// and preceded by room for the erpc header, so that header and data reach
// the transport as one slice with no copy. Allocate one with
// Rpc.AllocMsgBuffer, size it with Rpc.ResizeMsgBuffer, and give it back
// with Rpc.FreeMsgBuffer; buffers are pooled per Rpc, those of large
// messages (beyond MaxMsgSize) up to 16 MiB of them.
//
// Ownership: a request buffer and a response buffer handed to
// EnqueueRequest belong to the layer until the request's continuation
// runs; the application must not touch them meanwhile.
type MsgBuffer struct {
	buf   []byte // cap maxHeaderLen + class size; data is buf[maxHeaderLen:maxHeaderLen+n]
	n     int    // data length
	max   int    // the largest n allowed
	class int8
	state bufState
	pool  *bufPool
}

type bufState uint8

const (
	bufFree   bufState = iota // in the pool
	bufApp                    // the application's
	bufQueued                 // held by a pending request
)

// Data returns the buffer's data region. Its length is the message's
// length; write the message into it.
func (m *MsgBuffer) Data() []byte { return m.buf[maxHeaderLen : maxHeaderLen+m.n] }

// Len is the message's length.
func (m *MsgBuffer) Len() int { return m.n }

// MaxLen is the largest length the buffer can be resized to.
func (m *MsgBuffer) MaxLen() int { return m.max }

// frame writes h just before the data and returns header and data as one
// slice, ready for the transport.
func (m *MsgBuffer) frame(h *header) []byte {
	start := maxHeaderLen - h.Len()
	h.put(m.buf[start:maxHeaderLen])
	return m.buf[start : maxHeaderLen+m.n]
}

// setData copies p into the data region, growing the buffer when p does
// not fit (the old storage goes back to the pool).
func (m *MsgBuffer) setData(p []byte) {
	if len(p) > m.max {
		m.pool.grow(m, len(p))
	}
	m.n = len(p)
	copy(m.buf[maxHeaderLen:], p)
}

// writeAt writes p at offset off of the data, which grows to cover it.
// The storage grows (keeping the data) only when p does not fit: to a
// free large storage of the pool if one holds it, else by doubling, never
// beyond limit bytes of data; so new memory follows the bytes that
// arrived, not what a peer said would come.
func (m *MsgBuffer) writeAt(off int, p []byte, limit int) {
	need := off + len(p)
	if need > len(m.buf)-maxHeaderLen {
		nb := m.pool.grown(len(m.buf)-maxHeaderLen, need, limit)
		copy(nb[maxHeaderLen:], m.Data())
		if m.class == int8(bigClass) {
			m.pool.putBig(m.buf)
		}
		m.buf, m.class = nb, int8(bigClass)
	}
	m.max = max(m.max, need)
	m.n = max(m.n, need)
	copy(m.buf[maxHeaderLen+off:], p)
}

// take hands m's storage and data to the caller, which owns them from
// then on, and leaves m empty (Len and MaxLen 0), with room for a header
// alone.
func (m *MsgBuffer) take() (store, data []byte) {
	store, data = m.buf, m.Data()
	m.buf, m.n, m.max, m.class = make([]byte, maxHeaderLen), 0, 0, int8(bigClass)
	return store, data
}

// Size classes of the pool: the data capacity of each class.
var classSizes = [...]int{64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, MaxMsgSize}

// poolClassBytes bounds the free bytes kept per class; at least
// poolMinFree buffers are kept whatever their size.
const (
	poolClassBytes = 4 << 20
	poolMinFree    = 4
)

// poolBigBytes bounds the data capacity of the free large storages kept
// per Rpc (those beyond every class: large messages): two messages of
// the default MaxMessage, so that a request reassembled and the response
// its handler builds, or a client's request and response, are reused
// from one large exchange to the next.
const poolBigBytes = 2 * defaultMaxMessage

// bigClass marks a buffer larger than any class: allocated to size, not
// pooled.
const bigClass = len(classSizes)

func classOf(n int) int {
	for i, s := range classSizes {
		if n <= s {
			return i
		}
	}
	return bigClass
}

// bufPool recycles the MsgBuffers of one Rpc. It is safe for concurrent
// use: background handlers allocate and free from worker goroutines.
type bufPool struct {
	mu   sync.Mutex
	free [len(classSizes)][]*MsgBuffer
	big  [][]byte // free large storages: maxHeaderLen of room, then the data
	// bigBytes is the data capacity of big, at most poolBigBytes.
	bigBytes int
	max      int // the largest message: Config.MaxMessage
}

// get returns an application-owned buffer of length n.
func (p *bufPool) get(n int) (*MsgBuffer, error) {
	if n < 0 || n > max(p.max, MaxMsgSize) {
		return nil, ErrMessageTooLarge
	}
	c := classOf(n)
	if c == bigClass {
		buf := p.takeBig(n, n)
		if buf == nil {
			buf = make([]byte, maxHeaderLen+n)
		}
		return &MsgBuffer{buf: buf, class: int8(c), pool: p, n: n, max: n, state: bufApp}, nil
	}
	p.mu.Lock()
	var m *MsgBuffer
	if k := len(p.free[c]); k > 0 {
		m = p.free[c][k-1]
		p.free[c][k-1] = nil
		p.free[c] = p.free[c][:k-1]
	}
	p.mu.Unlock()
	if m == nil {
		m = &MsgBuffer{buf: make([]byte, maxHeaderLen+classSizes[c]), class: int8(c), pool: p}
	}
	m.n, m.max, m.state = n, n, bufApp
	return m, nil
}

// put takes back a buffer.
func (p *bufPool) put(m *MsgBuffer) {
	switch m.state {
	case bufFree:
		panic("erpc: MsgBuffer freed twice")
	case bufQueued:
		panic("erpc: MsgBuffer freed while a pending request holds it")
	}
	m.state = bufFree
	c := int(m.class)
	if c == bigClass {
		p.putBig(m.buf) // the storage goes back; the struct is dropped
		m.buf = nil
		return
	}
	keep := max(poolMinFree, poolClassBytes/classSizes[c])
	p.mu.Lock()
	if len(p.free[c]) < keep {
		p.free[c] = append(p.free[c], m)
	}
	p.mu.Unlock()
}

// grow gives m storage for n bytes of data (n <= MaxMsgSize), returning
// its old storage to the pool. The data is not kept.
func (p *bufPool) grow(m *MsgBuffer, n int) {
	c := classOf(n)
	if c != int(m.class) || c == bigClass && n > len(m.buf)-maxHeaderLen {
		old := &MsgBuffer{buf: m.buf, class: m.class, state: bufApp, pool: p}
		nm, _ := p.get(n)
		m.buf, m.class = nm.buf, nm.class
		nm.buf = nil // the MsgBuffer struct itself is dropped
		p.put(old)
	}
	m.max = n
}

// takeBig returns a free large storage with room for want bytes of data,
// the smallest such; else the largest with room for need bytes; else nil.
func (p *bufPool) takeBig(need, want int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i, b := range p.big {
		c := len(b) - maxHeaderLen
		if c < need {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		bc := len(p.big[best]) - maxHeaderLen
		if bc < want && c > bc || bc >= want && c >= want && c < bc {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := p.big[best]
	last := len(p.big) - 1
	p.big[best], p.big[last] = p.big[last], nil
	p.big = p.big[:last]
	p.bigBytes -= len(b) - maxHeaderLen
	return b
}

// putBig keeps a large storage for reuse, if it is one and there is room
// within poolBigBytes, making room by dropping smaller ones.
func (p *bufPool) putBig(b []byte) {
	c := len(b) - maxHeaderLen
	if c <= classSizes[len(classSizes)-1] || c > poolBigBytes {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.bigBytes+c > poolBigBytes {
		small := 0
		for i, x := range p.big {
			if len(x) < len(p.big[small]) {
				small = i
			}
		}
		if len(p.big) == 0 || len(p.big[small]) >= len(b) {
			return // what is kept is at least as large
		}
		p.bigBytes -= len(p.big[small]) - maxHeaderLen
		last := len(p.big) - 1
		p.big[small], p.big[last] = p.big[last], nil
		p.big = p.big[:last]
	}
	p.big = append(p.big, b)
	p.bigBytes += c
}

// grown returns storage for a message growing from have to need bytes
// of data, of at most limit: a free large storage, preferably one that
// holds limit, or a new one of twice have (at least need, at most
// limit).
func (p *bufPool) grown(have, need, limit int) []byte {
	if p != nil {
		if b := p.takeBig(need, limit); b != nil {
			return b
		}
	}
	return make([]byte, maxHeaderLen+min(limit, max(need, 2*have)))
}
