package homagrpc

import (
	"context"
	"errors"
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
// run and answered, anything else dropped.
func (s *Server) handle(l *listener, m *sock.Message) {
	defer m.Release()
	if !m.IsRequest() {
		s.stats.dropped.Add(1)
		return
	}
	req, err := parseRequest(m.Data)
	if err != nil {
		s.stats.malformed.Add(1)
		s.replyStatus(l, m, status.New(codes.Internal, err.Error()))
		return
	}
	md := s.registry.Load().methods[string(req.method)]
	if md == nil || md.stream {
		s.stats.unimplemented.Add(1)
		s.replyStatus(l, m, unimplemented(s.registry.Load(), string(req.method), md))
		return
	}
	codec := protoCodec()
	if len(req.codec) > 0 {
		if codec = getCodec(string(req.codec)); codec == nil {
			s.replyStatus(l, m, status.Newf(codes.Internal, "grpc: no codec registered for content-subtype %s", req.codec))
			return
		}
	}
	s.stats.calls.Add(1)

	// The handler's context: the deadline the request carries, the
	// request's metadata, the stream that collects header and trailer
	// metadata, and the peer.
	var ctx context.Context
	var cancel context.CancelFunc
	if req.timeout > 0 {
		ctx, cancel = context.WithTimeout(s.handlerCtx, req.timeout)
	} else {
		ctx, cancel = context.WithCancel(s.handlerCtx)
	}
	defer cancel()
	var incoming metadata.MD
	if req.mdCount > 0 {
		incoming = parseMD(req.md, req.mdCount)
	}
	ctx = metadata.NewIncomingContext(ctx, incoming)
	st := &serverStream{method: md.name}
	ctx = grpc.NewContextWithServerTransportStream(ctx, st)
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: Addr(m.Peer), LocalAddr: l.local})

	d := decoder{codec: codec, payload: req.payload, max: s.opts.maxRecv}
	resp, appErr := md.handler(md.svc.impl, ctx, d.decode, s.opts.interceptor)
	header, trailer := st.finish()

	var sts *status.Status // nil: OK, with the response
	switch {
	case appErr != nil:
		var ok bool
		if sts, ok = status.FromError(appErr); !ok {
			sts = status.FromContextError(appErr)
		}
		if sts.Code() == codes.OK {
			sts = status.New(codes.Unknown, appErr.Error())
		}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller has given up; do not send what it no longer awaits.
		sts = status.New(codes.DeadlineExceeded, "homagrpc: the handler ran past the deadline")
	}
	s.reply(l, m, sts, header, trailer, codec, resp)
}

// decoder decodes a request's payload for the method handler.
type decoder struct {
	codec   encoding.CodecV2
	payload []byte
	max     int
}

func (d *decoder) decode(v any) error {
	if d.max >= 0 && len(d.payload) > d.max {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(d.payload), d.max)
	}
	if err := decodeMessage(d.codec, d.payload, v); err != nil {
		return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
	}
	return nil
}

// unimplemented is the status for a method that cannot be called, in
// grpc-go's words where it has them.
func unimplemented(reg *registry, name string, md *method) *status.Status {
	if md != nil {
		return status.Newf(codes.Unimplemented, "homagrpc: %s is a streaming method; streaming RPCs are not supported over Homa", name)
	}
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
	s.reply(l, m, st, nil, nil, nil, nil)
}

// reply answers a request: with resp encoded by codec when st is nil,
// otherwise with the status; the metadata goes with either. A response
// too long for one Homa message turns into ResourceExhausted.
func (s *Server) reply(l *listener, m *sock.Message, st *status.Status, header, trailer metadata.MD, codec encoding.CodecV2, resp any) {
	buf := getBuffer()
	frame := s.appendResponse(*buf, st, header, trailer, codec, resp)
	err := l.s.Reply(m, frame)
	if errors.Is(err, sock.ErrMessageTooLong) {
		n := len(frame)
		frame, _ = appendResponseHeader(frame[:0], uint32(codes.ResourceExhausted), "homagrpc: a response of "+itoa(n)+" bytes does not fit in one Homa message", nil, nil, nil)
		_ = l.s.Reply(m, frame)
	}
	putBuffer(buf, frame)
}

// appendResponse appends the response frame to b: the encoded response
// when st is nil and encoding succeeds within the size limit, otherwise
// the status. Metadata that breaks gRPC's rules turns the response into
// codes.Internal.
func (s *Server) appendResponse(b []byte, st *status.Status, header, trailer metadata.MD, codec encoding.CodecV2, resp any) []byte {
	if st == nil {
		f, err := appendResponseHeader(b, 0, "", nil, header, trailer)
		if err != nil {
			return invalidMetadata(f[:0], err)
		}
		start := len(f)
		f, err = appendMessage(f, codec, resp)
		switch n := len(f) - start; {
		case err != nil:
			st = status.Newf(codes.Internal, "grpc: error while marshaling: %v", err)
		case s.opts.maxSend >= 0 && n > s.opts.maxSend:
			st = status.Newf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", n, s.opts.maxSend)
		default:
			return f
		}
		b = f[:0]
	}
	var details []byte
	if len(st.Details()) > 0 {
		details, _ = proto.Marshal(st.Proto())
	}
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
