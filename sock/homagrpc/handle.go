package homagrpc

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/homa-go/homa/sock"
)

// handle serves one message from the listener's socket: a request is
// run and answered, a stream frame taken by its stream, anything else
// dropped. It owns m.
func (s *Server) handle(l *listener, m *sock.Message) {
	if !m.IsRequest() {
		s.stats.dropped.Add(1)
		m.Release()
		return
	}
	if len(m.Data) > 1 && m.Data[1] == kindStreamReq {
		l.handleStream(m)
		return
	}
	if len(m.Data) > 1 && m.Data[1] == kindBatchReq {
		l.handleBatch(m)
		return
	}
	taken := false // m went to a stream
	defer func() {
		if !taken {
			m.Release()
		}
	}()
	req, err := parseRequest(m.Data)
	if err != nil {
		s.stats.malformed.Add(1)
		s.replyStatus(l, m, status.New(codes.Internal, err.Error()))
		return
	}
	md, sts := s.lookup(l, req)
	if sts != nil {
		s.replyStatus(l, m, sts)
		return
	}
	if md.stream {
		s.stats.unimplemented.Add(1)
		s.replyStatus(l, m, status.Newf(codes.Unimplemented, "homagrpc: %s is a streaming method, called as a unary one", md.name))
		return
	}
	cs, sts := s.callSetup(req)
	if sts != nil {
		s.replyStatus(l, m, sts)
		return
	}
	s.stats.calls.Add(1)

	st := &serverStream{method: md.name}
	ctx, cancel := s.handlerContext(l, m.Peer, req, st)
	defer cancel(nil)
	if req.callID != 0 {
		key := streamKey{m.Peer, req.callID}
		l.addCall(key, cancel)
		defer l.removeCall(key)
	}
	ctx, cst := newCallStats(ctx, s.opts.statsHs, false, md.name, string(req.comp), false, false, Addr(m.Peer), l.local)
	if cst != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		cst.inHeader(md, true)
	}

	d := decoder{setup: cs, msg: inMsg{data: req.payload, compressed: req.flags&reqFlagCompressed != 0}, stats: cst}
	resp, appErr := md.handler(md.svc.impl, ctx, d.decode, s.opts.interceptor)
	header, trailer := st.finish()
	if st.sendComp != "" {
		cs.sendComp = sendCompressor(st.sendComp)
		header = withEncoding(header, st.sendComp, cs.compName)
	}

	var sts2 *status.Status // nil: OK, with the response
	switch {
	case appErr != nil:
		sts2 = errStatus(appErr)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller has given up; do not send what it no longer awaits.
		sts2 = status.New(codes.DeadlineExceeded, "homagrpc: the handler ran past the deadline")
	}
	var sent *status.Status
	taken, sent = s.reply(l, m, sts2, header, trailer, cs, resp, req.callID)
	if cst != nil {
		// What the client gets: the response only if it went.
		cst.outHeader(header)
		if sent == nil {
			cst.outPayload(resp, nil)
		}
		cst.end(sent.Err(), trailer)
	}
}

// errStatus is the status of a handler's error, as grpc-go makes it.
func errStatus(appErr error) *status.Status {
	sts, ok := status.FromError(appErr)
	if !ok {
		sts = status.FromContextError(appErr)
	}
	if sts.Code() == codes.OK {
		sts = status.New(codes.Unknown, appErr.Error())
	}
	return sts
}

// lookup finds the method a request names, or the status that says why
// it cannot be called.
func (s *Server) lookup(l *listener, req request) (*method, *status.Status) {
	if l.isDraining() {
		return nil, status.New(codes.Unavailable, "homagrpc: the server is stopping")
	}
	reg := s.registry.Load()
	md := reg.methods[string(req.method)]
	if md == nil {
		s.stats.unimplemented.Add(1)
		return nil, unimplemented(reg, string(req.method))
	}
	return md, nil
}

// setup is how one call's messages are encoded and decoded.
type setup struct {
	codec    encoding.CodecV2
	comp     encoding.Compressor // the request's messages
	sendComp encoding.Compressor // the response's: comp, unless SetSendCompressor
	compName string
	maxRecv  int
	maxSend  int
}

// callSetup settles a request's codec and compressor.
func (s *Server) callSetup(req request) (setup, *status.Status) {
	cs := setup{codec: protoCodec(), maxRecv: recvLimit(s.opts.maxRecv), maxSend: s.opts.maxSend}
	if len(req.codec) > 0 {
		if cs.codec = getCodec(string(req.codec)); cs.codec == nil {
			return cs, status.Newf(codes.Internal, "grpc: no codec registered for content-subtype %s", req.codec)
		}
	}
	if len(req.comp) > 0 {
		cs.compName = string(req.comp)
		if cs.comp = encoding.GetCompressor(cs.compName); cs.comp == nil {
			return cs, status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", req.comp)
		}
		cs.sendComp = cs.comp
	}
	return cs, nil
}

// handlerContext is a handler's context: the deadline the request
// carries, the request's metadata, the transport stream (which collects
// header and trailer metadata), and the peer.
func (s *Server) handlerContext(l *listener, from netip.AddrPort, req request, ts grpc.ServerTransportStream) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(s.handlerCtx)
	if req.timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, req.timeout)
		end := cancel
		cancel = func(err error) { end(err); stop() }
	}
	var incoming metadata.MD
	if req.mdCount > 0 {
		incoming = parseMD(req.md, req.mdCount)
	}
	if a, ok := ts.(sendCompressorSetter); ok && len(req.accept) > 0 {
		a.setAccepts(req.accept)
	}
	ctx = metadata.NewIncomingContext(ctx, incoming)
	ctx = grpc.NewContextWithServerTransportStream(ctx, ts)
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: Addr(from), LocalAddr: l.local})
	return ctx, cancel
}

// decoder decodes a request's payload for the method handler.
type decoder struct {
	setup
	msg   inMsg
	stats *callStats
}

func (d *decoder) decode(v any) error {
	if err := decodeMsg(d.codec, d.comp, d.msg, d.maxRecv, v); err != nil {
		if status.Code(err) == codes.Internal {
			return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", status.Convert(err).Message())
		}
		return err
	}
	d.stats.inPayload(v, d.msg.data)
	return nil
}

// unimplemented is the status for a method that is not registered, in
// grpc-go's words.
func unimplemented(reg *registry, name string) *status.Status {
	svc, meth := name[1:], ""
	if i := strings.LastIndexByte(svc, '/'); i >= 0 {
		svc, meth = svc[:i], svc[i+1:]
	}
	if _, ok := reg.services[svc]; !ok {
		return status.Newf(codes.Unimplemented, "unknown service %v", svc)
	}
	return status.Newf(codes.Unimplemented, "unknown method %v for service %v", meth, svc)
}

// replyStatus answers a request with a status and nothing else.
func (s *Server) replyStatus(l *listener, m *sock.Message, st *status.Status) {
	s.reply(l, m, st, nil, nil, setup{}, nil, 0)
}

// reply answers a request: with resp encoded by codec when st is nil,
// otherwise with the status; the metadata goes with either. A response
// too long for one Homa message goes on as a stream named by callID
// (then reply reports that it took m); without a call id, or when the
// server's streams have no room for it, it turns into
// ResourceExhausted. It returns the status the client gets (nil: OK).
func (s *Server) reply(l *listener, m *sock.Message, st *status.Status, header, trailer metadata.MD, cs setup, resp any, callID uint64) (taken bool, sent *status.Status) {
	buf := getBuffer()
	frame := appendResponse(*buf, st, header, trailer, cs, resp)
	if len(frame) > maxFrame {
		taken, refused := l.continueAsStream(m, callID, frame)
		if taken {
			putBuffer(buf, frame)
			return true, st
		}
		if refused != nil {
			st = refused
			frame = appendStatusResponse(frame[:0], refused, nil, header, trailer)
		}
	}
	err := l.s.Reply(m, frame)
	if errors.Is(err, sock.ErrMessageTooLong) {
		n := len(frame)
		st = status.New(codes.ResourceExhausted, "homagrpc: a response of "+itoa(n)+" bytes does not fit in one Homa message")
		frame, _ = appendResponseHeader(frame[:0], uint32(st.Code()), st.Message(), nil, nil, nil)
		_ = l.s.Reply(m, frame)
	}
	putBuffer(buf, frame)
	return false, st
}

// appendResponse appends the response frame to b: the encoded response
// when st is nil and encoding succeeds within the size limit, otherwise
// the status. Metadata that breaks gRPC's rules turns the response into
// codes.Internal.
func appendResponse(b []byte, st *status.Status, header, trailer metadata.MD, cs setup, resp any) []byte {
	if st == nil {
		flags := byte(0)
		if cs.sendComp != nil {
			flags = respFlagCompressed
		}
		f, err := appendResponseHead(b, flags, 0, "", nil, header, trailer)
		if err != nil {
			return invalidMetadata(f[:0], err)
		}
		start := len(f)
		f, err = appendMessage(f, cs.codec, resp)
		switch n := len(f) - start; {
		case err != nil:
			st = status.Newf(codes.Internal, "grpc: error while marshaling: %v", err)
		case cs.maxSend >= 0 && n > cs.maxSend:
			st = status.Newf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", n, cs.maxSend)
		case cs.sendComp != nil:
			z, err := compress(cs.sendComp, f[start:])
			if err == nil {
				return append(f[:start], z...)
			}
			st = status.Convert(err)
		default:
			return f
		}
		b = f[:0]
	}
	var details []byte
	if len(st.Details()) > 0 {
		details, _ = proto.Marshal(st.Proto())
	}
	return appendStatusResponse(b, st, details, header, trailer)
}

// appendStatusResponse appends a response frame with a status.
func appendStatusResponse(b []byte, st *status.Status, details []byte, header, trailer metadata.MD) []byte {
	f, err := appendResponseHeader(b, uint32(st.Code()), st.Message(), details, header, trailer)
	if err != nil {
		return invalidMetadata(f[:0], err)
	}
	return f
}

// invalidMetadata appends a response saying the handler set metadata
// that breaks gRPC's rules.
func invalidMetadata(b []byte, err error) []byte {
	b, _ = appendResponseHeader(b, uint32(codes.Internal), "homagrpc: invalid metadata from the handler: "+err.Error(), nil, nil, nil)
	return b
}

// itoa formats n without fmt.
func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// serverStream is the grpc.ServerTransportStream of one call: it gives
// grpc.Method its name and collects the metadata that grpc.SetHeader,
// grpc.SendHeader and grpc.SetTrailer set, which travel with the
// response.
type serverStream struct {
	method string

	mu         sync.Mutex
	header     metadata.MD
	trailer    metadata.MD
	headerSent bool
	done       bool
	// accepts is the client's list of compressors; it aliases the
	// request, which lives while the handler runs.
	accepts  []byte
	sendComp string // SetSendCompressor's choice; empty: none
}

func (s *serverStream) clientAccepts() []string { return parseAccept(s.accepts) }
func (s *serverStream) setAccepts(a []byte)     { s.accepts = a }

func (s *serverStream) setSendCompressor(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.headerSent {
		return errHeaderSent
	}
	s.sendComp = name
	return nil
}

var errStreamDone = status.Error(codes.Internal, "homagrpc: the call has ended, or its header was already sent")

func (s *serverStream) Method() string { return s.method }

func (s *serverStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.headerSent {
		return errStreamDone
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

// SendHeader fixes the header metadata; over Homa it travels with the
// response, since a unary response is one message.
func (s *serverStream) SendHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.headerSent {
		return errStreamDone
	}
	s.header = metadata.Join(s.header, md)
	s.headerSent = true
	return nil
}

func (s *serverStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errStreamDone
	}
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// finish ends the stream and returns its metadata.
func (s *serverStream) finish() (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	return s.header, s.trailer
}
