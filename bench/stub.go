package bench

import (
	"context"
	"net"
	"net/netip"

	"github.com/homa-go/homa/internal/tools/stubecho"
	"github.com/homa-go/homa/sock"
)

// The stub protocols drive one protoc-generated gRPC stub, grpc.testing
// TestService's UnaryCall (internal/tools/stubecho), over two transports:
// sock/homagrpc over Homa, and gRPC-go over TCP. The generated code, the
// messages and the handler are the same; only the transport differs.

// stubHomaProtocol is the stub over Homa over transport t.
func stubHomaProtocol(name string, t sock.Transport) Protocol {
	return Protocol{
		name: name, maxSize: stubecho.MaxHomaPayload, homa: true, raw: t == sock.Raw, layer: true, clip: true,
		desc: "the protoc-generated grpc.testing stub (UnaryCall) over sock/homagrpc, Homa over " + TransportName(t) +
			", a client socket per client",
		serve: func(ctx context.Context, addr netip.AddrPort, o ServerOptions) (Server, error) {
			s, err := openHomaServer(addr, over(o.Engine, t))
			if err != nil {
				return nil, err
			}
			return stubHomaServer{stubecho.ServeHoma(s, stubecho.Options{ReplySize: o.ReplySize}), s}, nil
		},
		dial: func(_ context.Context, addr netip.AddrPort, o clientOptions) (client, error) {
			s, err := openSocket(LocalFor(addr), over(o.Engine, t))
			if err != nil {
				return nil, err
			}
			return stubClient{stubecho.NewHomaClient(s, addr)}, nil
		},
	}
}

// stubTCPProtocol is the stub over gRPC-go's HTTP/2 on TCP.
var stubTCPProtocol = Protocol{
	name: "stub-tcp", maxSize: stubecho.MaxHomaPayload, layer: true, clip: true, // as over Homa, so that both carry the same sizes
	desc:  "the protoc-generated grpc.testing stub (UnaryCall) over gRPC-go, one HTTP/2 connection per client",
	serve: serveStubTCP, dial: dialStubTCP,
}

// stubHomaServer is the stub's server over Homa, and its socket (for
// metrics).
type stubHomaServer struct {
	s    *stubecho.HomaServer
	sock *sock.Socket
}

func (s stubHomaServer) Addr() netip.AddrPort { return s.s.Addr() }
func (s stubHomaServer) Requests() uint64     { return uint64(s.s.Served()) }
func (s stubHomaServer) Close() error         { s.s.Close(); return nil }

// serveStubTCP starts the stub's server over gRPC-go.
func serveStubTCP(_ context.Context, addr netip.AddrPort, o ServerOptions) (Server, error) {
	return serveOnTCP(addr, func(ln net.Listener) *stubecho.TCPServer {
		return stubecho.ServeTCP(ln, stubecho.Options{ReplySize: o.ReplySize})
	})
}

func dialStubTCP(_ context.Context, addr netip.AddrPort, _ clientOptions) (client, error) {
	c, err := stubecho.DialTCP(addr.String())
	if err != nil {
		return nil, err
	}
	return stubClient{c}, nil
}

// stubClient is a client of the stub over either transport; any number
// of goroutines call it at once.
type stubClient struct{ c *stubecho.Client }

func (s stubClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	resp, err := s.c.Call(ctx, req)
	if err != nil {
		return nil, err
	}
	l.buf = resp // a new slice each time, the caller's
	return resp, nil
}

func (s stubClient) Close() error { return s.c.Close() }
