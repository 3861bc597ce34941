package homagrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// clientStream is one stream of a ClientConn: a sender goroutine sends
// the open frame and then data frames (messages, half-close, credit),
// one at a time; a puller keeps the stream pulled at the server, through
// the ClientConn's pull sets (pullMux). The
// answers to either bring the server's header, messages, credit and, at
// the end, status and trailer, numbered so that they are taken in the
// server's order.
type clientStream struct {
	c      *ClientConn
	target netip.AddrPort
	desc   *grpc.StreamDesc
	ci     callInfo
	comp   encoding.Compressor // the messages sent
	// recvComp is the compressor of the messages received: comp, unless
	// the server's header names another.
	recvComp encoding.Compressor
	id       uint64
	ctx      context.Context // the caller's
	// rpcCtx ends when the stream does; the frames' RPCs wait in it.
	rpcCtx context.Context
	endRPC context.CancelFunc
	open   []byte // the open frame's request header, before its chunks
	stats  *callStats
	stop   func() bool // releases the caller's context's AfterFunc

	mu        sync.Mutex
	in        inQueue
	out       outQueue
	started   bool
	openSent  bool
	halfClose bool // CloseSend, or the one message of a call that does not stream requests
	halfSent  bool
	sendEnded bool     // the server takes no more messages
	opened    bool     // the open frame's answer arrived
	busy      bool     // a data frame is in flight
	handoff   *pending // a frame SendMsg sent, for the sender to await
	header    metadata.MD
	gotHeader bool
	trailer   metadata.MD
	final     error // nil: OK
	done      bool

	endReported bool
	nextSeq     uint32     // of the next answer to take
	early       *earlyResp // an answer that came before the one due
	inFlight    int        // frames sent and not answered
	lost        error      // the server no longer knows the stream

	headerCh chan struct{} // closed when the header or the end arrives
	doneCh   chan struct{} // closed at the end
	recvSig  chan struct{} // a message or the end arrived
	sendSig  chan struct{} // credit opened, or the sending ended
	work     chan struct{} // something for the sender
	gapSig   chan struct{} // the answer missing came
	wg       sync.WaitGroup
}

// newClientStream prepares a stream; nothing is sent before the first
// SendMsg, CloseSend, RecvMsg or Header.
func (c *ClientConn) newClientStream(ctx context.Context, desc *grpc.StreamDesc, method string, ci *callInfo, target netip.AddrPort) (*clientStream, error) {
	comp, err := compressor(ci.compressor)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return nil, transportError(context.DeadlineExceeded)
		}
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	if len(ci.creds) > 0 {
		if md, err = addCreds(ctx, md, ci.creds, method); err != nil {
			return nil, err
		}
	}
	cs := &clientStream{
		c: c, target: target, desc: desc, ci: *ci, comp: comp, recvComp: comp, ctx: ctx,
		id:       c.newID(),
		in:       newInQueue(c.opts.window(), recvLimit(ci.maxRecv), 0, nil),
		out:      outQueue{limit: initialCredit},
		nextSeq:  1,
		headerCh: make(chan struct{}), doneCh: make(chan struct{}),
		recvSig: make(chan struct{}, 1), sendSig: make(chan struct{}, 1), work: make(chan struct{}, 1), gapSig: make(chan struct{}, 1),
	}
	cs.in.limit = cs.in.grant()
	cs.in.told = cs.in.limit
	cs.open, err = appendRequestHead(nil, reqHead{codec: ci.subtype, comp: ci.compressor, method: method, timeout: timeout, md: md, accept: c.acceptFor(ci.compressor)})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	cs.rpcCtx, cs.endRPC = context.WithCancel(c.closeCtx)
	cs.stop = context.AfterFunc(ctx, func() { cs.abandon(transportError(ctx.Err())) })
	return cs, nil
}

// start starts the sender, once. The caller holds mu.
func (cs *clientStream) start() {
	if cs.started || cs.done {
		return
	}
	cs.started = true
	cs.wg.Add(1)
	go cs.sendLoop()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sendLoop sends the open frame, then data frames whenever there is
// something to send, and starts the puller once the server knows the
// stream.
func (cs *clientStream) sendLoop() {
	defer cs.wg.Done()
	for {
		cs.mu.Lock()
		for !cs.done && cs.handoff == nil && (cs.busy || !cs.hasWork()) {
			cs.mu.Unlock()
			select {
			case <-cs.work:
			case <-cs.doneCh:
			}
			cs.mu.Lock()
		}
		if cs.done {
			cs.mu.Unlock()
			return
		}
		opening := false
		p := cs.handoff
		var err error
		if p != nil {
			cs.handoff = nil // a frame SendMsg sent: just await its answer
		} else {
			opening = !cs.openSent
			frame := cs.buildFrame()
			cs.busy = true
			cs.inFlight++
			p, err = cs.send(frame, opening)
		}
		cs.mu.Unlock()
		var data []byte
		var ref *frameRef
		if err == nil {
			data, ref, err = p.wait(cs.rpcCtx, cs.c.s)
		}
		if err != nil {
			cs.fail(err)
			return
		}
		cs.onAnswer(data, ref)
		cs.mu.Lock()
		cs.busy = false
		cs.opened = cs.opened || opening
		cs.mu.Unlock()
		if opening {
			cs.wg.Add(1)
			go cs.pullLoop()
		}
	}
}

// sendNow sends the next data frame from the caller's goroutine when no
// frame is in flight, sparing the hand-off to the sender, which then
// only awaits the answer. The caller holds mu.
func (cs *clientStream) sendNow() {
	if !cs.opened || cs.busy || cs.done || cs.handoff != nil || !cs.hasWork() {
		return
	}
	frame := cs.buildFrame()
	cs.inFlight++
	p, err := cs.send(frame, false)
	if err != nil {
		// Let the sender meet the error; what the frame held is lost
		// with the stream.
		cs.fail0(err)
		return
	}
	cs.busy, cs.handoff = true, p
}

// hasWork reports whether the sender has a frame to send. The caller
// holds mu.
func (cs *clientStream) hasWork() bool {
	if !cs.openSent {
		return true
	}
	if cs.sendEnded || cs.early != nil {
		return false // no frame while an answer is missing
	}
	return cs.out.ready() || cs.halfClose && !cs.halfSent && cs.out.empty() || cs.in.due()
}

// buildFrame builds the next frame for the sender. An open that
// half-closes is also the stream's first pull. The caller holds mu.
func (cs *clientStream) buildFrame() []byte {
	op, hdr := byte(opData), 0
	if !cs.openSent {
		op, hdr = opOpen, len(cs.open)
	}
	// From the engine's pool: the socket takes it over (SendOwned) and
	// recycles it, or a batch copies it and the mux gives it back.
	b := sock.NewBuffer(min(sreqHeaderLen+hdr+cs.out.need(), maxFrame))[:sreqHeaderLen]
	if op == opOpen {
		b = append(b, cs.open...)
		cs.openSent = true
	}
	sent := cs.out.sent
	b = cs.out.fill(b, maxFrame)
	if cs.out.sent != sent || op == opOpen {
		signal(cs.sendSig)
	}
	flags := byte(0)
	if cs.halfClose && cs.out.empty() {
		flags |= sreqFlagHalfClose
		cs.halfSent = true
		if op == opOpen {
			flags |= sreqFlagPull
		}
	}
	appendStreamReqHeader(b[:0], op, flags, cs.id, cs.in.tell())
	return b
}

// pullLoop keeps a pull at the server until the stream ends.
func (cs *clientStream) pullLoop() {
	defer cs.wg.Done()
	for {
		cs.mu.Lock()
		for (cs.early != nil || cs.sendEnded) && !cs.done {
			// An answer is missing: it comes before another frame
			// goes, so that at most one waits out of order. Or the
			// server no longer knows the stream (an answer numbered
			// 0): its end is in an answer still in flight, or it ends
			// when they are all answered (lost); another pull would
			// only be told so again. The answer awaited may be that of a
			// frame SendMsg sent, which nobody awaits yet (the caller
			// has not called RecvMsg): await it here.
			if cs.takeHandoff() {
				continue
			}
			cs.mu.Unlock()
			select {
			case <-cs.gapSig:
			case <-cs.doneCh:
			}
			cs.mu.Lock()
		}
		if cs.done {
			cs.mu.Unlock()
			return
		}
		credit := cs.in.tell()
		cs.inFlight++
		cs.mu.Unlock()
		// Through the ClientConn's pull set to the server, or alone
		// when the server takes none.
		data, ref, err := cs.c.pullsTo(cs.target).pull(cs.rpcCtx, cs.id, credit)
		if errors.Is(err, errPullAlone) {
			frame := appendStreamReqHeader(make([]byte, 0, sreqHeaderLen), opPull, 0, cs.id, credit)
			var id uint64
			if id, err = cs.c.s.SendOwned(cs.target, frame, 0); err == nil {
				data, ref, err = (&pending{id: id}).wait(cs.rpcCtx, cs.c.s)
			}
		}
		if err != nil {
			cs.fail(err)
			return
		}
		cs.onAnswer(data, ref)
	}
}

// send sends a frame: alone (the open), or data through the server's
// mux, which may batch it with other streams' frames.
func (cs *clientStream) send(frame []byte, alone bool) (*pending, error) {
	if alone {
		id, err := cs.c.s.SendOwned(cs.target, frame, 0)
		return &pending{id: id}, err
	}
	return cs.c.muxTo(cs.target).send(frame)
}

// takeHandoff awaits, if there is one, the answer of a data frame
// SendMsg sent that nobody awaits yet, and reports whether it did. The
// caller holds mu; takeHandoff releases it while it waits.
func (cs *clientStream) takeHandoff() bool {
	p := cs.handoff
	if p == nil {
		return false
	}
	cs.handoff = nil
	cs.mu.Unlock()
	cs.awaitHandoff(p)
	cs.mu.Lock()
	return true
}

// awaitHandoff awaits the answer of the data frame p that SendMsg
// sent, for a goroutine that took it from cs.handoff.
func (cs *clientStream) awaitHandoff(p *pending) {
	data, ref, err := p.wait(cs.rpcCtx, cs.c.s)
	if err != nil {
		cs.fail(err)
	} else {
		cs.onAnswer(data, ref)
	}
	cs.mu.Lock()
	cs.busy = false
	cs.mu.Unlock()
	signal(cs.work)
}

// earlyResp is an answer that came before the one due, kept with its
// message.
type earlyResp struct {
	r   streamResp
	ref *frameRef
}

// onAnswer takes the answer to a frame of the stream, in the server's
// order: header, messages, credit, end. It owns a hold on ref, whose
// message data is in and the messages in it alias.
func (cs *clientStream) onAnswer(data []byte, ref *frameRef) {
	defer ref.release()
	r, err := parseStreamResp(data)
	if err != nil {
		cs.fail(err)
		return
	}
	cs.mu.Lock()
	cs.inFlight--
	switch {
	case cs.done:
	case r.seq == 0:
		// The server does not know the stream: it ended there, and
		// takes no more messages. Its end may still be on its way in
		// the answer to the other frame in flight; a status here
		// ends the stream only when none is.
		cs.sendEnded = true
		if r.flags&srespFlagEnd != 0 && r.resp.code != 0 {
			cs.lost = responseStatus(r.resp).Err()
		}
	case r.seq != cs.nextSeq:
		if cs.early != nil || r.seq < cs.nextSeq {
			cs.fail0(fmt.Errorf("%w: stream response %d while %d is due", errMalformed, r.seq, cs.nextSeq))
			break
		}
		ref.n.Add(1)
		cs.early = &earlyResp{r, ref}
	default:
		err = cs.take(r, ref)
		for err == nil && !cs.done && cs.early != nil && cs.early.r.seq == cs.nextSeq {
			e := cs.early
			cs.early = nil
			err = cs.take(e.r, e.ref)
			e.ref.release()
		}
	}
	if !cs.done && cs.lost != nil && cs.inFlight == 0 {
		cs.final = cs.lost
		cs.finish()
	}
	cs.mu.Unlock()
	if err != nil {
		cs.abandon(err)
	}
	signal(cs.recvSig)
	signal(cs.sendSig)
	signal(cs.work)
	signal(cs.gapSig)
}

// take takes the answer due. The caller holds mu.
func (cs *clientStream) take(r streamResp, ref *frameRef) error {
	cs.nextSeq++
	cs.out.setLimit(r.credit)
	if r.flags&srespFlagHeader != 0 && !cs.gotHeader {
		cs.header, cs.gotHeader = parseMD(r.resp.header, r.resp.nHeader), true
		var err error
		cs.recvComp, err = recvCompressor(cs.header, cs.comp)
		close(cs.headerCh)
		if err != nil {
			return err
		}
		if cs.stats != nil {
			cs.stats.inHeader(cs.header, true)
		}
	}
	if err := cs.in.add(r.resp.payload, ref); err != nil {
		return err
	}
	if r.flags&srespFlagEnd != 0 {
		cs.trailer = parseMD(r.resp.trailer, r.resp.nTrailer)
		if r.resp.code != 0 {
			cs.final = responseStatus(r.resp).Err()
		}
		cs.finish()
	}
	return nil
}

// finish ends the stream. The caller holds mu.
func (cs *clientStream) finish() {
	if cs.done {
		return
	}
	cs.done = true
	if !cs.gotHeader {
		close(cs.headerCh)
	}
	close(cs.doneCh)
	cs.endRPC()
	cs.stop()
	if p := cs.handoff; p != nil {
		// The answer of a frame SendMsg sent, which nobody awaits now:
		// the socket forgets it instead of keeping it for a Recv.
		cs.handoff = nil
		p.drop(cs.c.s)
	}
}

// reportEnd reports the end to the stats handlers once the caller sees
// it (RecvMsg returns it, or the caller gave up), as grpc-go does. The
// caller holds mu.
func (cs *clientStream) reportEnd() {
	if cs.stats != nil && !cs.endReported {
		cs.endReported = true
		cs.stats.end(cs.final, cs.trailer)
	}
}

// fail ends the stream with a transport failure.
func (cs *clientStream) fail(err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.fail0(err)
}

// fail0 is fail for a caller that holds mu.
func (cs *clientStream) fail0(err error) {
	if cs.done {
		return
	}
	if cs.c.closed.Load() {
		cs.final = failure(codes.Canceled, err, "homagrpc: the client connection is closing")
	} else {
		cs.final = transportError(err)
	}
	cs.finish()
}

// abandon ends the stream with err (the caller's context ended, or a
// message broke a limit) and tells the server, so that the handler's
// context ends too.
func (cs *clientStream) abandon(err error) {
	cs.mu.Lock()
	if cs.done {
		cs.mu.Unlock()
		return
	}
	cs.final = err
	opened := cs.openSent
	cs.finish()
	cs.reportEnd()
	cs.mu.Unlock()
	// An expired deadline needs no word: the server's copy of it ends
	// the handler's context too.
	if opened && !errors.Is(err, context.DeadlineExceeded) {
		cs.c.sendCancel(cs.target, cs.id)
	}
}

func (cs *clientStream) Context() context.Context { return cs.ctx }

func (cs *clientStream) Header() (metadata.MD, error) {
	cs.mu.Lock()
	cs.start()
	cs.mu.Unlock()
	<-cs.headerCh
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.gotHeader && cs.final != nil {
		return nil, cs.final
	}
	return cs.header, nil
}

func (cs *clientStream) Trailer() metadata.MD {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.trailer
}

func (cs *clientStream) CloseSend() error {
	cs.mu.Lock()
	cs.halfClose = true
	cs.start()
	cs.mu.Unlock()
	signal(cs.work)
	return nil
}

// SendMsg queues m for the sender; it waits while the server's credit
// is used up. After the end it returns io.EOF, the status coming from
// RecvMsg, as in grpc-go.
func (cs *clientStream) SendMsg(m any) error {
	data, buf, err := encodeMsg(cs.ci.codec, cs.comp, m, cs.ci.maxSend)
	if err != nil {
		return err
	}
	cs.mu.Lock()
	if cs.halfClose && cs.desc.ClientStreams {
		cs.mu.Unlock()
		return status.Error(codes.Internal, "SendMsg called after CloseSend")
	}
	cs.start()
	for cs.out.full() && !cs.done && !cs.sendEnded {
		cs.mu.Unlock()
		select {
		case <-cs.sendSig:
		case <-cs.doneCh:
		}
		cs.mu.Lock()
	}
	if cs.done || cs.sendEnded || cs.halfClose {
		cs.mu.Unlock()
		return io.EOF
	}
	cs.out.push(data, cs.comp != nil, buf)
	if !cs.desc.ClientStreams {
		cs.halfClose = true
	}
	if cs.stats != nil {
		cs.stats.outPayload(m, data)
	}
	// A frame sent here is awaited by RecvMsg when it comes first, else
	// by the sender, woken here. (Leaving it to RecvMsg alone spares
	// that wake-up, but made one stream's ping-pong 10 - 15% slower
	// without polling: see docs/performance.md, 2026-11-28.)
	cs.sendNow()
	cs.mu.Unlock()
	signal(cs.work)
	return nil
}

// RecvMsg waits for the next message. At the end it returns io.EOF for
// status OK, otherwise the status error.
func (cs *clientStream) RecvMsg(m any) error {
	cs.mu.Lock()
	cs.start()
	msg, err := cs.next()
	if err != nil {
		cs.mu.Unlock()
		return err
	}
	if cs.in.due() {
		signal(cs.work)
	}
	rc := cs.recvComp
	cs.mu.Unlock()
	err = decodeMsg(cs.ci.codec, rc, msg, recvLimit(cs.ci.maxRecv), m)
	msg.done()
	if err != nil {
		cs.abandon(err)
		return err
	}
	if cs.stats != nil {
		cs.stats.inPayload(m, msg.data)
	}
	if cs.desc.ServerStreams {
		return nil
	}
	// One response: wait for the end, so that the status and trailer
	// are known when RecvMsg returns, as in grpc-go.
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, err := cs.next(); err != io.EOF {
		if err == nil {
			err = status.Error(codes.Internal, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message")
			cs.mu.Unlock()
			cs.abandon(err)
			cs.mu.Lock()
		}
		return err
	}
	return nil
}

// next waits for a message or the end. The caller holds mu, which next
// releases while it waits.
func (cs *clientStream) next() (inMsg, error) {
	for {
		if msg, ok := cs.in.take(); ok {
			return msg, nil
		}
		if cs.done {
			cs.reportEnd()
			if cs.final != nil {
				return inMsg{}, cs.final
			}
			return inMsg{}, io.EOF
		}
		if cs.takeHandoff() {
			// A data frame SendMsg sent, whose answer the sender has
			// not taken up yet: awaited here, sparing a hand-off.
			continue
		}
		cs.mu.Unlock()
		select {
		case <-cs.recvSig:
		case <-cs.doneCh:
		}
		cs.mu.Lock()
	}
}
