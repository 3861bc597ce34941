// Package grpcecho is the gRPC baseline Homa is measured against: a
// unary echo service and its client, as a Go service would use gRPC,
// but with messages that are plain byte slices. There is no protobuf:
// the service is registered from a hand-written grpc.ServiceDesc and the
// messages are carried by a codec for *[]byte.
package grpcecho

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
)

const (
	// ServiceName is the gRPC service of the echo server.
	ServiceName = "homa.bench.Echo"
	// Method is the full name of its one unary method.
	Method = "/" + ServiceName + "/Echo"
	// MaxMessage is the largest message a server or client accepts.
	MaxMessage = 4 << 20
)

// ErrNotBytes is returned by the codec for a value that is not a
// *[]byte.
var ErrNotBytes = errors.New("grpcecho: message is not a *[]byte")

// Codec carries a *[]byte as it is. Its name, "bytes", makes the
// content type "application/grpc+bytes".
type Codec struct{}

// Name is the codec's content subtype.
func (Codec) Name() string { return "bytes" }

// Marshal hands gRPC the bytes of v (a *[]byte) without copying them;
// they must stay unchanged until the message is sent.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNotBytes, v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

// Unmarshal copies the message into v (a *[]byte), reusing its capacity.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("%w: %T", ErrNotBytes, v)
	}
	n := data.Len()
	buf := slices.Grow((*b)[:0], n)[:n]
	data.CopyTo(buf)
	*b = buf
	return nil
}

// Options configures a Server.
type Options struct {
	// ReplySize, when positive, makes every reply ReplySize bytes: the
	// first ReplySize bytes of the request, zero-padded. Otherwise the
	// reply is the request.
	ReplySize int
}

// Server serves the echo service on one listener.
type Server struct {
	srv    *grpc.Server
	ln     net.Listener
	opts   Options
	served atomic.Int64
	wg     sync.WaitGroup
}

// Serve starts a server on ln, which it owns from now on.
func Serve(ln net.Listener, o Options) *Server {
	s := &Server{ln: ln, opts: o}
	s.srv = grpc.NewServer(
		grpc.ForceServerCodecV2(Codec{}),
		grpc.MaxRecvMsgSize(MaxMessage),
		grpc.MaxSendMsgSize(MaxMessage),
	)
	s.srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: ServiceName,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Echo", Handler: s.echo}},
	}, s)
	s.wg.Go(func() { _ = s.srv.Serve(ln) }) // returns when Close stops it
	return s
}

// echo is the method handler. Each request is decoded into a fresh
// slice, which gRPC may still be sending from after the handler returns,
// so replies are never built in a reused buffer.
func (s *Server) echo(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var req []byte
	if err := dec(&req); err != nil {
		return nil, err
	}
	resp := req
	if n := s.opts.ReplySize; n > 0 {
		if n <= len(req) {
			resp = req[:n]
		} else {
			resp = make([]byte, n)
			copy(resp, req)
		}
	}
	s.served.Add(1)
	return &resp, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Served counts the requests answered so far.
func (s *Server) Served() int64 { return s.served.Load() }

// Close stops the server at once, ending its connections.
func (s *Server) Close() {
	s.srv.Stop()
	s.wg.Wait()
}

// Client calls the echo service over one gRPC client connection, which
// multiplexes concurrent calls as HTTP/2 streams. It is safe for
// concurrent use.
type Client struct {
	cc *grpc.ClientConn
}

// Dial makes a client of the server at addr ("host:port"). gRPC connects
// lazily: an unreachable server fails the first call, not Dial.
func Dial(addr string) (*Client, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(Codec{}),
			grpc.MaxCallRecvMsgSize(MaxMessage),
			grpc.MaxCallSendMsgSize(MaxMessage),
		),
	)
	if err != nil {
		return nil, err
	}
	return &Client{cc: cc}, nil
}

// Call sends req and returns the reply, read into *resp (reusing its
// capacity). req must not change until Call returns.
func (c *Client) Call(ctx context.Context, req []byte, resp *[]byte) ([]byte, error) {
	if err := c.cc.Invoke(ctx, Method, &req, resp); err != nil {
		return nil, err
	}
	return *resp, nil
}

// Close closes the connection; calls in progress fail.
func (c *Client) Close() error { return c.cc.Close() }
