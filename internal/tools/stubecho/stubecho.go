// Package stubecho is the echo service that compares one
// protoc-generated gRPC stub over two transports: the grpc.testing
// TestService of grpc-go's interop suite (package grpc_testing), whose
// UnaryCall answers with the request's payload, served and called through
// its generated code either by gRPC-go over TCP (HTTP/2) or over Homa
// (package sock/homagrpc). Only the transport differs between the two:
// the same generated client, the same messages, the same handler.
//
//	srv := stubecho.ServeHoma(socket, stubecho.Options{})   // or ServeTCP(listener, ...)
//	c := stubecho.NewHomaClient(clientSocket, srv.Addr())   // or DialTCP(addr)
//	resp, err := c.Call(ctx, req)                           // TestServiceClient.UnaryCall
//
// The payload travels as the body of a grpc.testing.Payload, in a
// SimpleRequest and a SimpleResponse.
package stubecho

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/internal/tools/tcpecho"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

const (
	// Method is the full name of the method every call goes to.
	Method = testpb.TestService_UnaryCall_FullMethodName
	// MaxTCPMessage is the largest message gRPC-go accepts here either
	// way (its default is 4 MiB for receiving).
	MaxTCPMessage = 4 << 20
	// MaxHomaPayload is the largest payload that one Homa message
	// carries with its call: what is left of sock.MaxMessage after the
	// frame of homagrpc (a 28-byte header and the method name at most)
	// and the protobuf tags and lengths around the body (at most 10
	// bytes), with room to spare. Larger ones travel in pieces, up to
	// homagrpc's receive limit; the benchmarks keep to one message.
	MaxHomaPayload = sock.MaxMessage - 256
)

// Options configures a server.
type Options struct {
	// ReplySize, when positive, makes every reply ReplySize bytes: the
	// first ReplySize bytes of the request, zero-padded. Otherwise the
	// reply is the request.
	ReplySize int
}

// service is the TestService implementation: UnaryCall and
// FullDuplexCall echo, every other method is unimplemented.
type service struct {
	testpb.UnimplementedTestServiceServer
	replySize int
	served    atomic.Int64
}

// UnaryCall answers with the request's payload (see Options.ReplySize).
// The request was decoded into fresh memory, which the reply may share:
// gRPC encodes the reply before it reuses anything.
func (s *service) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.served.Add(1)
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: s.reply(req.GetPayload().GetBody())}}, nil
}

// reply is the payload that answers body: body itself, or ReplySize
// bytes of it, zero-padded.
func (s *service) reply(body []byte) []byte {
	if n := s.replySize; n > 0 {
		if n <= len(body) {
			return body[:n]
		}
		return tcpecho.AppendReply(make([]byte, 0, n), body, n)
	}
	return body
}

// TCPServer serves the service with gRPC-go on a TCP listener.
type TCPServer struct {
	svc *service
	srv *grpc.Server
	ln  net.Listener
	wg  sync.WaitGroup
}

// ServeTCP starts a gRPC-go server of the service on ln, which it owns
// from now on.
func ServeTCP(ln net.Listener, o Options) *TCPServer {
	s := &TCPServer{svc: &service{replySize: o.ReplySize}, ln: ln}
	s.srv = grpc.NewServer(grpc.MaxRecvMsgSize(MaxTCPMessage), grpc.MaxSendMsgSize(MaxTCPMessage))
	testpb.RegisterTestServiceServer(s.srv, s.svc)
	s.wg.Go(func() { _ = s.srv.Serve(ln) }) // returns when Close stops it
	return s
}

// Addr is the address the server listens on.
func (s *TCPServer) Addr() net.Addr { return s.ln.Addr() }

// Served counts the calls answered so far.
func (s *TCPServer) Served() int64 { return s.svc.served.Load() }

// Close stops the server at once, ending its connections. It is
// idempotent.
func (s *TCPServer) Close() {
	s.srv.Stop()
	s.wg.Wait()
}

// HomaServer serves the service over Homa on one server socket.
type HomaServer struct {
	svc  *service
	srv  *homagrpc.Server
	addr netip.AddrPort
	wg   sync.WaitGroup
}

// ServeHoma starts a server of the service on s, a Homa server socket
// that it owns from now on.
func ServeHoma(s *sock.Socket, o Options) *HomaServer {
	h := &HomaServer{svc: &service{replySize: o.ReplySize}, addr: s.LocalAddr()}
	h.srv = homagrpc.NewServer()
	testpb.RegisterTestServiceServer(h.srv, h.svc)
	h.wg.Go(func() { _ = h.srv.Serve(s) }) // returns when Close stops it
	return h
}

// Addr is the address of the server's socket.
func (h *HomaServer) Addr() netip.AddrPort { return h.addr }

// Served counts the calls answered so far.
func (h *HomaServer) Served() int64 { return h.svc.served.Load() }

// Close stops the server, closing its socket, and waits for its
// goroutines. It is idempotent.
func (h *HomaServer) Close() {
	h.srv.Stop()
	h.wg.Wait()
}

// Client calls UnaryCall through the generated TestServiceClient over
// one gRPC-go connection or one Homa client socket. It is safe for
// concurrent use.
type Client struct {
	stub  testpb.TestServiceClient
	close func() error
}

// DialTCP makes a client of the gRPC-go server at addr ("host:port")
// over one HTTP/2 connection, which carries concurrent calls as streams.
// gRPC connects lazily: an unreachable server fails the first call.
func DialTCP(addr string) (*Client, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxTCPMessage), grpc.MaxCallSendMsgSize(MaxTCPMessage)),
	)
	if err != nil {
		return nil, err
	}
	return &Client{stub: testpb.NewTestServiceClient(cc), close: cc.Close}, nil
}

// NewHomaClient makes a client of the server at addr over Homa, calling
// from s, a client socket that it owns from now on (Close closes it).
// Nothing is sent before the first call.
func NewHomaClient(s *sock.Socket, addr netip.AddrPort) *Client {
	cc := homagrpc.NewClientConn(s, addr)
	return &Client{stub: testpb.NewTestServiceClient(cc), close: func() error {
		cc.Close()
		return s.Close()
	}}
}

// Call sends req as the payload of a UnaryCall and returns the payload
// of the response, which belongs to the caller. req must not change
// until Call returns.
func (c *Client) Call(ctx context.Context, req []byte) ([]byte, error) {
	resp, err := c.stub.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: req}})
	if err != nil {
		return nil, err
	}
	return resp.GetPayload().GetBody(), nil
}

// Close closes the connection or the socket; calls in progress fail. It
// is idempotent.
func (c *Client) Close() error { return c.close() }
