package homagrpc

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// muxInFlight is how many Homa RPCs carrying data frames a ClientConn
// keeps in flight to one server at most. A data frame ready when none is
// goes at once, alone; one ready while one is waits for it to return,
// and goes with every other frame that waits in one batch, unless the
// RPC in flight is slow (see Slow batches): then the frames waiting go
// in a second. Nothing waits for frames to come.
const muxInFlight = 2

// Slow batches. The fewer RPCs in flight, the more frames each batch
// carries while they travel, and the less each message costs: with one
// in flight rather than two, 1 KB messages on 4 x 32 streams went 17%
// faster for 16% less CPU per message (six alternated runs each,
// p=0.002). But the server answers a batch once every frame in it is
// answered, and holds a frame up to batchHold for its handler's reaction,
// so one stream whose handler computes would hold every other stream's
// frames to that server as long. So a second RPC goes once the one in
// flight has been out twice as long as the mux's RPCs have taken lately
// (at least muxSlowMin, at most batchHold): a batch that is slow is most
// likely held, and the frames waiting should not wait for it. Against
// two in flight from the start, 1 KB messages on 4 x 32 streams went
// 8.7% faster (p=0.009) for 7.8% less CPU per message (p=0.030), six
// alternated runs each.
const muxSlowMin = 100 * time.Microsecond

// Gathering. A batch's answers wake its streams, whose next frames come
// at once, one stream after another: the first found the mux with no RPC
// in flight and went alone, and the others waited for it to return, so
// batches alternated between one frame and all the rest. The goroutine
// that delivers a batch's answers now yields its processor once
// (runtime.Gosched) before it counts the RPC returned: the streams it
// woke, queued on its processor, run first and put their frames in the
// queue, which then goes as one batch. Nothing waits for a frame that is
// not ready: a stream that does not answer at once is not waited for,
// and a lone stream's frames (batches of one) are not delayed. 1 KB
// messages on 4 x 32 streams between two processes, ten alternated
// pairs with --rounds 4: Homa RPCs per message 0.065 -> 0.055
// (BenchmarkStreamParallel), CPU per message 13.2-15.3 -> 11.9-14.3 µs,
// the median of the rounds' ratios to gRPC-go 1.50-1.76 (mean 1.59) ->
// 1.63-1.89 (mean 1.77), higher in nine pairs of ten.

// mux sends the data frames of a ClientConn's streams to one server.
type mux struct {
	c      *ClientConn
	target netip.AddrPort

	mu    sync.Mutex
	busy  int                    // RPCs in flight
	sent  [muxInFlight]time.Time // when they went; zero for none
	rtt   time.Duration          // how long the mux's RPCs have taken lately
	timer *time.Timer            // sends the frames waiting once the RPC in flight is slow
	queue []*pending             // frames waiting, at most one per stream
	// alone: the server does not take batches (it answered one as an
	// unknown request): every frame goes at once, alone.
	alone bool
}

// pending is a frame sent, or waiting to go in a batch, and its answer.
type pending struct {
	frame []byte    // waiting: the frame
	id    uint64    // sent alone: its RPC, awaited by the stream
	mx    *mux      // sent alone by mx: mx.finished when it returns
	at    time.Time // when it went (mx set)

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

// toServer is what a ClientConn's streams to one server share: the mux
// of their data frames and the pull mux of their pulls.
type toServer struct {
	mux   mux
	pulls pullMux
}

// to returns what the streams to the server at target share.
func (c *ClientConn) to(target netip.AddrPort) *toServer {
	c.mmu.Lock()
	defer c.mmu.Unlock()
	t := c.servers[target]
	if t == nil {
		if c.servers == nil {
			c.servers = make(map[netip.AddrPort]*toServer)
		}
		t = &toServer{
			mux:   mux{c: c, target: target},
			pulls: pullMux{c: c, target: target, id: c.newID(), waiting: make(map[uint64]*pending), credits: make(map[uint64]uint64)},
		}
		c.servers[target] = t
	}
	return t
}

// muxTo returns the mux of the server at target.
func (c *ClientConn) muxTo(target netip.AddrPort) *mux { return &c.to(target).mux }

// send sends a data frame at once if the mux has no RPC in flight to
// the server, or only a slow one, else queues it for the next batch. It
// takes frame over.
func (mx *mux) send(frame []byte) (*pending, error) {
	mx.mu.Lock()
	if mx.alone {
		mx.mu.Unlock()
		id, err := mx.c.s.SendOwned(mx.target, frame, 0)
		return &pending{id: id}, err
	}
	now := time.Now()
	if mx.busy == 0 || mx.busy < muxInFlight && mx.slow(now) <= 0 {
		mx.start(now)
		mx.mu.Unlock()
		id, err := mx.c.s.SendOwned(mx.target, frame, 0)
		if err != nil {
			mx.finished(now)
			return nil, err
		}
		return &pending{id: id, mx: mx, at: now}, nil
	}
	p := &pending{frame: frame, done: make(chan struct{})}
	mx.queue = append(mx.queue, p)
	if mx.busy < muxInFlight && len(mx.queue) == 1 {
		mx.armLocked(mx.slow(now))
	}
	mx.mu.Unlock()
	return p, nil
}

// slow is how long until the RPCs in flight are slow: the oldest has
// been out twice as long as the mux's RPCs take (see Slow batches). The
// caller holds mu.
func (mx *mux) slow(now time.Time) time.Duration {
	oldest := now
	for _, t := range mx.sent {
		if !t.IsZero() && t.Before(oldest) {
			oldest = t
		}
	}
	return min(max(2*mx.rtt, muxSlowMin), batchHold) - now.Sub(oldest)
}

// start counts an RPC sent at now. The caller holds mu.
func (mx *mux) start(now time.Time) {
	mx.busy++
	for i := range mx.sent {
		if mx.sent[i].IsZero() {
			mx.sent[i] = now
			return
		}
	}
}

// armLocked sets the timer that sends the frames waiting once the RPC in
// flight is slow, d from now. The caller holds mu.
func (mx *mux) armLocked(d time.Duration) {
	if mx.timer == nil {
		mx.timer = time.AfterFunc(max(d, 0), mx.slowFired)
		return
	}
	mx.timer.Reset(max(d, 0))
}

// slowFired sends the frames waiting in a second RPC if the one in
// flight is slow by now.
func (mx *mux) slowFired() {
	mx.mu.Lock()
	if len(mx.queue) == 0 || mx.busy == 0 || mx.busy >= muxInFlight {
		mx.mu.Unlock()
		return
	}
	if d := mx.slow(time.Now()); d > 0 {
		mx.armLocked(d)
		mx.mu.Unlock()
		return
	}
	mx.sendQueued()
}

// finished says that an RPC of the mux sent at at returned: the frames
// waiting go, as many as a batch takes.
func (mx *mux) finished(at time.Time) {
	mx.mu.Lock()
	mx.busy--
	now := time.Now()
	for i := range mx.sent {
		if mx.sent[i].Equal(at) {
			mx.sent[i] = time.Time{}
			break
		}
	}
	mx.rtt += (now.Sub(at) - mx.rtt) / 8
	if len(mx.queue) == 0 {
		mx.mu.Unlock()
		return
	}
	mx.sendQueued()
}

// sendQueued sends the frames waiting, as many as a batch takes, in one
// RPC. The caller holds mu, which sendQueued releases.
func (mx *mux) sendQueued() {
	if !mx.c.track() {
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
	now := time.Now()
	mx.start(now)
	if rest > 0 && mx.busy < muxInFlight {
		mx.armLocked(mx.slow(now)) // what a batch did not take
	}
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
		mx.finished(now)
		return
	}
	go mx.await(id, ps, now)
}

// await awaits a batch's answer (or that of a frame that waited alone)
// and hands each stream its share.
func (mx *mux) await(id uint64, ps []*pending, at time.Time) {
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
	if len(ps) > 1 {
		// Let the streams just answered run first (see Gathering).
		runtime.Gosched()
	}
	mx.finished(at)
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
			p.mx.finished(p.at)
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
			p.mx.finished(p.at)
		}
		return
	}
	if !p.state.CompareAndSwap(pendingWaiting, pendingAbandoned) && p.state.Load() == pendingDelivered {
		p.ref.release()
	}
}
