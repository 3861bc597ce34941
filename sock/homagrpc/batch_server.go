package homagrpc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// slot is where the answer to a stream frame goes: the reply to the Homa
// request that carried the frame alone (m), or entry i of the reply to a
// batch (b).
type slot struct {
	m  *sock.Message
	b  *batchIn
	i  int
	ps *pullSet // a pull through a pull set: the answer goes in its answer
	id uint64   // ps's stream
}

func (s slot) ok() bool { return s.m != nil || s.b != nil || s.ps != nil }

// limit is the longest answer the slot takes.
func (s slot) limit() int {
	switch {
	case s.b != nil:
		return s.b.limit
	case s.ps != nil:
		return pullAnswerLimit
	}
	return maxFrame
}

// reply sends the answer, or puts it in its batch's or pull set's reply.
func (s slot) reply(l *listener, frame []byte) {
	switch {
	case s.b != nil:
		s.b.put(s.i, frame)
	case s.ps != nil:
		s.ps.put(s.id, frame)
	default:
		_ = l.s.ReplyOwned(s.m, frame)
	}
}

// release lets go of the frame the slot answers, once answered.
func (s slot) release() {
	if s.m != nil {
		s.m.Release()
	}
}

// batchIn is a batch of data frames received: its reply goes once every
// frame in it is answered. Each frame's stream answers it as it would
// the frame alone (at once, or when its handler reacts), within its
// share of the reply.
type batchIn struct {
	l     *listener
	m     *sock.Message
	ref   *frameRef // one hold for the reply, one per frame not answered
	limit int       // of each answer

	mu      sync.Mutex
	answers [][]byte
	streams []*sstream // of each frame, while it waits for its handler
	left    int
	at      time.Time   // arrival
	done    atomic.Bool // every frame answered (see batchHolds.settle)
}

// batchSlotLimit is the longest answer to a frame in a batch of n: a
// share of what one Homa message holds.
func batchSlotLimit(n int) int {
	return (maxFrame-batchHeaderLen)/n - batchEntryLen - respHeaderLen - 4096
}

// handleBatch takes a batch of data frames. It owns m.
func (l *listener) handleBatch(m *sock.Message) {
	s := l.srv
	frames, err := parseBatch(m.Data, kindBatchReq, make([][]byte, 0, maxBatchFrames))
	var reqs []streamReq
	if err == nil {
		reqs = make([]streamReq, len(frames))
		for i, f := range frames {
			if reqs[i], err = parseStreamReq(f); err != nil {
				break
			}
			if reqs[i].op != opData {
				err = fmt.Errorf("%w: stream op %d in a batch", errMalformed, reqs[i].op)
				break
			}
		}
	}
	if err != nil {
		s.stats.malformed.Add(1)
		s.stats.badBatches.Add(1)
		l.endFrame(m, status.New(codes.Internal, err.Error()))
		return
	}
	s.stats.batches.Add(1)
	s.stats.batchFrames.Add(uint64(len(reqs)))
	b := &batchIn{l: l, m: m, ref: newFrameRef(m), limit: batchSlotLimit(len(reqs)), answers: make([][]byte, len(reqs)), streams: make([]*sstream, len(reqs)), left: len(reqs), at: time.Now()}
	b.ref.n.Add(int32(len(reqs)) + 1) // and one until every frame is dispatched
	for i, req := range reqs {
		to := slot{b: b, i: i}
		ss := l.stream(streamKey{m.Peer, req.id})
		if ss == nil {
			// As for a data frame alone: the stream ended, its end
			// perhaps on its way in the answer to a pull.
			s.stats.staleFrames.Add(1)
			to.reply(l, endFrameBytes(nil))
			b.ref.release()
			continue
		}
		b.streams[i] = ss
		ss.frame(to, b.ref, req)
	}
	b.mu.Lock()
	waiting := b.left > 0
	b.mu.Unlock()
	if waiting {
		l.holds.add(heldFrame{at: b.at, b: b})
	}
	b.ref.release()
}

// put takes the answer to entry i, and sends the reply with the last.
func (b *batchIn) put(i int, frame []byte) {
	b.mu.Lock()
	b.answers[i] = frame
	b.left--
	var answers [][]byte // the last answer's: all of them
	if b.left == 0 {
		answers, b.answers = b.answers, nil
	}
	b.mu.Unlock()
	if answers == nil {
		return
	}
	b.done.Store(true)
	defer b.l.holds.settle()
	var resp []byte
	if n := batchLen(answers); n <= maxFrame {
		resp = appendBatchHeader(sock.NewBuffer(n)[:0], kindBatchResp, len(answers))
		for _, a := range answers {
			resp = appendBatchEntry(resp, a)
			sock.FreeBuffer(a)
		}
	} else {
		// Metadata beyond the share of each answer: the streams end.
		resp = endFrameBytes(status.New(codes.ResourceExhausted, "homagrpc: the answers to a batch do not fit in one message"))
	}
	_ = b.l.s.ReplyOwned(b.m, resp)
	b.ref.release()
}

// batchHold bounds how long the server holds a data frame for its
// handler's reaction (the handler's next messages, or its asking for
// more): past it, the frame is answered with what its stream has
// (credit), and what the handler says later goes in the answer to the
// pull. So a handler that takes a message and computes delays the other
// streams of its batch, and the client's next frames to the server (the
// client keeps one RPC of data frames in flight to it, and a second once
// the first is slow), by batchHold at most.
const batchHold = 2 * time.Millisecond

// heldFrame is a data frame held for its handler: a batch (b), or a
// frame alone (m) of ss, the seq-th it held so (see sstream.holdSeq).
type heldFrame struct {
	at  time.Time
	b   *batchIn
	ss  *sstream
	m   *sock.Message
	seq uint64
}

// isAnswered reports whether the frame has been answered: its hold has
// nothing left to do.
func (f heldFrame) isAnswered() bool {
	if f.b != nil {
		return f.b.done.Load()
	}
	return f.ss.holdsAnswered.Load() >= f.seq
}

// batchHolds are a listener's held data frames, in arrival order, and
// one timer for the first one's hold.
type batchHolds struct {
	mu    sync.Mutex
	q     []heldFrame
	timer *time.Timer
	armed bool
	fired int // expirations, for tests
}

// add queues a held frame until its hold ends.
func (h *batchHolds) add(f heldFrame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.q = append(h.q, f)
	if !h.armed {
		h.arm(f.at)
	}
}

// arm sets the timer for the hold of a frame that arrived at. The caller
// holds mu.
func (h *batchHolds) arm(at time.Time) {
	h.armed = true
	d := time.Until(at.Add(batchHold))
	if h.timer == nil {
		h.timer = time.AfterFunc(d, h.expire)
	} else {
		h.timer.Reset(d)
	}
}

// settleMax is the most held frames settle looks at: past it the
// frames come close together, and the timer's firing, once per
// batchHold, costs little against them.
const settleMax = 4

// settle stops the timer when every frame held has been answered before
// its hold ended, as a frame its handler reacts to at once is: frames
// coming now and then would otherwise each cost a timer firing (a
// thread wake-up on an idle server) batchHold later, for nothing.
func (h *batchHolds) settle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.q) == 0 || len(h.q) > settleMax || !h.armed || h.timer == nil {
		return
	}
	for _, f := range h.q {
		if !f.isAnswered() {
			return
		}
	}
	if h.timer.Stop() {
		h.armed = false
		clear(h.q)
		h.q = h.q[:0]
	}
}

// stop stops the timer for good, once the listener's goroutines ended.
func (h *batchHolds) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
	}
	h.armed = true // never again
	h.q = nil
}

// expire answers the frames whose hold ended.
func (h *batchHolds) expire() {
	now := time.Now()
	h.mu.Lock()
	h.fired++
	n := 0
	for n < len(h.q) && !now.Before(h.q[n].at.Add(batchHold)) {
		n++
	}
	due := make([]heldFrame, n)
	copy(due, h.q)
	rest := copy(h.q, h.q[n:])
	clear(h.q[rest:])
	h.q = h.q[:rest]
	h.armed = false
	if len(h.q) > 0 {
		h.arm(h.q[0].at)
	}
	h.mu.Unlock()
	for _, f := range due {
		if f.b != nil {
			f.b.release()
		} else {
			f.ss.release(slot{m: f.m})
		}
	}
}

// release answers the frames of b still held by their streams.
func (b *batchIn) release() {
	b.mu.Lock()
	var held []int
	for i, a := range b.answers {
		if a == nil && b.streams[i] != nil {
			held = append(held, i)
		}
	}
	b.mu.Unlock()
	for _, i := range held {
		b.streams[i].release(slot{b: b, i: i})
	}
}

// release answers the data frame held in to, if the stream still holds
// it.
func (ss *sstream) release(to slot) {
	ss.mu.Lock()
	var a answer
	if ss.held == to {
		a = ss.flushHeld()
	}
	ss.mu.Unlock()
	ss.send(a)
}
