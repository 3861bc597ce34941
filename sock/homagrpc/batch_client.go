package homagrpc

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/homa-go/homa/sock"
)

// muxInFlight is how many Homa RPCs carrying data frames a ClientConn
// keeps in flight to one server. A data frame ready when fewer are goes
// at once, alone; one ready while as many are in flight waits for the
// first of them to return, and goes with every other frame that waits in
// one batch. No frame waits for a timer or for frames to come.
const muxInFlight = 2

// mux sends the data frames of a ClientConn's streams to one server.
type mux struct {
	c      *ClientConn
	target netip.AddrPort

	mu    sync.Mutex
	busy  int        // RPCs in flight
	queue []*pending // frames waiting, at most one per stream
	// alone: the server does not take batches (it answered one as an
	// unknown request): every frame goes at once, alone.
	alone bool
}

// pending is a frame sent, or waiting to go in a batch, and its answer.
type pending struct {
	frame []byte // waiting: the frame
	id    uint64 // sent alone: its RPC, awaited by the stream
	mx    *mux   // sent alone by mx: mx.finished when it returns

	// A frame that went in a batch: its answer, set before done closes.
	done  chan struct{}
	data  []byte
	ref   *frameRef // holds data, for the stream
	err   error
	state atomic.Int32 // pendingWaiting, pendingDelivered, pendingAbandoned
}

const (
	pendingWaiting = iota
	pendingDelivered
	pendingAbandoned
)

// muxTo returns the mux of the server at target.
func (c *ClientConn) muxTo(target netip.AddrPort) *mux {
	c.mmu.Lock()
	defer c.mmu.Unlock()
	mx := c.muxes[target]
	if mx == nil {
		if c.muxes == nil {
			c.muxes = make(map[netip.AddrPort]*mux)
		}
		mx = &mux{c: c, target: target}
		c.muxes[target] = mx
	}
	return mx
}

// send sends a data frame at once if the server has fewer than
// muxInFlight RPCs from the mux in flight, else queues it for the next
// batch. It takes frame over.
func (mx *mux) send(frame []byte) (*pending, error) {
	mx.mu.Lock()
	if mx.alone {
		mx.mu.Unlock()
		id, err := mx.c.s.SendOwned(mx.target, frame, 0)
		return &pending{id: id}, err
	}
	if mx.busy < muxInFlight {
		mx.busy++
		mx.mu.Unlock()
		id, err := mx.c.s.SendOwned(mx.target, frame, 0)
		if err != nil {
			mx.finished()
			return nil, err
		}
		return &pending{id: id, mx: mx}, nil
	}
	p := &pending{frame: frame, done: make(chan struct{})}
	mx.queue = append(mx.queue, p)
	mx.mu.Unlock()
	return p, nil
}

// finished says that an RPC of the mux returned: the frames waiting go,
// as many as a batch takes.
func (mx *mux) finished() {
	mx.mu.Lock()
	mx.busy--
	if len(mx.queue) == 0 || !mx.c.track() {
		mx.mu.Unlock()
		return
	}
	n, size := 0, batchHeaderLen
	for n < len(mx.queue) && n < maxBatchFrames {
		size += batchEntryLen + len(mx.queue[n].frame)
		if n > 0 && size > maxFrame {
			break
		}
		n++
	}
	ps := make([]*pending, n)
	copy(ps, mx.queue)
	rest := copy(mx.queue, mx.queue[n:])
	clear(mx.queue[rest:])
	mx.queue = mx.queue[:rest]
	mx.busy++
	mx.mu.Unlock()
	msg := ps[0].frame
	if n > 1 {
		// The frames stay with ps until answered, in case the server
		// does not take batches.
		msg = appendBatchHeader(sock.NewBuffer(size)[:0], kindBatchReq, n)
		for _, p := range ps {
			msg = appendBatchEntry(msg, p.frame)
		}
	} else {
		ps[0].frame = nil // the socket's now
	}
	id, err := mx.c.s.SendOwned(mx.target, msg, 0)
	if err != nil {
		deliver(ps, nil, err)
		mx.c.wg.Done()
		mx.finished()
		return
	}
	go mx.await(id, ps)
}

// await awaits a batch's answer (or that of a frame that waited alone)
// and hands each stream its share.
func (mx *mux) await(id uint64, ps []*pending) {
	defer mx.c.wg.Done()
	m, err := mx.c.s.Recv(mx.c.closeCtx, id)
	if err != nil {
		_ = mx.c.s.Abort(id)
	} else if len(ps) > 1 && m.Err == nil && len(m.Data) > 1 && m.Data[1] == kindResponse {
		// A server of the version before batches refused the batch
		// as an unknown request: it took none of the frames. They
		// go again, alone, and so does every frame after them.
		m.Release()
		mx.mu.Lock()
		mx.alone = true
		ps = append(ps, mx.queue...) // the frames waiting go alone too
		mx.queue = nil
		mx.mu.Unlock()
		mx.resend(ps)
		return
	}
	for _, p := range ps {
		if p.frame != nil { // copied into the batch, which is answered
			sock.FreeBuffer(p.frame)
			p.frame = nil
		}
	}
	deliver(ps, m, err)
	mx.finished()
}

// resend sends the frames of a batch refused, and those waiting, alone,
// each awaited here, once the mux sends every frame alone.
func (mx *mux) resend(ps []*pending) {
	for _, p := range ps {
		frame := p.frame
		p.frame = nil
		id, err := mx.c.s.SendOwned(mx.target, frame, 0)
		var m *sock.Message
		if err == nil {
			if m, err = mx.c.s.Recv(mx.c.closeCtx, id); err != nil {
				_ = mx.c.s.Abort(id)
			}
		}
		deliver([]*pending{p}, m, err)
	}
}

// deliver hands the answer m (or err) to the frames ps it answers.
func deliver(ps []*pending, m *sock.Message, err error) {
	if err == nil && m.Err != nil {
		err = m.Err
		m.Release()
	}
	var parts [][]byte
	if err == nil {
		if len(m.Data) > 1 && m.Data[1] == kindBatchResp {
			parts, err = parseBatch(m.Data, kindBatchResp, make([][]byte, 0, len(ps)))
			if err == nil && len(parts) != len(ps) {
				err = fmt.Errorf("%w: %d answers to a batch of %d", errMalformed, len(parts), len(ps))
			}
		} else {
			// One answer for all: that to a frame sent alone, or a
			// batch refused.
			for range ps {
				parts = append(parts, m.Data)
			}
		}
		if err != nil {
			m.Release()
		}
	}
	if err != nil {
		for _, p := range ps {
			p.put(nil, nil, err)
		}
		return
	}
	ref := newFrameRef(m)
	ref.n.Add(int32(len(ps) - 1))
	for i, p := range ps {
		p.put(parts[i], ref, nil)
	}
}

// put hands over a batched frame's answer, which holds one hold on ref.
func (p *pending) put(data []byte, ref *frameRef, err error) {
	p.data, p.ref, p.err = data, ref, err
	if p.state.CompareAndSwap(pendingWaiting, pendingDelivered) {
		close(p.done)
	} else {
		ref.release()
	}
}

// wait waits for the answer to p, within ctx; on return the caller owns
// the hold on the answer's message.
func (p *pending) wait(ctx context.Context, s *sock.Socket) ([]byte, *frameRef, error) {
	if p.id != 0 {
		m, err := s.Recv(ctx, p.id)
		if err != nil {
			_ = s.Abort(p.id)
		} else if m.Err != nil {
			err = m.Err
			m.Release()
		}
		if p.mx != nil {
			p.mx.finished()
		}
		if err != nil {
			return nil, nil, err
		}
		return m.Data, newFrameRef(m), nil
	}
	select {
	case <-p.done:
		return p.data, p.ref, p.err
	case <-ctx.Done():
		p.drop(s)
		return nil, nil, ctx.Err()
	}
}

// drop gives up p's answer, whether it came or not.
func (p *pending) drop(s *sock.Socket) {
	if p.id != 0 {
		_ = s.Abort(p.id)
		if p.mx != nil {
			p.mx.finished()
		}
		return
	}
	if !p.state.CompareAndSwap(pendingWaiting, pendingAbandoned) && p.state.Load() == pendingDelivered {
		p.ref.release()
	}
}
