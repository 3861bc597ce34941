package homagrpc

import (
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// Flow control of a stream, one direction at a time. Credit counts the
// bytes of messages (chunk contents) from the stream's start: the
// receiver says up to which byte it accepts, the sender sends no byte
// beyond. The receiver grants its window less what it holds in complete
// messages not yet read, so a reader that stops bounds what it holds to
// one window plus one message (a message in progress is let through up
// to the size limit, so that a message longer than the window can
// complete).

// initialCredit is the credit an opening client assumes the server gives
// before it hears otherwise, as HTTP/2's initial window.
const initialCredit = 65_535

// defaultWindow is the default receive window of a stream, each way.
const defaultWindow = 1 << 20

// inMsg is a message received whole. When ref is set, data aliases the
// Homa message it arrived in, which goes back to the socket's pool once
// every message in it is done.
type inMsg struct {
	data       []byte
	compressed bool
	ref        *frameRef
}

// done says the message's bytes are no longer needed.
func (m inMsg) done() { m.ref.release() }

// frameRef counts the holds on a received Homa message: its receiver's,
// and one per message in it that is not done yet.
type frameRef struct {
	m *sock.Message
	n atomic.Int32
}

func newFrameRef(m *sock.Message) *frameRef {
	r := &frameRef{m: m}
	r.n.Store(1)
	return r
}

func (r *frameRef) release() {
	if r != nil && r.n.Add(-1) == 0 {
		r.m.Release()
	}
}

// memBudget bounds the bytes that the streams of a server hold received
// and not yet read, whatever their windows and number add up to: those
// of one client host (a budget whose parent is the server's), and of
// all of them.
type memBudget struct {
	limit  int64
	used   atomic.Int64
	parent *memBudget // also taken from, when set
	// what names the bound in errors: "MaxStreamMemory", or
	// "MaxStreamMemoryPerHost"; full counts what it refused.
	what string
	full *atomic.Uint64
}

// take reserves n bytes, or returns the budget they do not fit in,
// which counts the refusal.
func (b *memBudget) take(n int) (full *memBudget) {
	if b == nil {
		return nil
	}
	if b.used.Add(int64(n)) > b.limit {
		b.used.Add(-int64(n))
		full = b
		if p := b.parent; p != nil && p.used.Load()+int64(n) > p.limit {
			full = p // the server's bound: no share of it would have fit
		}
		if full.full != nil {
			full.full.Add(1)
		}
		return full
	}
	if full := b.parent.take(n); full != nil {
		b.used.Add(-int64(n))
		return full
	}
	return nil
}

func (b *memBudget) give(n int) {
	if b != nil && n != 0 {
		b.used.Add(-int64(n))
		b.parent.give(n)
	}
}

// exhausted is the error of a stream whose bytes do not fit in b.
func (b *memBudget) exhausted() error {
	if b.parent != nil {
		return status.Errorf(codes.ResourceExhausted, "homagrpc: the streams of this client host hold %d bytes unread, its share of the server's (%s)", b.limit, b.what)
	}
	return status.Errorf(codes.ResourceExhausted, "homagrpc: the server's streams hold %d bytes unread, its bound (%s)", b.limit, b.what)
}

// inQueue is the receiving half of a stream. Its owner guards it.
type inQueue struct {
	budget   *memBudget // nil: none beyond the window and message limit
	held     int        // bytes taken from the budget
	msgs     []inMsg    // complete, not yet read
	queued   int        // bytes in msgs
	partial  []byte     // the message in progress
	inPart   bool       // a message is in progress
	partComp bool
	received uint64 // bytes received
	limit    uint64 // the credit granted
	told     uint64 // the credit the peer has been told
	window   int
	maxMsg   int // longest message accepted
}

func newInQueue(window, maxMsg int, limit uint64, budget *memBudget) inQueue {
	return inQueue{window: window, maxMsg: maxMsg, limit: limit, told: limit, budget: budget}
}

// add takes a frame's chunks in. A peer that sends beyond its credit or
// a message beyond the size limit fails the stream; nothing is held
// beyond what arrived. With ref, a message that is one chunk aliases the
// frame instead of being copied.
func (q *inQueue) add(sec []byte, ref *frameRef) error {
	for len(sec) > 0 {
		flags, data, rest := nextChunk(sec)
		sec = rest
		if q.received+uint64(len(data)) > q.limit {
			return status.Errorf(codes.ResourceExhausted, "homagrpc: the peer sent %d bytes beyond the %d it was granted", q.received+uint64(len(data))-q.limit, q.limit)
		}
		q.received += uint64(len(data))
		comp := flags&chunkFlagCompressed != 0
		if q.inPart && comp != q.partComp {
			return status.Error(codes.Internal, "homagrpc: chunks of one message disagree on compression")
		}
		if len(q.partial)+len(data) > q.maxMsg {
			return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(q.partial)+len(data), q.maxMsg)
		}
		if full := q.budget.take(len(data)); full != nil {
			return full.exhausted()
		}
		q.held += len(data)
		if flags&chunkFlagLast != 0 && !q.inPart {
			// A whole message in one chunk.
			if ref != nil {
				ref.n.Add(1)
				q.push(inMsg{data: data, compressed: comp, ref: ref})
			} else {
				q.push(inMsg{data: append([]byte(nil), data...), compressed: comp})
			}
			continue
		}
		q.inPart, q.partComp = true, comp
		q.partial = append(q.partial, data...)
		if flags&chunkFlagLast != 0 {
			q.push(inMsg{data: q.partial, compressed: comp})
			q.partial, q.inPart = nil, false
		}
	}
	return nil
}

func (q *inQueue) push(m inMsg) {
	q.msgs = append(q.msgs, m)
	q.queued += len(m.data)
}

// take returns the next complete message.
func (q *inQueue) take() (inMsg, bool) {
	if len(q.msgs) == 0 {
		return inMsg{}, false
	}
	m := q.msgs[0]
	q.msgs[0] = inMsg{}
	if len(q.msgs) == 1 {
		q.msgs = q.msgs[:0] // keeps the array: no allocation per message
	} else {
		q.msgs = q.msgs[1:]
	}
	q.queued -= len(m.data)
	q.held -= len(m.data)
	q.budget.give(len(m.data))
	return m, true
}

// drop lets go of everything held, when the stream ends.
func (q *inQueue) drop() {
	for _, m := range q.msgs {
		m.done()
	}
	q.budget.give(q.held)
	q.msgs, q.partial, q.queued, q.held, q.inPart = nil, nil, 0, 0, false
}

// grant returns the credit to give now: never less than before.
func (q *inQueue) grant() uint64 {
	if l := q.received + uint64(max(0, q.window-q.queued)); l > q.limit {
		q.limit = l
	}
	return q.limit
}

// tell returns the credit to send and records it as told.
func (q *inQueue) tell() uint64 {
	q.told = q.grant()
	return q.told
}

// due reports whether enough credit has opened since the peer was last
// told that telling it is worth a frame.
func (q *inQueue) due() bool {
	g := q.grant()
	if g <= q.told {
		return false
	}
	// Half a window opened, or an eighth while the peer has less than
	// an eighth left (it is about to wait for credit).
	w := uint64(q.window)
	return g-q.told >= w/2 || g-q.told >= w/8 && q.told-q.received < w/8
}

// outMsg is a message waiting to be sent. When buf is set, data is in
// a buffer of the pool, given back once the message is sent.
type outMsg struct {
	data       []byte
	compressed bool
	buf        *[]byte
}

// outQueue is the sending half of a stream. Its owner guards it.
type outQueue struct {
	msgs    []outMsg
	off     int    // bytes of msgs[0] already sent
	pending int    // bytes not yet sent
	sent    uint64 // bytes sent
	limit   uint64 // the peer's credit
	// budget, when set, holds the bytes pending: a unary response too
	// long for one Homa message, waiting to be pulled.
	budget *memBudget
}

// full reports whether a sender must wait before queueing more: what
// waits already reaches beyond the credit. So the queue holds at most
// the credit and one message.
func (q *outQueue) full() bool {
	return q.pending > 0 && q.sent+uint64(q.pending) >= q.limit
}

func (q *outQueue) push(data []byte, compressed bool, buf *[]byte) {
	q.msgs = append(q.msgs, outMsg{data: data, compressed: compressed, buf: buf})
	q.pending += len(data)
}

// ready reports whether there is something the credit lets go.
func (q *outQueue) ready() bool {
	return len(q.msgs) > 0 && (q.sent < q.limit || len(q.msgs[0].data) == q.off)
}

// need is how many bytes of chunks the waiting messages make.
func (q *outQueue) need() int { return q.pending + chunkHeaderLen*len(q.msgs) }

// fitsAll reports whether every waiting message fits in the credit and
// in room bytes of chunks.
func (q *outQueue) fitsAll(room int) bool {
	return q.need() <= room && q.sent+uint64(q.pending) <= q.limit
}

// drop forgets the messages not sent, giving their bytes back to the
// budget.
func (q *outQueue) drop() {
	q.budget.give(q.pending)
	*q = outQueue{}
}

// empty reports whether every message went out.
func (q *outQueue) empty() bool { return len(q.msgs) == 0 }

// setLimit takes the peer's credit; it never shrinks.
func (q *outQueue) setLimit(l uint64) {
	if l > q.limit {
		q.limit = l
	}
}

// fill appends chunks to b while the credit lasts and b stays within
// room bytes.
func (q *outQueue) fill(b []byte, room int) []byte {
	i := 0 // messages sent whole
	defer func() {
		// Forget the messages sent; an emptied queue keeps its array,
		// so that a message at a time allocates nothing here.
		clear(q.msgs[:i])
		if i == len(q.msgs) {
			q.msgs = q.msgs[:0]
		} else {
			q.msgs = q.msgs[i:]
		}
	}()
	for ; i < len(q.msgs); i++ {
		m := &q.msgs[i]
		n := len(m.data) - q.off
		n = int(min(uint64(n), q.limit-q.sent))
		n = min(n, room-len(b)-chunkHeaderLen)
		if n < 0 || n == 0 && len(m.data) > q.off {
			return b
		}
		flags := byte(0)
		if m.compressed {
			flags |= chunkFlagCompressed
		}
		last := q.off+n == len(m.data)
		if last {
			flags |= chunkFlagLast
		}
		b = appendChunkHeader(b, flags, n)
		b = append(b, m.data[q.off:q.off+n]...)
		q.sent += uint64(n)
		q.pending -= n
		q.budget.give(n)
		q.off += n
		if !last {
			return b
		}
		if m.buf != nil {
			putBuffer(m.buf, m.data)
		}
		q.off = 0
	}
	return b
}
