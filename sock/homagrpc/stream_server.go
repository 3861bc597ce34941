package homagrpc

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/homa-go/homa/sock"
)

// streamKey names a call or stream at a server: the client's socket and
// the id it chose.
type streamKey struct {
	peer netip.AddrPort
	id   uint64
}

// sstream is one stream at the server. Its handler runs in a goroutine
// of its own; the listener's goroutines hand it the client's frames. The
// server holds the client's pull, and a data frame that brought messages
// to a handler waiting for them, and answers the data frame (or else the
// pull) when it has something to say: so a message and its answer one
// at a time (ping-pong) cost one Homa RPC.
type sstream struct {
	l      *listener
	key    streamKey
	method string
	setup
	ctx    context.Context
	cancel context.CancelCauseFunc
	stats  *callStats
	host   *hostShare // its client host's: set by addStream, under l.smu, before the stream is in the table

	mu         sync.Mutex
	in         inQueue
	out        outQueue
	halfClosed bool
	pull       slot // the client's pull, held
	pullAt     time.Time
	held       slot      // a data frame, held
	heldRef    *frameRef // releases held
	heldAt     time.Time
	// Frames held alone whose hold batchHolds times are numbered:
	// holdSeq is the last one's, heldTimed says held is it, and
	// holdsAnswered is the number of the last answered.
	holdSeq       uint64
	heldTimed     bool
	holdsAnswered atomic.Uint64
	seq           uint32    // of the last response
	recvWait      bool      // the handler waits in RecvMsg
	heard         time.Time // the client's last frame
	header        metadata.MD
	headerSent    bool // sent, or fixed by SendHeader
	headerDue     bool // to go in the next response
	trailer       metadata.MD
	end           *status.Status // the handler's result, once it returned
	endSent       bool
	gone          bool   // removed from the listener
	accepts       []byte // the client's list of compressors

	recvSig chan struct{}
	sendSig chan struct{}
}

// statusOK is the status of the responses that do not end a stream
// (read only: a Status does not change).
var statusOK = status.New(codes.OK, "")

// answer is a response to send once the stream's lock is released.
type answer struct {
	to     slot
	ref    *frameRef // when set, releases to's message
	frame  []byte
	end    bool // the stream's last
	settle bool // it answers a frame whose hold batchHolds times
}

// handleStream takes a stream frame. It owns m.
func (l *listener) handleStream(m *sock.Message) {
	req, err := parseStreamReq(m.Data)
	if err != nil {
		l.srv.stats.malformed.Add(1)
		l.endFrame(m, status.New(codes.Internal, err.Error()))
		return
	}
	key := streamKey{m.Peer, req.id}
	switch req.op {
	case opOpen:
		l.openStream(m, key, req)
	case opCancel:
		l.cancelCall(key)
		l.endFrame(m, nil)
	case opPulls:
		l.handlePulls(m, req)
	default:
		ss := l.stream(key)
		switch {
		case ss == nil && req.op == opData:
			// The stream has ended, and its end may be on its way in
			// the answer to a pull: just say no more messages.
			l.endFrame(m, status.New(codes.OK, ""))
			return
		case ss == nil:
			st := l.endedStatus(key)
			if st == nil {
				st = status.Newf(codes.Canceled, "homagrpc: stream %d is not open at the server", req.id)
			}
			l.endFrame(m, st)
			return
		}
		ss.frame(slot{m: m}, nil, req)
	}
}

// endFrame answers a stream frame with an empty response: the end of the
// stream with status st, or (st nil or OK) the news that the server
// takes no more messages.
func (l *listener) endFrame(m *sock.Message, st *status.Status) {
	_ = l.s.ReplyOwned(m, endFrameBytes(st))
	m.Release()
}

func endFrameBytes(st *status.Status) []byte {
	b := appendStreamRespHeader(make([]byte, 0, 64), srespFlagEnd, 0, 0)
	if st != nil && st.Code() != codes.OK {
		b = appendStatusResponse(b, st, statusDetails(st), nil, nil)
	} else {
		b, _ = appendResponseHeader(b, 0, "", nil, nil, nil)
	}
	return b
}

// statusDetails is the serialized status when it has details.
func statusDetails(st *status.Status) []byte {
	if len(st.Details()) == 0 {
		return nil
	}
	d, _ := proto.Marshal(st.Proto())
	return d
}

// openStream opens a stream and starts its handler.
func (l *listener) openStream(m *sock.Message, key streamKey, req streamReq) {
	s := l.srv
	md, sts := s.lookup(l, req.open)
	if sts != nil {
		l.endFrame(m, sts)
		return
	}
	cs, sts := s.callSetup(req.open)
	if sts != nil {
		l.endFrame(m, sts)
		return
	}
	ss := &sstream{l: l, key: key, method: md.name, setup: cs, out: outQueue{limit: req.credit},
		in:      newInQueue(s.opts.windowSize, cs.maxRecv, initialCredit, nil), // its host's budget: addStream's
		heard:   time.Now(),
		recvSig: make(chan struct{}, 1), sendSig: make(chan struct{}, 1),
	}
	ss.halfClosed = req.flags&sreqFlagHalfClose != 0
	ss.ctx, ss.cancel = s.handlerContext(l, m.Peer, req.open, transportStream{ss})
	if sts := l.addStream(ss); sts != nil {
		ss.cancel(nil)
		l.endFrame(m, sts)
		return
	}
	ss.mu.Lock()
	err := ss.in.add(req.chunks, nil)
	ss.mu.Unlock()
	if err != nil {
		l.removeStream(ss)
		l.endFrame(m, status.Convert(err))
		return
	}
	s.stats.calls.Add(1)
	ss.ctx, ss.stats = newCallStats(ss.ctx, s.opts.statsHs, false, md.name, cs.compName, md.clientStreams, md.serverStreams, Addr(m.Peer), l.local)
	if ss.stats != nil {
		inMD, _ := metadata.FromIncomingContext(ss.ctx)
		ss.stats.inHeader(inMD, true)
	}
	l.wg.Add(1)
	go ss.run(md)
	if req.flags&sreqFlagPull != 0 {
		ss.frame(slot{m: m}, nil, streamReq{op: opPull, credit: req.credit})
		return
	}
	ss.mu.Lock()
	ss.held, ss.heldAt = slot{m: m}, time.Now()
	a := ss.flush(true)
	ss.mu.Unlock()
	ss.send(a)
}

// run runs the handler: a streaming one as it is, a unary one (a call
// whose messages did not fit in one Homa message) through the stream.
func (ss *sstream) run(md *method) {
	defer ss.l.wg.Done()
	s := ss.l.srv
	var err error
	if md.stream {
		if s.opts.streamInt != nil {
			info := &grpc.StreamServerInfo{FullMethod: md.name, IsClientStream: md.clientStreams, IsServerStream: md.serverStreams}
			err = s.opts.streamInt(md.svc.impl, ss, info, md.streamHandler)
		} else {
			err = md.streamHandler(md.svc.impl, ss)
		}
	} else {
		var resp any
		resp, err = md.handler(md.svc.impl, ss.ctx, ss.RecvMsg, s.opts.interceptor)
		if err == nil {
			err = ss.SendMsg(resp)
		}
	}
	ss.finish(err)
}

// finish ends the stream with the handler's result.
func (ss *sstream) finish(err error) {
	st := status.New(codes.OK, "")
	if err != nil {
		st = errStatus(err)
	}
	ss.mu.Lock()
	if ss.end != nil {
		// The stream failed already (the client broke a limit); its
		// end goes out with the next pull.
		ss.mu.Unlock()
		ss.stats.end(ss.end.Err(), nil)
		return
	}
	ss.end = st
	if !ss.headerSent {
		ss.headerSent, ss.headerDue = true, true
	}
	if ss.stats != nil {
		ss.stats.outHeader(ss.header)
		defer ss.stats.end(st.Err(), ss.trailer)
	}
	abandoned := ss.ctx.Err() != nil
	a := ss.flush(abandoned)
	ss.mu.Unlock()
	ss.send(a)
	ss.cancel(nil)
	if abandoned {
		// The client canceled or expired, or the server stops: nobody
		// waits for what is left.
		ss.l.removeStream(ss)
	}
}

// frame takes a data or pull frame of the stream, whose answer goes to
// to. It owns to's message, or ref's hold on it when ref is set (a data
// frame in a batch).
func (ss *sstream) frame(to slot, ref *frameRef, req streamReq) {
	ss.mu.Lock()
	now := time.Now()
	ss.heard = now
	ss.out.setLimit(req.credit)
	var as [3]answer
	switch {
	case req.op == opData && (ss.end != nil || ss.gone):
		// The handler has returned: the messages have nobody to read
		// them. The answer says what is left to say.
		as[0] = ss.flushHeld() // one data frame in flight: none held
		ss.held, ss.heldRef, ss.heldAt = to, ref, now
		as[1] = ss.flush(true)
	case req.op == opData:
		if ref == nil {
			ref = newFrameRef(to.m)
		}
		if err := ss.in.add(req.chunks, ref); err != nil {
			// The client broke a limit: the stream ends with the
			// status saying which, in the answers to this frame and
			// to the pull.
			st := status.Convert(err)
			if ss.end == nil {
				ss.end = st
			}
			ss.out.drop()
			ss.in.drop()
			a := ss.flush(true)
			ss.mu.Unlock()
			ss.cancel(err)
			to.reply(ss.l, endFrameBytes(st))
			ref.release()
			// The stream is forgotten once its end has gone out, in
			// the answer to the pull held now or to the next one.
			ss.send(a)
			return
		}
		if req.flags&sreqFlagHalfClose != 0 {
			ss.halfClosed = true
		}
		as[0] = ss.flushHeld() // one data frame in flight: none held
		ss.held, ss.heldRef, ss.heldAt = to, ref, now
		if !ss.recvWait || len(req.chunks) == 0 {
			// Nobody waits for these messages (or there are none):
			// answer now, with the credit and whatever is ready.
			as[1] = ss.flush(true)
		} else if to.b == nil {
			ss.holdSeq++
			ss.heldTimed = true
			ss.l.holds.add(heldFrame{at: now, ss: ss, m: to.m, seq: ss.holdSeq})
		}
		signal(ss.recvSig)
	default:
		if ss.pull.ok() {
			as[0] = ss.flushPull(true) // a second pull: answer the first
		}
		ss.pull, ss.pullAt = to, now
	}
	as[2] = ss.flush(false)
	ss.mu.Unlock()
	signal(ss.sendSig)
	for _, a := range as {
		ss.send(a)
	}
}

// flush answers the held data frame, or else the held pull, when there
// is something to say (or, with force, in any case): the header when
// due, messages as far as the credit goes, new credit, and the end once
// every message is out. The caller holds mu.
func (ss *sstream) flush(force bool) answer {
	if ss.held.ok() {
		return ss.answer(&ss.held, &ss.heldRef, force)
	}
	return ss.answer(&ss.pull, nil, force)
}

// flushHeld answers the held data frame, if any.
func (ss *sstream) flushHeld() answer { return ss.answer(&ss.held, &ss.heldRef, true) }

// flushPull answers the held pull, even while a data frame is held.
func (ss *sstream) flushPull(force bool) answer { return ss.answer(&ss.pull, nil, force) }

// answer answers the frame *target holds (ref, when set, releases it).
// The caller holds mu.
func (ss *sstream) answer(target *slot, ref **frameRef, force bool) answer {
	if !target.ok() {
		return answer{}
	}
	ending := ss.end != nil && ss.out.empty()
	if !force && !ending && !ss.headerDue && !ss.out.ready() && !ss.in.due() {
		return answer{}
	}
	flags := byte(0)
	var hdr metadata.MD
	if ss.headerDue {
		flags |= srespFlagHeader
		hdr, ss.headerDue = ss.header, false
	}
	// The response: its headers, then as many chunks as the credit and
	// the frame take. The status and trailer go in once the last message
	// does.
	lim := target.limit()
	// From the engine's pool: the socket takes it over (ReplyOwned) and
	// recycles it, or a batch's answer copies it and gives it back.
	b := sock.NewBuffer(min(srespHeaderLen+respHeaderLen+256+ss.out.need(), lim))[:0]
	ending = ss.end != nil // unless the messages left do not all fit
	ss.seq++
	for {
		st, trl, f := statusOK, metadata.MD(nil), flags
		if ending {
			st, trl, f = ss.end, ss.trailer, flags|srespFlagEnd
		}
		b = appendStreamRespHeader(b[:0], f, ss.seq, ss.in.tell())
		start := len(b)
		var err error
		if b, err = appendResponseHeader(b, uint32(st.Code()), st.Message(), statusDetails(st), hdr, trl); err != nil {
			// Metadata that breaks gRPC's rules ends the stream.
			b = appendStatusResponse(b[:start], status.New(codes.Internal, "homagrpc: invalid metadata from the handler: "+err.Error()), nil, nil, nil)
			b[srespOffFlags] = srespFlagEnd
			ending = true
			break
		}
		if ending && !ss.out.fitsAll(lim-len(b)) {
			ending = false
			continue
		}
		b = ss.out.fill(b, lim)
		break
	}
	ss.endSent = ending
	a := answer{to: *target, frame: b, end: ss.endSent}
	if target == &ss.held && ss.heldTimed {
		ss.holdsAnswered.Store(ss.holdSeq)
		ss.heldTimed, a.settle = false, true
	}
	*target = slot{}
	if ref != nil {
		a.ref, *ref = *ref, nil
	}
	signal(ss.sendSig)
	return a
}

// reply sends the answer, if any, and releases the frame it answers.
func (a answer) reply(l *listener) bool {
	if !a.to.ok() {
		return false
	}
	a.to.reply(l, a.frame)
	if a.ref != nil {
		a.ref.release()
	} else {
		a.to.release()
	}
	if a.settle {
		l.holds.settle()
	}
	return true
}

// send sends an answer, and forgets the stream after its last.
func (ss *sstream) send(a answer) {
	if a.reply(ss.l) && a.end {
		ss.l.removeStream(ss)
	}
}

// Method, Context, SetHeader, SendHeader, SetTrailer, SendMsg and
// RecvMsg make the stream the handler's grpc.ServerStream.

func (ss *sstream) Method() string           { return ss.method }
func (ss *sstream) Context() context.Context { return ss.ctx }

func (ss *sstream) SetHeader(md metadata.MD) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.headerSent || ss.end != nil {
		return errStreamDone
	}
	ss.header = metadata.Join(ss.header, md)
	return nil
}

func (ss *sstream) SendHeader(md metadata.MD) error {
	ss.mu.Lock()
	if ss.headerSent || ss.end != nil {
		ss.mu.Unlock()
		return errStreamDone
	}
	ss.header = metadata.Join(ss.header, md)
	ss.headerSent, ss.headerDue = true, true
	ss.stats.outHeader(ss.header)
	a := ss.flush(false)
	ss.mu.Unlock()
	ss.send(a)
	return nil
}

func (ss *sstream) SetTrailer(md metadata.MD) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.end == nil {
		ss.trailer = metadata.Join(ss.trailer, md)
	}
}

func (ss *sstream) clientAccepts() []string { return parseAccept(ss.accepts) }
func (ss *sstream) setAccepts(a []byte)     { ss.accepts = bytes.Clone(a) }

func (ss *sstream) setSendCompressor(name string) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.headerSent || ss.end != nil {
		return errHeaderSent
	}
	ss.sendComp = sendCompressor(name)
	ss.header = withEncoding(ss.header, name, ss.compName)
	return nil
}

// transportStream is a stream as the handler's
// grpc.ServerTransportStream, for grpc.SetHeader and the like.
type transportStream struct{ *sstream }

func (t transportStream) SetTrailer(md metadata.MD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.end != nil {
		return errStreamDone
	}
	t.trailer = metadata.Join(t.trailer, md)
	return nil
}

// SendMsg queues m for the client's pulls; it waits while the client's
// credit is used up.
func (ss *sstream) SendMsg(m any) error {
	ss.mu.Lock()
	comp := ss.sendComp
	ss.mu.Unlock()
	data, buf, err := encodeMsg(ss.codec, comp, m, ss.maxSend)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	for ss.out.full() && ss.ctx.Err() == nil {
		if ss.held.ok() {
			// About to wait: let the client's next frame come.
			a := ss.flush(true)
			ss.mu.Unlock()
			ss.send(a)
			ss.mu.Lock()
			continue
		}
		ss.mu.Unlock()
		select {
		case <-ss.sendSig:
		case <-ss.ctx.Done():
		}
		ss.mu.Lock()
	}
	if err := ss.ctx.Err(); err != nil {
		ss.mu.Unlock()
		return status.FromContextError(err).Err()
	}
	if !ss.headerSent {
		ss.headerSent, ss.headerDue = true, true
		ss.stats.outHeader(ss.header)
	}
	ss.out.push(data, comp != nil, buf)
	ss.stats.outPayload(m, data)
	a := ss.flush(false)
	ss.mu.Unlock()
	ss.send(a)
	return nil
}

// RecvMsg waits for the client's next message; after the client's
// half-close it returns io.EOF.
func (ss *sstream) RecvMsg(m any) error {
	ss.mu.Lock()
	var msg inMsg
	for {
		var ok bool
		if msg, ok = ss.in.take(); ok {
			break
		}
		if ss.held.ok() {
			// The handler took every message of the data frame held
			// and reacted without a word: answer it, so that the
			// client's next frame comes.
			a := ss.flush(true)
			ss.mu.Unlock()
			ss.send(a)
			ss.mu.Lock()
			continue
		}
		if ss.halfClosed {
			ss.mu.Unlock()
			return io.EOF
		}
		if err := ss.ctx.Err(); err != nil {
			ss.mu.Unlock()
			return status.FromContextError(err).Err()
		}
		ss.recvWait = true
		ss.mu.Unlock()
		select {
		case <-ss.recvSig:
		case <-ss.ctx.Done():
		}
		ss.mu.Lock()
		ss.recvWait = false
	}
	a := ss.flush(false) // new credit, when enough opened
	ss.mu.Unlock()
	ss.send(a)
	err := decodeMsg(ss.codec, ss.comp, msg, ss.maxRecv, m)
	msg.done()
	if err != nil {
		return err
	}
	ss.stats.inPayload(m, msg.data)
	return nil
}
