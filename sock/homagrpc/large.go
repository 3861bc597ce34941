package homagrpc

import (
	"context"
	"io"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// Unary calls whose messages do not fit in one Homa message travel as
// streams. A request too long goes as a stream from the start: an open
// frame and data frames carry it in chunks, and the response comes back
// through pulls. A response too long is known only once the handler has
// returned: the server keeps it as a stream that has ended, named by the
// call's id, and answers the request as it answers a pull (a stream
// response with the header and the first chunks); the client pulls the
// rest.

// invokeStream makes a unary call as a stream, for a request that does
// not fit in one Homa message.
func (c *ClientConn) invokeStream(ctx context.Context, method string, args, reply any, ci *callInfo, target netip.AddrPort) error {
	cs, err := c.newClientStream(ctx, &grpc.StreamDesc{}, method, ci, target)
	if err != nil {
		return err
	}
	defer func() {
		cs.mu.Lock()
		if ci.header != nil {
			*ci.header = cs.header
		}
		if ci.trailer != nil {
			*ci.trailer = cs.trailer
		}
		cs.mu.Unlock()
	}()
	if err := cs.SendMsg(args); err != nil && err != io.EOF {
		return err
	}
	// After io.EOF from SendMsg, RecvMsg returns the call's status.
	return cs.RecvMsg(reply)
}

// pullRest receives the rest of a response that the server turned into
// a stream (first is its first part, which it consumes) and returns the
// message, the header and the trailer, or the call's status error.
func (c *ClientConn) pullRest(ctx context.Context, target netip.AddrPort, id uint64, first *sock.Message, maxRecv int) (msg inMsg, header, trailer metadata.MD, err error) {
	in := newInQueue(maxRecv, maxRecv, maxFrame, nil)
	m := first
	for {
		r, err := parseStreamResp(m.Data)
		if err == nil {
			if r.flags&srespFlagHeader != 0 {
				header = parseMD(r.resp.header, r.resp.nHeader)
			}
			err = in.add(r.resp.payload, nil)
		}
		m.Release()
		if err != nil {
			c.sendCancel(target, id)
			return msg, header, nil, transportErrorOrStatus(err)
		}
		if r.flags&srespFlagEnd != 0 {
			trailer = parseMD(r.resp.trailer, r.resp.nTrailer)
			if r.resp.code != 0 {
				return msg, header, trailer, responseStatus(r.resp).Err()
			}
			msg, ok := in.take()
			if !ok {
				return msg, header, trailer, status.Error(codes.Internal, "homagrpc: a unary response stream ended without its message")
			}
			return msg, header, trailer, nil
		}
		frame := appendStreamReqHeader(make([]byte, 0, sreqHeaderLen), opPull, 0, id, in.tell())
		rid, err := c.s.SendOwned(target, frame, 0)
		if err != nil {
			return msg, header, nil, transportError(err)
		}
		if m, err = c.s.Recv(ctx, rid); err == nil && m.Err != nil {
			err = m.Err
			m.Release()
		}
		if err != nil {
			_ = c.s.Abort(rid)
			c.sendCancel(target, id)
			return msg, header, nil, transportError(err)
		}
	}
}

// transportErrorOrStatus keeps a status error as it is and turns any
// other error into one.
func transportErrorOrStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return transportError(err)
}

// continueAsStream keeps a unary response too long for one Homa message
// (frame, a response frame with status OK) as a stream that has ended,
// and answers the request m with its first part. Until the client has
// pulled it, the response counts against its client host's share of
// the server's MaxStreamMemory, and is one of the host's streams; one
// that does not fit, or finds no room in the table, is refused with st
// (ResourceExhausted, naming the bound). It
// reports whether it took m; when it did not, the caller answers m (with
// st when set).
func (l *listener) continueAsStream(m *sock.Message, callID uint64, frame []byte) (taken bool, st *status.Status) {
	r, err := parseResponse(frame)
	if err != nil || r.code != 0 || callID == 0 {
		return false, nil
	}
	ss := &sstream{l: l, key: streamKey{m.Peer, callID}, heard: time.Now(),
		out:     outQueue{limit: maxFrame},
		recvSig: make(chan struct{}, 1), sendSig: make(chan struct{}, 1),
		header: parseMD(r.header, r.nHeader), headerSent: true, headerDue: true,
		trailer:    parseMD(r.trailer, r.nTrailer),
		halfClosed: true,
	}
	ss.ctx, ss.cancel = context.WithCancelCause(l.srv.handlerCtx)
	if st := l.addStream(ss); st != nil {
		ss.cancel(nil)
		return false, st
	}
	// Held against the client host's share of MaxStreamMemory, and the
	// server's, until pulled.
	ss.mu.Lock()
	if full := ss.host.mem.take(len(r.payload)); full != nil {
		ss.mu.Unlock()
		l.removeStream(ss) // no end yet: not remembered
		return false, status.Newf(codes.ResourceExhausted, "homagrpc: a response of %d bytes does not fit in what the server's streams may hold (%s, %d bytes)", len(r.payload), full.what, full.limit)
	}
	ss.out.budget = &ss.host.mem
	ss.out.push(append([]byte(nil), r.payload...), r.flags&respFlagCompressed != 0, nil)
	ss.end = status.New(codes.OK, "")
	ss.mu.Unlock()
	ss.frame(slot{m: m}, nil, streamReq{op: opPull, credit: maxFrame})
	return true, nil
}

// finishLarge completes a unary call whose response the server turned
// into a stream: m is its first part.
func (c *ClientConn) finishLarge(ctx context.Context, target netip.AddrPort, id uint64, m *sock.Message, ci *callInfo, comp encoding.Compressor, st *callStats, reply any) error {
	msg, header, trailer, err := c.pullRest(ctx, target, id, m, recvLimit(ci.maxRecv))
	comp, cerr := recvCompressor(header, comp)
	if ci.header != nil {
		*ci.header = header
	}
	st.inHeader(header, true)
	if ci.trailer != nil {
		*ci.trailer = trailer
	}
	if err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if err := decodeMsg(ci.codec, comp, msg, recvLimit(ci.maxRecv), reply); err != nil {
		return err
	}
	st.inPayload(reply, msg.data)
	return nil
}
