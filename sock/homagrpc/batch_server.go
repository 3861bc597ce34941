package homagrpc

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// slot is where the answer to a stream frame goes: the reply to the Homa
// request that carried the frame alone (m), or entry i of the reply to a
// batch (b).
type slot struct {
	m *sock.Message
	b *batchIn
	i int
}

func (s slot) ok() bool { return s.m != nil || s.b != nil }

// limit is the longest answer the slot takes.
func (s slot) limit() int {
	if s.b == nil {
		return maxFrame
	}
	return s.b.limit
}

// reply sends the answer, or puts it in its batch's reply.
func (s slot) reply(l *listener, frame []byte) {
	if s.b != nil {
		s.b.put(s.i, frame)
		return
	}
	_ = l.s.ReplyOwned(s.m, frame)
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
	left    int
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
	b := &batchIn{l: l, m: m, ref: newFrameRef(m), limit: batchSlotLimit(len(reqs)), answers: make([][]byte, len(reqs)), left: len(reqs)}
	b.ref.n.Add(int32(len(reqs)))
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
		ss.frame(to, b.ref, req)
	}
}

// put takes the answer to entry i, and sends the reply with the last.
func (b *batchIn) put(i int, frame []byte) {
	b.mu.Lock()
	b.answers[i] = frame
	b.left--
	last := b.left == 0
	b.mu.Unlock()
	if !last {
		return
	}
	var resp []byte
	if n := batchLen(b.answers); n <= maxFrame {
		resp = appendBatchHeader(make([]byte, 0, n), kindBatchResp, len(b.answers))
		for _, a := range b.answers {
			resp = appendBatchEntry(resp, a)
		}
	} else {
		// Metadata beyond the share of each answer: the streams end.
		resp = endFrameBytes(status.New(codes.ResourceExhausted, "homagrpc: the answers to a batch do not fit in one message"))
	}
	b.answers = nil
	_ = b.l.s.ReplyOwned(b.m, resp)
	b.ref.release()
}
