package bench

import (
	"context"
	"net/netip"
	"sync"

	"github.com/homa-go/homa/internal/tools/stubecho"
	"github.com/homa-go/homa/sock"
)

// The stream protocols measure gRPC streaming: every lane of a client
// keeps one bidirectional stream (grpc.testing TestService's
// FullDuplexCall) open for the whole run, and each "call" is a message
// sent on it and the echo received back, over sock/homagrpc on Homa or
// over gRPC-go on TCP. Throughput mode with N outstanding is N streams
// per client exchanging messages as fast as they can: its RPCs/s are
// the messages per second each way.

// streamHomaProtocol is the stream protocol over Homa over transport t.
func streamHomaProtocol(name string, t sock.Transport) Protocol {
	return Protocol{
		name: name, maxSize: stubecho.MaxHomaPayload, homa: true, raw: t == sock.Raw, layer: true, clip: true,
		desc: "messages on bidirectional gRPC streams (grpc.testing FullDuplexCall, a stream per lane) over sock/homagrpc, Homa over " +
			TransportName(t) + ", a client socket per client",
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
			return &streamClient{c: stubecho.NewHomaClient(s, addr), s: s}, nil
		},
	}
}

// streamTCPProtocol is the stream protocol over gRPC-go's HTTP/2 on TCP.
var streamTCPProtocol = Protocol{
	name: "stream-tcp", maxSize: stubecho.MaxHomaPayload, layer: true, clip: true,
	desc:  "messages on bidirectional gRPC streams (grpc.testing FullDuplexCall, a stream per lane) over gRPC-go, one HTTP/2 connection per client",
	serve: serveStubTCP,
	dial: func(_ context.Context, addr netip.AddrPort, _ clientOptions) (client, error) {
		c, err := stubecho.DialTCP(addr.String())
		if err != nil {
			return nil, err
		}
		return &streamClient{c: c}, nil
	},
}

// streamClient keeps a stream per lane, opened at the lane's first call
// and closed with the client.
type streamClient struct {
	c       *stubecho.Client
	s       *sock.Socket // over Homa: the client's socket
	mu      sync.Mutex
	streams map[*lane]*stubecho.Stream
}

// Socket is the client's Homa socket, nil over TCP.
func (s *streamClient) Socket() *sock.Socket { return s.s }

func (s *streamClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	st, err := s.stream(l)
	if err != nil {
		return nil, err
	}
	resp, err := st.Exchange(req)
	if err != nil {
		return nil, err
	}
	l.buf = resp // a new slice each time, the caller's
	return resp, nil
}

// stream returns l's stream, opening it if l has none yet.
func (s *streamClient) stream(l *lane) (*stubecho.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[l]; st != nil {
		return st, nil
	}
	st, err := s.c.Stream(context.Background())
	if err != nil {
		return nil, err
	}
	if s.streams == nil {
		s.streams = make(map[*lane]*stubecho.Stream)
	}
	s.streams[l] = st
	return st, nil
}

// Close half-closes every stream, then closes the connection or socket.
func (s *streamClient) Close() error {
	s.mu.Lock()
	streams := s.streams
	s.streams = nil
	s.mu.Unlock()
	for _, st := range streams {
		st.Close() // a stream a failed call ended fails here too
	}
	return s.c.Close()
}
